//! A request's query parameters and headers.

use axum::http::{HeaderMap, header};

/// Query parameters; empty pairs (`?&watch=true`, a bare `?`) are ignored.
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(q: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(q.unwrap_or("").as_bytes())
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    pub(super) fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(pk, _)| pk == k)
            .map(|(_, v)| v.as_str())
    }
    /// A boolean parameter, read as Go's `strconv.ParseBool` reads true
    /// (anything else is false).
    pub(super) fn flag(&self, k: &str) -> Option<bool> {
        self.get(k)
            .map(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
    }
}

pub(super) fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_ignores_empty_pairs() {
        let q = Query::parse(Some("&watch=true&&labelSelector=app%3Dx&"));
        assert_eq!(q.flag("watch"), Some(true));
        assert_eq!(q.get("labelSelector"), Some("app=x"));
        let q = Query::parse(Some(""));
        assert!(q.0.is_empty());
    }
}
