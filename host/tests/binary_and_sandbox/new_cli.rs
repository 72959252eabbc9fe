//! `wasmctrl new` as a newcomer runs it, outside the repository: the
//! scaffold's own unit test passes with its language's runner, `wasmctrl
//! build` builds a Rust project (`dev` builds a Python or TypeScript one
//! itself, as the README's start has it), `wasmctrl dev --watch --apply .`
//! in its directory makes the sample Ready with no edit, and an edit of the
//! source is rebuilt and swapped in (a broken edit first, which keeps the
//! running version serving).
//!
//! Each project is written afresh to the same directory outside the
//! repository on every run, and a Rust project builds into a target
//! directory kept in the suite's own: cargo then reuses the registry
//! crates' builds from the run before and compiles only the project's own
//! crates, as an author's second build does. The project is new each run;
//! only compiled dependencies are kept.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use wasmctrl_testkit::{eventually, kubectl};

use crate::binary::{Dev, wasmctrl};

/// How long the host may take to reconcile the sample once it runs.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// The toolchain cache the suite's own Python and TypeScript builds fill
/// (`plugins/artifacts`): `<target dir>/wasmctrl-toolchains`.
pub(crate) fn toolchains() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_wasmctrl"));
    match std::env::var_os("WASMCTRL_TOOLCHAINS") {
        Some(dir) => dir.into(),
        None => exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("wasmctrl-toolchains"),
    }
}

/// The target directory the scaffolded Rust projects build into:
/// `<target>/tmp/new-plugins-target`, not this build's own (the scaffold is
/// a project of its own, with its own profiles and lock file).
fn scaffold_target() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-plugins-target")
}

/// Points `command` at a scaffolded project's build environment: its
/// target dir ([`scaffold_target`]) and the suite's toolchain cache.
fn scaffold_env(command: &mut Command) -> &mut Command {
    command
        .env("CARGO_TARGET_DIR", scaffold_target())
        .env("WASMCTRL_TOOLCHAINS", toolchains())
}

/// Runs `command` to success in `dir`, printing how long it took; panics
/// with its output otherwise.
fn succeeds(what: &str, dir: &Path, command: &mut Command) {
    let started = Instant::now();
    let out = scaffold_env(command.current_dir(dir))
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
}

/// A scaffolded project's directory, removed when dropped.
struct Project(PathBuf);

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `wasmctrl new NAME --lang LANG ARGS…` into an emptied directory outside
/// the repository, the same one every run (cargo keys a path crate's
/// builds by its path), named after this suite's target directory so two
/// checkouts never share it; the directory's guard and the project in it.
fn new_project(name: &str, lang: &str, args: &[&str]) -> (Project, PathBuf) {
    let suite = wasmctrl::sandbox::digest(env!("CARGO_TARGET_TMPDIR").as_bytes());
    let parent = std::env::temp_dir().join(format!("wasmctrl-new-{name}-{}", &suite[7..19]));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    let guard = Project(parent.clone());
    let dir = parent.join(name);
    let mut new = wasmctrl();
    new.args(["new", name, "--lang", lang, "--dir"])
        .arg(&dir)
        .args(args);
    succeeds("wasmctrl new", &parent, &mut new);
    (guard, dir)
}

/// `wasmctrl dev --config wasmctrl.yaml --apply . --watch` in `dir`, after
/// `wasmctrl build .` for a Rust project; an interpreted one is built by
/// `dev` itself, as the README's start has it. Waits until kubectl sees
/// `sample` of `resource` Ready for its generation, and its `owned` object
/// (a ConfigMap) carry its message.
async fn dev_makes_the_sample_ready(dir: &Path, resource: &str, interpreted: bool) {
    if !interpreted {
        let mut build = wasmctrl();
        build.args(["build", "."]);
        succeeds("wasmctrl build", dir, &mut build);
    }

    let kubeconfig = dir.join(".wasmctrl").join("kubeconfig");
    let mut command = wasmctrl();
    // `--watch` builds as `wasmctrl build` does.
    scaffold_env(command.current_dir(dir));
    let started = Instant::now();
    let dev = Dev::start_with(
        command,
        &["--config", "wasmctrl.yaml", "--apply", ".", "--watch"],
        kubeconfig.clone(),
    )
    .await;
    let query = "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type==\"Ready\")].status}";
    eventually("the sample to become Ready", READY_LIMIT, || {
        let out = kubectl::output(&kubeconfig, &["get", resource, "sample", "-o", query]);
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        let fields: Vec<&str> = printed.split_whitespace().collect();
        let ready =
            matches!(fields.as_slice(), [generation, observed, "True"] if generation == observed);
        async move { ready }
    })
    .await;
    eprintln!(
        "dev start to sample Ready: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let message = kubectl::run(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "sample",
            "-o",
            "jsonpath={.data.message}",
        ],
    );
    assert_eq!(message, "Hello from wasmctrl", "{}", dev.log());
    if interpreted {
        // dev built it, in the session its rebuilds use (a TypeScript
        // plugin's componentize-js is then warm for them), and its compile
        // takes seconds: the log says so while it runs.
        let log = dev.log();
        assert!(
            dev.printed.iter().any(|l| l.starts_with("building plugin ")
                && l.ends_with("(in the build session --watch keeps for rebuilds)")),
            "{:?}",
            dev.printed
        );
        assert!(
            log.contains("compiling a component …") && log.contains(" compiled "),
            "{log}"
        );
    }
    edits_are_rebuilt_and_swapped_in(dir, resource, &dev).await;
}

