//! `wasi:http/outgoing-handler`, answered from the cluster's canned
//! answers ([`FakeCluster::answer_http`](crate::testing::FakeCluster::answer_http)).

use crate::http::{HttpError, Request, Response};
use crate::testing::state::with;

/// Records `request` and hands it the first canned answer for its method
/// and URL; without one the request fails as a refused one would.
pub(crate) fn send(request: &Request) -> Result<Response, HttpError> {
    with(|s| {
        s.http_sent.push(request.clone());
        let found = s
            .http_answers
            .iter()
            .position(|(m, u, _)| *m == request.method && *u == request.url);
        match found {
            Some(i) => Ok(s.http_answers.remove(i).2),
            None => Err(HttpError::Failed(format!(
                "HttpRequestDenied: no canned answer for {} {} (FakeCluster::answer_http)",
                request.method, request.url
            ))),
        }
    })
}
