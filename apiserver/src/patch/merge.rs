//! JSON merge patch, RFC 7386 (`application/merge-patch+json`), applied by
//! `wasmctrl_apimachinery::patch`. Nothing here needs a bound of its own: a
//! merge patch adds nothing it does not spell out, so the request body's
//! bounds (size, JSON nesting) bound the result.

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
    wasmctrl_apimachinery::patch::merge_patch(&mut merged, patch);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
