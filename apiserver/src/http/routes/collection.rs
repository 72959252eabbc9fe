//! Requests on a collection: list pages with their continue tokens, watch
//! parameters, and deleting every object a selector matches.

use std::time::Duration;

use tokio::time::Instant;

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::body::delete_request;
use super::params::Query;
use super::request::Req;
use super::target::Target;
use crate::error::{ApiError, Cause};
use crate::http::response;
use crate::http::state::ServerState;
use crate::http::watch::WatchParams;
use crate::registry::resources::ResourceInfo;
use crate::registry::selectors::{FieldSelector, LabelSelector, SelectorError};
use crate::registry::storage::{Filter, parse_json};
use crate::registry::views::to_view;

fn selector_error(e: SelectorError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

fn selectors(q: &Query, info: &ResourceInfo) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(selector_error)?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").unwrap_or(""),
        &info.group,
        &info.kind,
    )
    .map_err(selector_error)?;
    Ok((labels, fields))
}

/// kube-apiserver's words for a continue token whose resourceVersion is
/// older than the history it can roll back through.
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

/// What a continue token carries: the list's resourceVersion, the last key
/// it returned, and how many objects remained after it, where known.
struct Continue {
    rv: u64,
    after: (String, String),
    remaining: Option<u64>,
}

impl Continue {
    /// Opaque to clients, as kube-apiserver's are. A client that alters the
    /// count gets only a wrong `remainingItemCount` back: it never decides
    /// what is listed.
    fn encode(&self) -> String {
        let mut token = json!({"rv": self.rv, "ns": self.after.0, "name": self.after.1});
        if let Some(n) = self.remaining {
            token["remaining"] = json!(n);
        }
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&token).unwrap_or_default())
    }

    fn decode(token: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::BadRequest("continue key is not valid: invalid token".into());
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| bad())?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        Ok(Continue {
            rv: v["rv"].as_u64().ok_or_else(bad)?,
            after: (
                v["ns"].as_str().ok_or_else(bad)?.to_string(),
                v["name"].as_str().ok_or_else(bad)?.to_string(),
            ),
            remaining: v["remaining"].as_u64(),
        })
    }
}

/// The resourceVersion a list asks for exactly
/// (`resourceVersionMatch=Exact`), after upstream's checks of the list
/// options (`ValidateListOptions`), answered as its 422s.
fn exact_version(q: &Query, rv: Option<&str>) -> Result<Option<u64>, ApiError> {
    let Some(matching) = q.get("resourceVersionMatch").filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    const FIELD: &str = "resourceVersionMatch";
    let mut causes = Vec::new();
    if rv.is_none() {
        causes.push(Cause::forbidden(
            FIELD,
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if q.get("continue").is_some_and(|c| !c.is_empty()) {
        causes.push(Cause::forbidden(
            FIELD,
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if !matches!(matching, "Exact" | "NotOlderThan") {
        causes.push(Cause::not_supported(
            FIELD,
            matching,
            &["Exact", "NotOlderThan", ""],
        ));
    }
    if matching == "Exact" && rv == Some("0") {
        causes.push(Cause::forbidden(
            FIELD,
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
    }
    match (matching, rv) {
        ("Exact", Some(rv)) => rv
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}"))),
        _ => Ok(None),
    }
}

pub(super) fn list(
    shared: &ServerState,
    t: &Target<'_>,
    q: &Query,
    table: Option<&'static str>,
    deadline: Option<Instant>,
) -> Result<Response, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(q, info)?;
    let rv_param = q.get("resourceVersion").filter(|s| !s.is_empty());
    let exact = exact_version(q, rv_param)?;
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let cont = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(Continue::decode(c)?),
        None => None,
    };
    let name_pin = fields.exact_name().map(str::to_string);
    // Parsing every object of a large resource for a selector takes
    // seconds: once the request's deadline passes, the rest are skipped
    // unparsed and the list answers 504, as upstream's timeout does.
    let out_of_time = std::cell::Cell::new(false);
    let filter = |raw: &[u8]| {
        if out_of_time.get() || deadline.is_some_and(|d| Instant::now() >= d) {
            out_of_time.set(true);
            return false;
        }
        let o = parse_json(raw);
        name_pin
            .as_deref()
            .is_none_or(|n| crate::values::meta_str(&o, "name") == Some(n))
            && labels.matches(&o)
            && fields.matches(&o)
    };
    // Without a selector nothing is parsed: the stored JSON is the answer.
    let selective = name_pin.is_some() || !labels.is_empty() || !fields.is_empty();
    let filter: Option<Filter<'_>> = selective.then_some(&filter);
    // Later pages show the objects as they stood at the first page's
    // resourceVersion, and report it, as kube-apiserver's do.
    let mut page = match (&cont, exact) {
        (None, None) => shared
            .objects
            .store
            .list(&info.storage, t.namespace, None, limit, filter),
        // As etcd serves a revision until it is compacted: the objects as
        // they stood at that resourceVersion, while the history holds it.
        (None, Some(at)) => {
            let current = shared.objects.store.current_rv();
            if at > current {
                return Err(ApiError::Timeout(format!(
                    "Too large resource version: {at}, current: {current}"
                )));
            }
            shared
                .objects
                .store
                .list_at(&info.storage, t.namespace, at, None, limit, filter)
                .map_err(|e| shared.objects.store_error(info, "", e))?
        }
        (Some(cont), _) => {
            let mut page = shared
                .objects
                .store
                .list_at(
                    &info.storage,
                    t.namespace,
                    cont.rv,
                    Some(&cont.after),
                    limit,
                    filter,
                )
                .map_err(|_| ApiError::Expired(CONTINUE_EXPIRED.into()))?;
            // The first page counted what followed it; each page since
            // takes its own share off.
            if page.next.is_some() && !selective {
                page.remaining = cont
                    .remaining
                    .and_then(|n| n.checked_sub(page.items.len() as u64))
                    .filter(|n| *n > 0);
            }
            page
        }
    };
    if out_of_time.get() {
        return Err(ApiError::request_timeout());
    }
    let mut metadata = json!({"resourceVersion": page.rv.to_string()});
    if let Some(after) = page.next.take() {
        let token = Continue {
            rv: page.rv,
            after,
            remaining: page.remaining,
        };
        metadata["continue"] = json!(token.encode());
        if let Some(n) = page.remaining {
            metadata["remainingItemCount"] = json!(n);
        }
    }
    let items = page.items;
    // The answer's share of the budget is taken before it is built: the
    // items are the stored objects, shared, until then.
    let estimate = items.iter().map(|o| o.len() + 1).sum::<usize>() + 1024;
    let reserved = shared.list_budget.reserve(&shared.metrics, estimate)?;
    if let Some(version) = table {
        let include = crate::http::table::Include::parse(q.get("includeObject"));
        let mut body = Vec::new();
        let objects = items.iter().map(|o| to_view(info, &parse_json(o)));
        crate::http::table::write_table(&mut body, info, version, objects, &metadata, include)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        return reserved.answer(&shared.metrics, body);
    }
    // Serialize items straight into the body: a 100k-object list should not
    // build a second Value tree.
    let mut out = Vec::with_capacity(estimate);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, &info.list_kind())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, &info.api_version())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &metadata).map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"items\":[");
    for (i, obj) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if crate::registry::views::stored_view_is_identity(info, obj) {
            out.extend_from_slice(obj);
        } else {
            serde_json::to_writer(&mut out, &to_view(info, &parse_json(obj)))
                .map_err(|e| ApiError::Internal(e.to_string()))?;
        }
    }
    out.extend_from_slice(b"]}");
    reserved.answer(&shared.metrics, out)
}

