//! `record` of a plugin: where its reconciles' transcripts are written.

use std::path::PathBuf;

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{bytes_within, count, quantity};

/// `record:` of a plugin: its reconciles' transcripts, one JSON line each,
/// in `<dir>/<plugin>.jsonl`, rotated (see `ops::transcript::record`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecordConfig {
    /// The directory (relative to the config file).
    pub dir: PathBuf,
    /// `all`, or a label selector on the reconciled object: only the keys
    /// whose object matches are recorded.
    #[serde(default = "record_all")]
    pub keys: String,
    /// Transcripts per file before it rotates.
    #[serde(default = "default_record_max")]
    pub max: u64,
    /// Bytes per file before it rotates; a transcript larger than this is
    /// dropped (counted in `wasmctrl_record_dropped_total`).
    #[serde(default = "default_record_max_bytes", deserialize_with = "quantity")]
    pub max_bytes: u64,
    /// Files kept, the current one included: the plugin's transcripts take
    /// at most `files × maxBytes`.
    #[serde(default = "default_record_files")]
    pub files: u32,
}

/// The largest `record.maxBytes`: one transcript line at most.
pub const MAX_RECORD_BYTES: u64 = 256 << 20;

fn record_all() -> String {
    "all".into()
}

fn default_record_max() -> u64 {
    1000
}

fn default_record_max_bytes() -> u64 {
    16 << 20
}

fn default_record_files() -> u32 {
    4
}

impl RecordConfig {
    /// The keys' label selector; None for `all`.
    pub fn selector(&self) -> Result<Option<crate::meta::selector::LabelSelector>, String> {
        match self.keys.trim() {
            "all" => Ok(None),
            "" => Err("must be `all` or a label selector".into()),
            s => crate::meta::selector::LabelSelector::parse(s).map(Some),
        }
    }

    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| {
            r.map_err(|m| FieldProblem::new(format!("record.{field}"), m))
        };
        if self.dir.as_os_str().is_empty() {
            return Err(FieldProblem::new(
                "record.dir",
                "is required: the directory the transcripts go to",
            ));
        }
        check("keys", self.selector().map(|_| ()))?;
        check("max", count(self.max, 1..=1_000_000))?;
        check(
            "maxBytes",
            bytes_within(self.max_bytes, (64 << 10)..=MAX_RECORD_BYTES),
        )?;
        check("files", count(u64::from(self.files), 1..=100))
    }
}
