//! Setting a cluster up from a transcript line the host recorded.

use serde_json::Value;

use super::FakeCluster;
use super::state::{State, with};
use crate::ObjectKey;

/// Why [`FakeCluster::from_transcript`] could not read a transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptError(pub String);

impl std::fmt::Display for TranscriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TranscriptError {}

impl FakeCluster {
    /// A cluster set up as a reconcile the host recorded saw it: `line`
    /// is one transcript line of a plugin's `record:` (see the host's
    /// `wasmctrl::transcript` for the format). Each object the recorded
    /// reconcile was answered with is stored as it was first seen, with its
    /// `resourceVersion`: the answers of `get` and `list`, and of writes to
    /// objects that existed (patch, apply, replace and their status forms;
    /// not `create`, whose object did not exist before). The attempt and
    /// settings are the recorded ones. Returns the cluster and the key to
    /// reconcile.
    ///
    /// ```
    /// use wasmctrl_sdk::testing::FakeCluster;
    /// let line = r#"{"version":1,"plugin":"p","digest":"sha256:00","key":{"namespace":"default","name":"web"},
    ///   "attempt":2,"timeoutMs":10000,"settings":{"replicas":3},"recordedAt":"2026-12-03T12:00:00.000Z",
    ///   "durationMs":1,"context":[],"result":{"outcome":"done"},
    ///   "calls":[{"request":{"verb":"get","kind":{"group":"","version":"v1","kind":"ConfigMap"},
    ///                        "namespace":"default","name":"web"},
    ///             "response":{"object":{"apiVersion":"v1","kind":"ConfigMap",
    ///                         "metadata":{"name":"web","namespace":"default","resourceVersion":"41"}}}}]}"#;
    /// let (_cluster, key) = FakeCluster::from_transcript(line).unwrap();
    /// assert_eq!(key.name, "web");
    /// ```
    pub fn from_transcript(line: &str) -> Result<(Self, ObjectKey), TranscriptError> {
        let t: Value = serde_json::from_str(line)
            .map_err(|e| TranscriptError(format!("not a transcript line: {e}")))?;
        if t["version"] != 1 {
            return Err(TranscriptError(format!(
                "transcript version {}; this SDK reads version 1",
                t["version"]
            )));
        }
        let key = ObjectKey {
            namespace: t["key"]["namespace"].as_str().map(str::to_string),
            name: t["key"]["name"]
                .as_str()
                .ok_or_else(|| TranscriptError("the transcript has no key.name".into()))?
                .to_string(),
        };
        let cluster = Self::new();
        let mut objects = Vec::new();
        for call in t["calls"].as_array().into_iter().flatten() {
            let verb = call["request"]["verb"].as_str().unwrap_or_default();
            let kind = &call["request"]["kind"];
            let response = &call["response"];
            match verb {
                "get" | "patch" | "replace" | "patch-status" | "replace-status" => {
                    if let Some(o) = response.get("object") {
                        objects.push((kind.clone(), o.clone()));
                    }
                }
                "list" => {
                    for o in response["objects"].as_array().into_iter().flatten() {
                        objects.push((kind.clone(), o.clone()));
                    }
                }
                _ => {}
            }
        }
        with(|s| {
            for (kind, object) in objects {
                s.seed(&kind, object)?;
            }
            s.attempt = t["attempt"].as_u64().unwrap_or(0) as u32;
            s.settings = t["settings"].to_string();
            Ok::<_, TranscriptError>(())
        })?;
        Ok((cluster, key))
    }
}

impl State {
    /// Stores `object` (of recorded `kind`) unless the object is already
    /// stored; later writes get revisions above every recorded one.
    fn seed(&mut self, kind: &Value, object: Value) -> Result<(), TranscriptError> {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().ok_or_else(|| {
            TranscriptError(format!("a recorded object has no metadata.name: {object}"))
        })?;
        let key = (
            kind["group"].as_str().unwrap_or_default().to_string(),
            kind["kind"].as_str().unwrap_or_default().to_string(),
            meta["namespace"].as_str().map(str::to_string),
            name.to_string(),
        );
        if let Some(rv) = meta["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
        {
            self.revision = self.revision.max(rv);
        }
        self.objects.entry(key).or_insert(object);
        Ok(())
    }
}