pub(super) fn watch_params(
    t: &Target<'_>,
    q: &Query,
    table: Option<&'static str>,
) -> Result<WatchParams, ApiError> {
    let (labels, fields) = selectors(q, &t.info)?;
    Ok(WatchParams {
        namespace: t.namespace.map(str::to_string),
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q.get("resourceVersionMatch").map(str::to_string),
        send_initial_events: q.flag("sendInitialEvents"),
        allow_bookmarks: q.flag("allowWatchBookmarks").unwrap_or(false),
        timeout: q
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs),
        labels,
        fields,
        table: table.map(|v| {
            (
                v,
                crate::http::table::Include::parse(q.get("includeObject")),
            )
        }),
    })
}

pub(super) async fn delete_collection(
    shared: &ServerState,
    t: &Target<'_>,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    let q = req.q;
    let info = &t.info;
    let (labels, fields) = selectors(q, info)?;
    let (ctx, opts) = delete_request(shared, info, t.namespace.unwrap_or(""), req)?;
    let items = shared
        .objects
        .store
        .list(
            &info.storage,
            t.namespace,
            None,
            None,
            Some(&|raw: &[u8]| {
                let o = parse_json(raw);
                labels.matches(&o) && fields.matches(&o)
            }),
        )
        .items;
    let mut deleted = Vec::new();
    for obj in items.iter().map(|o| parse_json(o)) {
        let ns = crate::values::meta_str(&obj, "namespace")
            .unwrap_or("")
            .to_string();
        let name = crate::values::meta_str(&obj, "name")
            .unwrap_or("")
            .to_string();
        match shared
            .objects
            .delete_object(info, &ns, &name, &opts, &ctx)
            .await
        {
            Ok(_) => deleted.push(to_view(info, &obj)),
            // Someone else deleted it first: that is fine for a collection.
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "kind": info.list_kind(),
            "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": shared.objects.store.current_rv().to_string()},
            "items": deleted,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_with_and_without_a_count() {
        for remaining in [Some(7), None] {
            let token = Continue {
                rv: 42,
                after: ("ns".into(), "n".into()),
                remaining,
            };
            let back = Continue::decode(&token.encode()).unwrap();
            assert_eq!(
                (back.rv, back.after, back.remaining),
                (42, token.after, remaining)
            );
        }
        assert!(Continue::decode("!!").is_err());
    }
}
