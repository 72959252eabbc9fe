//! Reading a registry's `WWW-Authenticate` challenge.

/// The realm and service of a `Bearer` challenge
/// (`Bearer realm="https://auth.example/token",service="registry"`); None
/// for another scheme.
pub(super) fn bearer_challenge(header: &str) -> Option<(String, Option<String>)> {
    let (scheme, params) = header.trim().split_once(char::is_whitespace)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().trim_start_matches(',').trim();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        if key.eq_ignore_ascii_case("realm") {
            realm = Some(value);
        } else if key.eq_ignore_ascii_case("service") {
            service = Some(value);
        }
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some((realm?, service))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read() {
        assert_eq!(
            bearer_challenge(
                r#"Bearer realm="https://auth.example/token",service="reg, istry",scope="x""#
            ),
            Some((
                "https://auth.example/token".into(),
                Some("reg, istry".into())
            ))
        );
        assert_eq!(
            bearer_challenge("bearer realm=https://a/t"),
            Some(("https://a/t".into(), None))
        );
        assert_eq!(bearer_challenge(r#"Basic realm="registry""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="x""#), None);
    }
}
