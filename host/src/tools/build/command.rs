//! Running a build's tools, with what they printed kept for the error.

use std::process::{Command, Output, Stdio};

use super::error::BuildError;
use super::language::Language;
use super::limits::OUTPUT_TAIL;

/// Runs a build step, capturing its output for the error.
pub(super) fn run(
    step: &'static str,
    cmd: &mut Command,
    language: Language,
    tool: &'static str,
) -> Result<Output, BuildError> {
    let command = describe(cmd);
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::MissingTool {
                tool,
                language,
                problem: format!("`{command}` could not be started ({e})"),
                hint: match language {
                    Language::Rust => "install Rust and `rustup target add wasm32-wasip2`",
                    Language::Python => "install Python 3.11 or newer with its venv module",
                    Language::JavaScript => "install Node.js 20 or newer with npm",
                },
            },
            _ => BuildError::Step {
                step,
                command: command.clone(),
                status: "could not start".into(),
                output: e.to_string(),
            },
        })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(BuildError::Step {
            step,
            command,
            status: output.status.to_string(),
            output: tail(&output),
        })
    }
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The end of a command's stderr and stdout, bounded.
pub(super) fn tail(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.trim().is_empty() {
        text.push_str(&stdout);
    }
    let text = text.trim();
    if text.len() <= OUTPUT_TAIL {
        return text.to_string();
    }
    let mut start = text.len() - OUTPUT_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}
