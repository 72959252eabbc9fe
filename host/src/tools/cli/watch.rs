//! `wasmctrl dev --watch`: rebuilds a plugin when its sources change, and
//! lets the host's own file source swap the new component in.
//!
//! A plugin is watched when its component path follows the build
//! conventions (`tools::build::source_of`): the directory the build reads
//! is watched recursively, minus what builds write (`target/`,
//! `node_modules/`, `__pycache__/`, `.git/`, editor swap files). A burst of
//! saves is one rebuild: the build starts once the sources have been quiet
//! for [`QUIET`]. A failed build prints its error and leaves the running
//! version serving; a successful one writes the component where the config
//! points, and the host's file source (which watches that file) swaps it
//! in, reusing the compiled-component cache when the bytes did not change.
//! Each rebuild prints the time from the first save to the new version
//! serving. The rebuilds share a [`build::BuildSession`]: a JavaScript
//! plugin's componentize-js stays warm in one Node process, started in the
//! background when watching starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::Watcher as _;
use sha2::Digest as _;
use tokio::sync::mpsc;

use crate::config::HostConfig;
use crate::ops::manager::PluginStatus;
use crate::tools::build::{self, BuildOptions};

/// How long the sources must be quiet before a rebuild starts.
pub(super) const QUIET: Duration = Duration::from_millis(200);
/// How long a built component may take to be serving before the watcher
/// stops waiting for it (a compile of a large interpreted guest included).
const SWAP_WAIT: Duration = Duration::from_secs(120);
/// How often the plugin's status is read while waiting for the swap.
const SWAP_POLL: Duration = Duration::from_millis(25);

/// One plugin rebuilt on change.
#[derive(Debug, Clone)]
pub(super) struct WatchedPlugin {
    pub(super) name: String,
    /// The directory its build reads.
    pub(super) dir: PathBuf,
    pub(super) options: BuildOptions,
    /// The component its config loads.
    pub(super) component: PathBuf,
}

/// The plugins of `config` that can be rebuilt from their sources; the
/// others are named on stdout with why not.
pub(super) fn watched_plugins(config: &HostConfig) -> Vec<WatchedPlugin> {
    let mut watched = Vec::new();
    for plugin in &config.plugins {
        let Some(component) = plugin
            .file(&config.base_dir)
            .map(|c| std::path::absolute(&c).unwrap_or(c))
        else {
            println!(
                "--watch: plugin {:?} comes from a registry or URL; it is not rebuilt",
                plugin.name
            );
            continue;
        };
        match build::source_of(&component) {
            Some((dir, options)) => watched.push(WatchedPlugin {
                name: plugin.name.clone(),
                dir,
                options,
                component,
            }),
            None => println!(
                "--watch: plugin {:?}: {} is not where `wasmctrl build` writes a component, so its sources are unknown; it is not rebuilt",
                plugin.name,
                component.display()
            ),
        }
    }
    watched
}

/// Whether a change at `path` is a source change of the plugin in `dir`
/// (not a build's output, a dependency cache or an editor's scratch file).
pub(super) fn is_source_change(dir: &Path, component: &Path, path: &Path) -> bool {
    if path == component {
        return false;
    }
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    let skipped_dir = rel.components().any(|c| {
        matches!(
            c.as_os_str().to_str(),
            Some(
                "target" | "node_modules" | "__pycache__" | ".git" | ".wasmctrl" | ".venv" | "dist"
            )
        )
    });
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let scratch = name.starts_with(".#")
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".tmp")
        || name == "4913";
    !(skipped_dir || scratch)
}

/// Gives `plugins` the build `session`, so that their rebuilds share warm
/// tools, and warms a JavaScript plugin's componentize-js in the background
/// (from now, while the host starts) unless a build already did, saying on
/// stderr when it is warm.
pub(super) fn share_warm_tools(plugins: &mut [WatchedPlugin], session: build::BuildSession) {
    for plugin in plugins.iter_mut() {
        plugin.options.session = Some(session.clone());
    }
    let Some(js) = plugins.iter().find(|p| {
        matches!(
            build::detect(&p.dir, p.options.language),
            Ok(build::Language::JavaScript)
        )
    }) else {
        return;
    };
    let (dir, mut options) = (js.dir.clone(), js.options.clone());
    // Found above: the warm-up need not look at the project files again.
    options.language = Some(build::Language::JavaScript);
    tokio::task::spawn_blocking(move || match build::prewarm(&dir, &options) {
        Ok(()) => eprintln!("--watch: componentize-js is warm for rebuilds"),
        Err(e) => eprintln!(
            "--watch: componentize-js could not be kept warm, rebuilds start it cold: {e}"
        ),
    });
}

