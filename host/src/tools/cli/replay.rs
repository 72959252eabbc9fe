//! `wasmctrl replay`: recorded reconciles re-run against a build of the
//! plugin, with no cluster.

use std::path::PathBuf;

use anyhow::Context as _;

use super::artifact::check_runtime;

/// `wasmctrl replay`: Ok(true) when nothing diverged.
pub(super) async fn replay(
    paths: Vec<PathBuf>,
    plugin: PathBuf,
    key: Option<String>,
    json: bool,
) -> anyhow::Result<bool> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            anyhow::ensure!(
                !found.is_empty(),
                "{}: no transcripts (.jsonl files) in this directory",
                path.display()
            );
            found.sort();
            files.extend(found);
        } else {
            files.push(path);
        }
    }
    let mut transcripts: Vec<(String, _)> = crate::ops::transcript::read_files(&files)?
        .into_iter()
        .map(|(file, line, t)| (format!("{}:{line}", file.display()), t))
        .collect();
    if let Some(key) = &key {
        transcripts.retain(|(_, t)| crate::ObjectKey::from(&t.key).to_string() == *key);
    }
    anyhow::ensure!(
        !transcripts.is_empty(),
        "no transcripts to replay{}",
        key.map(|k| format!(" for key {k}")).unwrap_or_default()
    );
    let bytes = tokio::fs::read(&plugin)
        .await
        .with_context(|| format!("cannot read {}", plugin.display()))?;
    let runtime = check_runtime()?;
    let report = crate::ops::transcript::replay::replay(
        &runtime,
        &plugin.display().to_string(),
        bytes,
        &transcripts,
    )
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(report.diverged() == 0)
}
