//! Why a config was refused, named by file, line, field path and plugin.

use std::path::{Path, PathBuf};

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {location}{path}: {message}")]
    Parse {
        file: PathBuf,
        /// `line L column C: ` when known.
        location: String,
        /// The field path, e.g. `plugins[0].reconcileTimeout`.
        path: String,
        message: String,
    },
    #[error("{file}: {path}{plugin}: {message}")]
    Invalid {
        file: PathBuf,
        path: String,
        /// ` (plugin "webapp")` when the field belongs to a plugin.
        plugin: String,
        message: String,
    },
}

/// A field that is wrong: its path (relative to where the checked value
/// sits: `reconcileTimeout`, `source.oci`, `permissions[0].verbs`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: String,
    pub message: String,
}

impl FieldProblem {
    pub(super) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl ConfigError {
    /// The refusal of `file` whose text does not deserialize: the YAML
    /// location and the field path reported apart from the message.
    pub(super) fn parse(
        file: &Path,
        error: serde_path_to_error::Error<serde_norway::Error>,
    ) -> Self {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let location = inner
            .location()
            .map(|l| format!("line {} column {}: ", l.line(), l.column()))
            .unwrap_or_default();
        ConfigError::Parse {
            file: file.to_path_buf(),
            location,
            path: if path == "." { String::new() } else { path },
            message: suggest_nearest(strip_location(&inner.to_string())),
        }
    }

    /// The refusal of `file` for `problem`, a field of the plugin named
    /// `plugin` when given.
    pub(super) fn invalid(file: &Path, plugin: Option<&str>, problem: FieldProblem) -> Self {
        ConfigError::Invalid {
            file: file.to_path_buf(),
            path: problem.field,
            plugin: plugin
                .map(|p| format!(" (plugin {p:?})"))
                .unwrap_or_default(),
            message: problem.message,
        }
    }
}

/// serde_norway prefixes its own path ("plugins[0]: ") and appends
/// " at line L column C"; both are reported apart, more precisely.
fn strip_location(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    };
    match message.split_once(": ") {
        Some((prefix, rest)) if !prefix.contains(' ') => rest.to_string(),
        _ => message.to_string(),
    }
}

/// serde lists every known field after an unknown one ("unknown field
/// `maxRetrys`, expected one of `name`, … (22 more)"); when one of them is
/// close to what was written, only that one is named: "unknown field
/// `maxRetrys`: did you mean `maxRetries`?".
fn suggest_nearest(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((written, expected)) = rest.split_once("`, expected ") else {
        return message;
    };
    let known = expected.split('`').skip(1).step_by(2);
    let nearest = known
        .map(|k| {
            (
                strsim::damerau_levenshtein(&written.to_lowercase(), &k.to_lowercase()),
                k,
            )
        })
        .filter(|(distance, _)| *distance <= (written.chars().count() / 3).max(1))
        .min_by_key(|(distance, _)| *distance);
    match nearest {
        Some((_, k)) => format!("unknown field `{written}`: did you mean `{k}`?"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::suggest_nearest;

    #[test]
    fn an_unknown_field_close_to_a_known_one_names_only_that_one() {
        let said = |m: &str| suggest_nearest(m.to_string());
        assert_eq!(
            said("unknown field `maxRetrys`, expected one of `name`, `maxRetries`, `memoryLimit`"),
            "unknown field `maxRetrys`: did you mean `maxRetries`?"
        );
        assert_eq!(
            said(
                "unknown field `ReconcileTimout`, expected one of `reconcileTimeout`, `resyncPeriod`"
            ),
            "unknown field `ReconcileTimout`: did you mean `reconcileTimeout`?"
        );
        // Nothing close: the list stays, so the reader sees what exists.
        let far = "unknown field `colour`, expected one of `name`, `path`";
        assert_eq!(said(far), far);
        assert_eq!(said("invalid type: sequence"), "invalid type: sequence");
    }
}
