//! The `secrets` import: `reveal` answered from the secrets a test set
//! with [`FakeCluster::set_secret`](crate::testing::FakeCluster::set_secret),
//! refused as the host refuses it.

use crate::bindings::wasmctrl::reconciler::types as wit;
use crate::testing::state::with;

pub fn reveal(name: &str) -> Result<String, wit::ApiError> {
    with(|s| match s.secrets.get(name) {
        None => Err(wit::ApiError::NotFound(format!(
            "no secret named {name:?} (the fake holds only those set with FakeCluster::set_secret)"
        ))),
        Some((_, false)) => Err(wit::ApiError::Forbidden(format!(
            "secret {name:?} is not revealed to the plugin: its secrets entry does not say reveal: true"
        ))),
        Some((value, true)) => Ok(value.clone()),
    })
}