/// Watches every plugin of `plugins` until the process ends; `status`
/// reads the host's plugins (to see a new version serving).
pub(super) async fn watch(
    plugins: Vec<WatchedPlugin>,
    status: Arc<dyn Fn() -> Vec<PluginStatus> + Send + Sync>,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for plugin in plugins {
        let (tx, rx) = mpsc::unbounded_channel();
        let (dir, component) = (plugin.dir.clone(), plugin.component.clone());
        let on_event = move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res
                && !matches!(event.kind, notify::EventKind::Access(_))
                && event
                    .paths
                    .iter()
                    .any(|p| is_source_change(&dir, &component, p))
            {
                let _ = tx.send(Instant::now());
            }
        };
        let watcher = source_watcher(&plugin.dir, on_event)?;
        eprintln!(
            "--watch: rebuilding {:?} when {} changes",
            plugin.name,
            plugin.dir.display()
        );
        let status = status.clone();
        tasks.spawn(async move {
            let _watcher = watcher;
            follow(plugin, rx, status).await;
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// A watch of every file under `dir`, reported to `on_event`. Links are
/// not followed into: a link in a plugin's tree to `/` (a cloned
/// repository's, say) would otherwise put a watch on every directory of
/// the machine.
fn source_watcher(
    dir: &Path,
    on_event: impl notify::EventHandler,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::RecommendedWatcher::new(
        on_event,
        notify::Config::default().with_follow_symlinks(false),
    )?;
    watcher.watch(dir, notify::RecursiveMode::Recursive)?;
    Ok(watcher)
}

/// Rebuilds `plugin` after each quiet burst of changes.
async fn follow(
    plugin: WatchedPlugin,
    mut changes: mpsc::UnboundedReceiver<Instant>,
    status: Arc<dyn Fn() -> Vec<PluginStatus> + Send + Sync>,
) {
    while let Some(saved) = changes.recv().await {
        // Debounce: every save of the burst moves the start.
        loop {
            match tokio::time::timeout(QUIET, changes.recv()).await {
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let name = plugin.name.clone();
        eprintln!("--watch: {name}: sources changed, rebuilding …");
        let (dir, options) = (plugin.dir.clone(), plugin.options.clone());
        let built = tokio::task::spawn_blocking(move || build::build(&dir, &options)).await;
        let built = match built {
            Ok(Ok(built)) => built,
            Ok(Err(e)) => {
                eprintln!(
                    "--watch: {name}: the build failed; the running version keeps serving\n{e}"
                );
                continue;
            }
            Err(e) => {
                eprintln!("--watch: {name}: the build stopped: {e}");
                continue;
            }
        };
        let digest = match std::fs::read(&plugin.component) {
            Ok(bytes) => format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes))),
            Err(e) => {
                eprintln!(
                    "--watch: {name}: {} cannot be read after the build: {e}",
                    plugin.component.display()
                );
                continue;
            }
        };
        let built_in = built.took;
        match serving(&name, &digest, &*status).await {
            Serving::Now(swap) => eprintln!(
                "--watch: {name}: serving {} {:.1} s after the save (build {:.1} s, swap {:.1} s)",
                short(&digest),
                saved.elapsed().as_secs_f64(),
                built_in.as_secs_f64(),
                swap.as_secs_f64()
            ),
            Serving::Failed(error) => eprintln!(
                "--watch: {name}: the new build did not load; the running version keeps serving: {error}"
            ),
            Serving::Waiting => eprintln!(
                "--watch: {name}: built {} but it was not serving after {} s",
                short(&digest),
                SWAP_WAIT.as_secs()
            ),
        }
    }
}

enum Serving {
    /// Serving, this long after the build finished.
    Now(Duration),
    Failed(String),
    Waiting,
}

/// Waits (bounded) until plugin `name` serves `digest`, or its reload of
/// the new file failed.
async fn serving(
    name: &str,
    digest: &str,
    status: &(dyn Fn() -> Vec<PluginStatus> + Send + Sync),
) -> Serving {
    let started = Instant::now();
    let before = status()
        .into_iter()
        .find(|p| p.name == name)
        .and_then(|p| p.last_error);
    while started.elapsed() < SWAP_WAIT {
        if let Some(p) = status().into_iter().find(|p| p.name == name) {
            if p.digest == digest {
                return Serving::Now(started.elapsed());
            }
            if let Some(e) = p.last_error.filter(|e| Some(e) != before.as_ref()) {
                return Serving::Failed(e);
            }
        }
        tokio::time::sleep(SWAP_POLL).await;
    }
    Serving::Waiting
}

/// `sha256:` and the first 12 hex digits.
fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_outputs_caches_and_scratch_files_are_not_source_changes() {
        let dir = Path::new("/p");
        let component = Path::new("/p/target/hello.wasm");
        for (path, source) in [
            ("/p/src/lib.rs", true),
            ("/p/app.py", true),
            ("/p/Cargo.toml", true),
            ("/p/target/hello.wasm", false),
            ("/p/target/wasm32-wasip2/release/deps/x.d", false),
            ("/p/node_modules/x/index.js", false),
            ("/p/__pycache__/app.cpython-312.pyc", false),
            ("/p/src/.lib.rs.swp", false),
            ("/p/src/lib.rs~", false),
            ("/p/src/4913", false),
            ("/elsewhere/src/lib.rs", false),
        ] {
            assert_eq!(
                is_source_change(dir, component, Path::new(path)),
                source,
                "{path}"
            );
        }
    }

    /// A link in a plugin's tree to a directory elsewhere is not watched
    /// through: a write there reports nothing, while one in the tree does.
    /// One watcher's events arrive in order, so the tree's event coming
    /// without the other's first shows the other was never watched.
    #[test]
    fn a_link_to_a_directory_elsewhere_is_not_watched_through() {
        let root = tempfile::tempdir().unwrap();
        let (tree, elsewhere) = (root.path().join("plugin"), root.path().join("elsewhere"));
        std::fs::create_dir_all(tree.join("src")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tree.join("linked")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let _watcher = source_watcher(&tree, move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                let _ = tx.send(event.paths);
            }
        })
        .unwrap();
        std::fs::write(elsewhere.join("far.rs"), "far").unwrap();
        std::fs::write(tree.join("src/lib.rs"), "near").unwrap();
        loop {
            let paths = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the write in the tree is reported");
            assert!(
                !paths.iter().any(|p| p.ends_with("far.rs")),
                "reported through the link: {paths:?}"
            );
            if paths.iter().any(|p| p.ends_with("src/lib.rs")) {
                break;
            }
        }
    }
}
