//! Media types as clients send them in `Accept` and `Content-Type`: a
//! type, then `;`-separated parameters (`application/json;as=Table;g=meta.k8s.io;v=v1`).

/// One media type of a header: its type, lower-cased, and its parameters.
pub(crate) struct MediaType {
    pub(crate) essence: String,
    params: Vec<(String, String)>,
}

impl MediaType {
    /// Parses one media type; parameters without `=` are ignored.
    pub(crate) fn parse(text: &str) -> Self {
        let mut parts = text.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let params = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Self { essence, params }
    }

    /// The media types of an `Accept` header, in the client's order.
    pub(crate) fn offers(accept: &str) -> impl Iterator<Item = MediaType> + '_ {
        accept.split(',').map(Self::parse)
    }

    /// Whether parameter `key` is `value`.
    pub(crate) fn has(&self, key: &str, value: &str) -> bool {
        self.params.iter().any(|(k, v)| k == key && v == value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_parameters() {
        let m = MediaType::parse(" Application/JSON ; as=Table;g= meta.k8s.io ;v=v1;bare");
        assert_eq!(m.essence, "application/json");
        assert!(m.has("as", "Table") && m.has("g", "meta.k8s.io") && m.has("v", "v1"));
        assert!(!m.has("bare", "") && !m.has("as", "table"));
        let offers: Vec<_> = MediaType::offers("a/b;v=1, c/d")
            .map(|m| m.essence)
            .collect();
        assert_eq!(offers, ["a/b", "c/d"]);
    }
}
