//! The status the host writes on a WasmReconciler.
//!
//! ```yaml
//! status:
//!   observedGeneration: 3            # the spec generation acted on
//!   servingDigest: sha256:…          # the component reconciling now
//!   version: 1.0.0                   # its metadata version
//!   source: oci://registry/p:1       # where it came from
//!   pluginGeneration: 2              # 1 at start, +1 per swap or rebuild
//!   resolvedDigest: sha256:…         # what the source last resolved to
//!   candidate:                       # with spec.candidate
//!     mode: canary                   # shadow | canary
//!     state: rolled-back             # shadow | canary | rolled-back | promoted
//!     reason: "the candidate failed 48% of 25 reconciles …"
//!     decidedAt: 2026-12-03T11:00:00Z
//!     digest: sha256:…
//!     version: 2.0.0
//!     source: oci://registry/p:2
//!   conditions:
//!     - { type: Ready, status: "True", reason: Serving, … }
//!     - { type: Degraded, status: "True", reason: LoadFailed, message: … }
//! ```
//!
//! `resolvedDigest` differs from `servingDigest` when the newest version
//! fetched was refused: the previous one keeps serving (`Ready` stays
//! True) and `Degraded` says why. `Ready` is always the first condition
//! (the `Ready` printer column reads `.status.conditions[0]`).

use serde::{Deserialize, Serialize};

use super::spec::{Refusal, bounded};

/// A plugin as the manager runs it, for the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub digest: String,
    pub version: String,
    pub origin: String,
    /// The plugin's state (`running`, `starting`, …).
    pub state: &'static str,
    /// Whether its informers synced (it reconciles, or stands by).
    pub synced: bool,
    pub generation: u64,
    /// Why the last reload (a moved tag, a changed file) or sync failed.
    pub last_error: Option<String>,
    /// The candidate version running beside it, if any.
    pub candidate: Option<CandidateState>,
}

/// `.status.candidate`: the candidate version beside the serving one, and
/// where its rollout is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateState {
    /// `shadow` or `canary`.
    pub mode: String,
    /// `shadow`, `canary` (reconciling its share), `rolled-back` or
    /// `promoted`.
    pub state: String,
    /// Why a canary was rolled back.
    #[serde(default)]
    pub reason: Option<String>,
    /// When a canary was rolled back or promoted (RFC 3339).
    #[serde(default)]
    pub decided_at: Option<String>,
    pub digest: String,
    pub version: String,
    pub source: String,
}

/// `.status` of a WasmReconciler. Every field is written (absent ones as
/// null, so a merge patch removes them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub serving_digest: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub plugin_generation: Option<u64>,
    #[serde(default)]
    pub resolved_digest: Option<String>,
    #[serde(default)]
    pub candidate: Option<CandidateState>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A status condition (metav1.Condition).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub last_transition_time: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl ObjectStatus {
    /// The status of an object at `generation`: `serving` is its plugin in
    /// the manager (None: none runs), `refusal` why its spec does not run,
    /// `resolved` the digest its source last fetched. Transition times are
    /// kept from `previous` for conditions whose status did not change.
    pub fn new(
        generation: Option<i64>,
        serving: Option<&Serving>,
        refusal: Option<&Refusal>,
        resolved: Option<&str>,
        previous: &ObjectStatus,
        now: &str,
    ) -> Self {
        let keeps_serving = |s: &Serving| {
            format!(
                "{} (version {}) from {} keeps serving",
                s.digest, s.version, s.origin
            )
        };
        let ready = match (serving, refusal) {
            (Some(s), _) if s.synced => cond(
                "Ready",
                true,
                "Serving",
                format!(
                    "{} (version {}) from {} is {}",
                    s.digest, s.version, s.origin, s.state
                ),
            ),
            (Some(s), _) if s.last_error.is_some() => cond(
                "Ready",
                false,
                "InformersNotSynced",
                s.last_error.clone().unwrap_or_default(),
            ),
            (Some(_), _) => cond(
                "Ready",
                false,
                "Starting",
                "loaded; its informers are syncing".into(),
            ),
            (None, Some(r)) => cond("Ready", false, r.reason, r.message.clone()),
            (None, None) => cond("Ready", false, "NotServing", "no version is loaded".into()),
        };
        let degraded = match (serving, refusal) {
            (Some(s), Some(r)) => cond(
                "Degraded",
                true,
                r.reason,
                format!("{}; {}", r.message, keeps_serving(s)),
            ),
            (None, Some(r)) => cond("Degraded", true, r.reason, r.message.clone()),
            (Some(s), None) if s.synced && s.last_error.is_some() => cond(
                "Degraded",
                true,
                "ReloadFailed",
                format!(
                    "{}; {}",
                    s.last_error.as_deref().unwrap_or_default(),
                    keeps_serving(s)
                ),
            ),
            _ => cond("Degraded", false, "AsExpected", String::new()),
        };
        let conditions = [ready, degraded]
            .into_iter()
            .map(|mut c| {
                c.observed_generation = generation;
                c.message = bounded(c.message);
                c.last_transition_time = previous
                    .conditions
                    .iter()
                    .find(|p| p.type_ == c.type_ && p.status == c.status)
                    .map(|p| p.last_transition_time.clone())
                    .unwrap_or_else(|| now.to_string());
                c
            })
            .collect();
        Self {
            observed_generation: generation,
            serving_digest: serving.map(|s| s.digest.clone()),
            version: serving.map(|s| s.version.clone()),
            source: serving.map(|s| s.origin.clone()),
            plugin_generation: serving.map(|s| s.generation),
            resolved_digest: resolved
                .map(str::to_string)
                .or_else(|| serving.map(|s| s.digest.clone())),
            candidate: serving.and_then(|s| s.candidate.clone()).map(|mut c| {
                c.reason = c.reason.map(bounded);
                c
            }),
            conditions,
        }
    }
}