/// Prints `dev`'s log when the test fails while it is held.
struct LogOnFailure<'a>(&'a Dev);

impl Drop for LogOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("wasmctrl dev's log:\n{}", self.0.log());
        }
    }
}

/// The reason the skeleton writes in `Ready`; the edit changes it.
const REASON: &str = "\"Reconciled\"";

/// The source file of the project in `dir` that writes [`REASON`].
fn reconciler_source(dir: &Path) -> PathBuf {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if ![
                    "target",
                    "node_modules",
                    ".wasmctrl",
                    "tests",
                    "__pycache__",
                ]
                .contains(&name.as_ref())
                {
                    pending.push(path);
                }
            } else if [".rs", ".py", ".ts"].iter().any(|e| name.ends_with(e))
                && !name.contains("test")
                && std::fs::read_to_string(&path).unwrap().contains(REASON)
            {
                return path;
            }
        }
    }
    panic!("no source under {} writes {REASON}", dir.display());
}

/// With `dev --watch` running: a broken edit fails its build and the
/// running version keeps serving; the fixed edit is rebuilt, swapped in,
/// and its new `Ready` reason shows on the sample.
async fn edits_are_rebuilt_and_swapped_in(dir: &Path, resource: &str, dev: &Dev) {
    let _log = LogOnFailure(dev);
    let source = reconciler_source(dir);
    let original = std::fs::read_to_string(&source).unwrap();
    if dir.join("package.json").is_file() {
        // The watch keeps componentize-js warm for rebuilds: what is timed
        // is a rebuild in the warm worker, as an author's edits get.
        eventually("componentize-js to be warm", READY_LIMIT, || {
            let warm = dev.log().contains("componentize-js is warm for rebuilds");
            async move { warm }
        })
        .await;
    }
    let failed = "the build failed; the running version keeps serving";
    std::fs::write(&source, format!("{original}\n)]}} this does not parse\n")).unwrap();
    eventually("the broken build to be reported", READY_LIMIT, || {
        let reported = dev.log().contains(failed);
        async move { reported }
    })
    .await;
    let saved = Instant::now();
    std::fs::write(&source, original.replace(REASON, "\"Rebuilt\"")).unwrap();
    // The watcher's own line first (reading the log costs nothing, unlike a
    // kubectl process every poll, which would slow the build it times).
    let serving = eventually("the rebuild to serve", READY_LIMIT, || {
        let line = dev
            .log()
            .lines()
            .find(|l| l.contains(": serving sha256:") && l.contains("after the save"))
            .map(str::to_string);
        async move { line }
    })
    .await;
    eprintln!(
        "save to serving: {:.1} s ({serving})",
        saved.elapsed().as_secs_f64()
    );
    let kubeconfig = dir.join(".wasmctrl").join("kubeconfig");
    let query = "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}";
    eventually("the edit to show on the sample", READY_LIMIT, || {
        let out = kubectl::output(&kubeconfig, &["get", resource, "sample", "-o", query]);
        let rebuilt = String::from_utf8_lossy(&out.stdout) == "Rebuilt";
        async move { rebuilt }
    })
    .await;
    eprintln!(
        "save to the edit on the sample: {:.1} s",
        saved.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_rust_plugin_tests_builds_and_runs_outside_the_repository() {
    let (_project, dir) = new_project("greeter", "rust", &["--owns", "ConfigMap"]);
    succeeds("cargo test", &dir, Command::new("cargo").arg("test"));
    dev_makes_the_sample_ready(&dir, "greeters.greeter.example.com", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_python_plugin_tests_builds_and_runs_outside_the_repository() {
    let (_project, dir) = new_project(
        "hello-py",
        "python",
        &[
            "--kind",
            "demo.example.com/v1alpha1/Greeting",
            "--owns",
            "ConfigMap",
        ],
    );
    succeeds(
        "python3 -m unittest",
        &dir,
        Command::new("python3").args(["-m", "unittest", "-v"]),
    );
    dev_makes_the_sample_ready(&dir, "greetings.demo.example.com", true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_typescript_plugin_tests_builds_and_runs_outside_the_repository() {
    let (_project, dir) = new_project("welcome", "typescript", &["--owns", "ConfigMap"]);
    succeeds(
        "npm install",
        &dir,
        Command::new("npm").args(["install", "--no-audit", "--no-fund"]),
    );
    succeeds("npm test", &dir, Command::new("npm").arg("test"));
    dev_makes_the_sample_ready(&dir, "welcomes.welcome.example.com", true).await;
}
