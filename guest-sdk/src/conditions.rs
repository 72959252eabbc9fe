//! Status conditions (`metav1.Condition`), with apimachinery's
//! `meta.SetStatusCondition` semantics.
//!
//! ```
//! use wasmctrl_sdk::conditions;
//! use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//!
//! let mut status_conditions: Vec<Condition> = Vec::new();
//! let generation = Some(3);
//! let ready = Condition {
//!     observed_generation: generation,
//!     ..conditions::new("Ready", false, "Progressing", "1/2 replicas ready")
//! };
//! assert!(conditions::set(&mut status_conditions, ready.clone())); // changed: write the status
//! assert!(!conditions::set(&mut status_conditions, ready)); // nothing new
//! assert!(!conditions::is_true(&status_conditions, "Ready"));
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition of type `type_` with `status` `"True"`/`"False"`, `reason`
/// (CamelCase) and `message`, its `lastTransitionTime` now (whole seconds, as
/// the API server stores it) and no `observedGeneration` (set it with struct
/// update syntax).
pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: None,
        last_transition_time: now(),
    }
}

/// The current time, in whole seconds.
pub fn now() -> Time {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Sets `condition` in `conditions`, replacing the one of the same type.
///
/// `lastTransitionTime` only moves when the status changes: an existing
/// condition with the same status keeps its time, while its reason, message
/// and observedGeneration are updated. Returns true if anything other than a
/// kept time changed (that is, whether the status needs writing).
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    let mut changed = false;
    if existing.status != condition.status {
        existing.status = condition.status;
        existing.last_transition_time = condition.last_transition_time;
        changed = true;
    }
    if existing.reason != condition.reason {
        existing.reason = condition.reason;
        changed = true;
    }
    if existing.message != condition.message {
        existing.message = condition.message;
        changed = true;
    }
    if existing.observed_generation != condition.observed_generation {
        existing.observed_generation = condition.observed_generation;
        changed = true;
    }
    changed
}

/// The condition of type `type_`, if any.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True if the condition of type `type_` exists with status `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Removes the condition of type `type_`; returns true if there was one.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}
