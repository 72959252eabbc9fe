//! The languages a plugin can be written in, and their project files.

use std::fmt;

/// The language of a plugin directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    /// JavaScript or TypeScript.
    JavaScript,
}

impl Language {
    /// The project file that marks a directory as this language.
    pub fn project_file(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::Python => "pyproject.toml",
            Language::JavaScript => "package.json",
        }
    }

    pub(super) fn all() -> [Language; 3] {
        [Language::Rust, Language::Python, Language::JavaScript]
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "javascript",
        })
    }
}

impl std::str::FromStr for Language {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rust" => Ok(Language::Rust),
            "python" => Ok(Language::Python),
            "javascript" | "typescript" | "js" | "ts" => Ok(Language::JavaScript),
            other => Err(format!(
                "unknown language {other:?} (rust, python, javascript or typescript)"
            )),
        }
    }
}