fn cond(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Condition::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(digest: &str, last_error: Option<&str>) -> Serving {
        Serving {
            digest: digest.into(),
            version: "1.0.0".into(),
            origin: "oci://r/p:1".into(),
            state: "running",
            synced: true,
            generation: 1,
            last_error: last_error.map(str::to_string),
            candidate: None,
        }
    }

    fn condition<'a>(s: &'a ObjectStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_serving_plugin_is_ready_and_not_degraded() {
        let s = ObjectStatus::new(
            Some(2),
            Some(&serving("sha256:a", None)),
            None,
            Some("sha256:a"),
            &ObjectStatus::default(),
            "t1",
        );
        assert_eq!(s.conditions[0].type_, "Ready", "Ready comes first");
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "Degraded").status, "False");
        assert_eq!(s.serving_digest.as_deref(), Some("sha256:a"));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(condition(&s, "Ready").observed_generation, Some(2));
    }

    #[test]
    fn a_refused_version_leaves_the_previous_one_serving() {
        let refusal = Refusal::new("LoadFailed", "not a component");
        let before = ObjectStatus::new(
            Some(1),
            Some(&serving("sha256:a", None)),
            None,
            None,
            &ObjectStatus::default(),
            "t1",
        );
        let s = ObjectStatus::new(
            Some(2),
            Some(&serving("sha256:a", None)),
            Some(&refusal),
            Some("sha256:b"),
            &before,
            "t2",
        );
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(
            condition(&s, "Ready").last_transition_time,
            "t1",
            "Ready did not change"
        );
        let d = condition(&s, "Degraded");
        assert_eq!(
            (
                d.status.as_str(),
                d.reason.as_str(),
                d.last_transition_time.as_str()
            ),
            ("True", "LoadFailed", "t2")
        );
        assert!(
            d.message.contains("not a component")
                && d.message
                    .contains("sha256:a (version 1.0.0) from oci://r/p:1 keeps serving"),
            "{}",
            d.message
        );
        assert_eq!(s.serving_digest.as_deref(), Some("sha256:a"));
        assert_eq!(s.resolved_digest.as_deref(), Some("sha256:b"));
        // A failed reload of the running plugin (its tag moved) says so too.
        let s = ObjectStatus::new(
            Some(2),
            Some(&serving("sha256:a", Some("wrong world"))),
            None,
            None,
            &before,
            "t3",
        );
        assert_eq!(condition(&s, "Degraded").reason, "ReloadFailed");
    }

    #[test]
    fn nothing_serving_is_not_ready_with_the_reason() {
        let refusal = Refusal::new("NameTaken", "the host config has a plugin named stamp");
        let s = ObjectStatus::new(
            Some(1),
            None,
            Some(&refusal),
            None,
            &ObjectStatus::default(),
            "t",
        );
        let r = condition(&s, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", "NameTaken")
        );
        assert_eq!(condition(&s, "Degraded").status, "True");
        assert_eq!(s.serving_digest, None);
        let starting = Serving {
            synced: false,
            state: "starting",
            ..serving("sha256:a", None)
        };
        let s = ObjectStatus::new(
            Some(1),
            Some(&starting),
            None,
            None,
            &ObjectStatus::default(),
            "t",
        );
        assert_eq!(condition(&s, "Ready").reason, "Starting");
    }

    #[test]
    fn absent_fields_serialize_as_null_for_a_merge_patch() {
        let v = serde_json::to_value(ObjectStatus::default()).unwrap();
        assert!(
            v["servingDigest"].is_null() && v.as_object().unwrap().contains_key("servingDigest")
        );
    }
}
