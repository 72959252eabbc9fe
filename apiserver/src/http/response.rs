//! Building HTTP responses, errors included: an [`ApiError`] answers as
//! its `metav1.Status`.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::ApiError;

/// A JSON response with the given status.
pub(crate) fn json(code: StatusCode, body: &Value) -> Response {
    json_with_type(code, "application/json", body)
}

/// A JSON response with an explicit content type (aggregated discovery
/// answers with its own media type).
pub(crate) fn json_with_type(code: StatusCode, content_type: &str, body: &Value) -> Response {
    bytes_with_type(
        code,
        content_type,
        serde_json::to_vec(body).unwrap_or_default(),
    )
}

/// A response carrying already-serialized bytes.
pub(crate) fn bytes_with_type(
    code: StatusCode,
    content_type: &str,
    body: impl Into<Body>,
) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json(code, &self.to_status())
    }
}
