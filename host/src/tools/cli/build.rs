//! `wasmctrl build`: a plugin directory to a component.

use std::path::PathBuf;

pub(super) fn build(
    dir: PathBuf,
    out: Option<PathBuf>,
    language: Option<crate::tools::build::Language>,
    package: Option<String>,
) -> anyhow::Result<()> {
    let options = crate::tools::build::BuildOptions {
        out,
        language,
        package,
        verbose: true,
        ..crate::tools::build::BuildOptions::default()
    };
    let built = crate::tools::build::build(&dir, &options)?;
    println!(
        "built {} plugin {}: {} ({:.1} MB, {:.1} s{})",
        built.language,
        built.name,
        built.component.display(),
        built.size as f64 / 1e6,
        built.took.as_secs_f64(),
        if built.installed_toolchain {
            ", toolchain installed"
        } else {
            ""
        }
    );
    Ok(())
}
