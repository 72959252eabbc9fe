//! A plugin's `settings`: the JSON mapping the host hands the guest as-is,
//! bounded in size because it crosses into every instance.

use super::error::FieldProblem;

/// Bytes of a plugin's `settings` as JSON.
pub(super) const MAX_SETTINGS: usize = 1 << 20;

/// Checks that `settings`, found at `field`, is a mapping of at most
/// [`MAX_SETTINGS`] bytes as JSON.
pub(super) fn check(field: &str, settings: &serde_json::Value) -> Result<(), FieldProblem> {
    if !settings.is_object() {
        return Err(FieldProblem::new(field, "must be a mapping"));
    }
    let len = settings.to_string().len();
    if len > MAX_SETTINGS {
        return Err(FieldProblem::new(
            field,
            format!("is {len} bytes as JSON; at most {MAX_SETTINGS} are allowed"),
        ));
    }
    Ok(())
}
