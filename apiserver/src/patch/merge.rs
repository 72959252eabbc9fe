//! JSON merge patch, RFC 7386 (`application/merge-patch+json`), applied by
//! the `json-patch` crate. Nothing here needs a bound of its own: a merge
//! patch adds nothing it does not spell out, so the request body's bounds
//! (size, JSON nesting) bound the result.

use serde_json::Value;

use super::PatchError;

/// Applies an RFC 7386 merge patch.
///
/// Objects merge key by key, a `null` member removes the key, and any other
/// value (lists included) replaces the target value. A patch that is not an
/// object replaces the whole target.
///
/// # Errors
///
/// None: every JSON value is a valid merge patch. The `Result` keeps the
/// signature in line with the other patch types.
pub fn merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let mut merged = target.clone();
    json_patch::merge(&mut merged, patch);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every example of RFC 7386 Appendix A.
    #[test]
    fn rfc7386_appendix_a_examples() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(
                merge_patch(&target, &patch).unwrap(),
                expected,
                "target {target} patch {patch}"
            );
        }
    }

    #[test]
    fn rfc7386_section_3_example() {
        let target = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        assert_eq!(
            merge_patch(&target, &patch).unwrap(),
            json!({
                "title": "Hello!",
                "author": {"givenName": "John"},
                "tags": ["example"],
                "content": "This will be unchanged",
                "phoneNumber": "+01-123-456-7890"
            })
        );
    }
}
