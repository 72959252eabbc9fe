//! `wasmctrl new`: scaffold a plugin project.

use std::path::PathBuf;

use crate::tools::build::Language;
use crate::tools::scaffold::{NewOptions, scaffold};

pub(super) fn new(
    name: String,
    language: Language,
    kind: Option<String>,
    owns: Vec<String>,
    dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let options = NewOptions {
        name,
        language,
        kind,
        owns,
        dir,
    };
    let made = scaffold(&options)?;
    let dir = made.dir.display();
    let test = match language {
        Language::Rust => "cargo test",
        Language::Python => "python3 -m unittest",
        Language::JavaScript => "npm install && npm test",
    };
    println!(
        "created {language} plugin {name} for {kind} in {dir} ({files} files)\n\n  cd {dir}\n  {test}\n  wasmctrl dev --config wasmctrl.yaml --apply .   # builds {component}, runs it, applies crd.yaml and sample.yaml",
        language = if language == Language::JavaScript {
            "typescript".to_string()
        } else {
            language.to_string()
        },
        name = options.name,
        kind = made.kind,
        files = made.files,
        component = made.component,
    );
    Ok(())
}
