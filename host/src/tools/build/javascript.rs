//! JavaScript and TypeScript plugins: tsc to type-check, esbuild to
//! bundle, componentize-js to make the component, all from an npm prefix
//! in the toolchain cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::command::run;
use super::componentize::{
    ADMISSION_WORLD, TempDir, WORLD, file_stem_of, prepare_out, publish, write_wit,
};
use super::error::{BuildError, io_error};
use super::language::Language;
use super::limits::MAX_FIELD_LEN;
use super::options::{BuildOptions, progress};
use super::toolchain::{cache_root, ensure_installed, install_step};
use super::warm::{BuildSession, JsRequest, Warm};

/// The pinned npm packages of the JavaScript toolchain.
pub const JS_TOOLS: [(&str, &str); 4] = [
    ("@bytecodealliance/componentize-js", "0.23.0"),
    ("@bytecodealliance/jco", "1.35.0"),
    ("typescript", "7.0.2"),
    ("esbuild", "0.28.2"),
];
/// The oldest Node componentize-js is used with here.
const MIN_NODE: u32 = 20;
/// StarlingMonkey's own `fetch` and incoming handler stay out: the SDK's
/// `http` module calls `wasi:http/outgoing-handler` itself, synchronously,
/// as `reconcile` is.
const DISABLED_FEATURES: [&str; 2] = ["http", "fetch-event"];

pub(super) fn build_javascript(
    dir: &Path,
    options: &BuildOptions,
) -> Result<(String, PathBuf, bool), BuildError> {
    let package_json = dir.join("package.json");
    let text = std::fs::read_to_string(&package_json).map_err(io_error(&package_json))?;
    let config_error = |message: String| BuildError::Config {
        file: package_json.clone(),
        message,
    };
    let package: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| config_error(format!("invalid JSON: {e}")))?;
    let name = match &package["name"] {
        serde_json::Value::String(s) => file_stem_of(s)
            .ok_or_else(|| config_error(format!("name {s:?} is not a usable name")))?,
        serde_json::Value::Null => "plugin".to_string(),
        other => return Err(config_error(format!("name is {other}, not a string"))),
    };
    let entry = match &package["wasmctrl"]["entry"] {
        serde_json::Value::Null => "src/index.ts".to_string(),
        serde_json::Value::String(e) if !e.is_empty() && e.len() <= MAX_FIELD_LEN => e.clone(),
        other => {
            return Err(config_error(format!(
                "wasmctrl.entry must be a path to the entry module, not {other}"
            )));
        }
    };
    // The entry is handed to esbuild as an argument: one starting with `-`
    // would be an option (`--serve=0.0.0.0:80 --servedir=/` would serve the
    // user's files to the network), and one outside the project is not the
    // project's to build.
    let relative = Path::new(&entry);
    if entry.starts_with('-')
        || relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(config_error(format!(
            "wasmctrl.entry {entry:?} must be a path inside the project, relative to it, not starting with '-' and without '..'"
        )));
    }
    let entry_path = dir.join(&entry);
    if !entry_path.is_file() {
        return Err(config_error(format!(
            "the entry module {entry:?} does not exist (set wasmctrl.entry)"
        )));
    }

    let root = cache_root(options)?;
    let (tools, installed) = js_toolchain(&root, options)?;
    let bin = tools.join("node_modules").join(".bin");
    let tsconfig = dir.join("tsconfig.json");
    // The type check runs beside the bundle and componentize steps (it
    // needs neither): the component is published only once it passed.
    let type_check = if tsconfig.is_file() {
        progress(options, "type-checking with tsc …");
        let mut tsc = Command::new(bin.join("tsc"));
        tsc.current_dir(dir)
            .arg("--noEmit")
            .arg("-p")
            .arg(&tsconfig);
        Some(std::thread::spawn(move || {
            run_js("tsc (type check)", &mut tsc).map(|_| ())
        }))
    } else {
        None
    };
    let mut type_check = type_check;
    let mut checked = move || -> Result<(), BuildError> {
        match type_check.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(BuildError::Step {
                    step: "tsc (type check)",
                    command: "tsc".into(),
                    status: "stopped".into(),
                    output: String::new(),
                })
            }),
            None => Ok(()),
        }
    };
    let work = TempDir::new("js")?;
    let bundle = work.path.join("plugin.js");
    let meta = work.path.join("meta.json");
    progress(options, &format!("bundling {entry} with esbuild …"));
    let mut esbuild = Command::new(bin.join("esbuild"));
    esbuild
        .current_dir(dir)
        .arg(Path::new(".").join(&entry))
        .args([
            "--bundle",
            "--format=esm",
            "--platform=neutral",
            "--target=es2022",
            "--main-fields=module,main",
            // The SDK's package points this condition at its TypeScript sources.
            "--conditions=wasmctrl-source",
            // The host's interfaces: componentize-js binds them.
            "--external:wasmctrl:*",
            "--external:wasi:*",
            "--log-level=warning",
        ])
        .arg(format!("--outfile={}", bundle.display()))
        .arg(format!("--metafile={}", meta.display()));
    if tsconfig.is_file() {
        esbuild.arg(format!("--tsconfig={}", tsconfig.display()));
    }
    if let Err(e) = run_js("esbuild (bundle)", &mut esbuild) {
        // A syntax error fails both: tsc says it better.
        checked()?;
        return Err(e);
    }
    let wit = write_wit()?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| dir.join("target").join(format!("{name}.wasm")));
    let staged = prepare_out(&out)?;
    progress(options, "componentizing with componentize-js …");
    let request = JsRequest {
        source: &bundle,
        wit: &wit.path,
        world: world_of(&meta),
        disable: &DISABLED_FEATURES,
        out: &staged,
        cwd: &work.path,
    };
    let componentized = componentize(&tools, &request, options.session.as_ref());
    // A type error is the more useful report when both fail.
    checked()?;
    componentized?;
    publish("componentize-js", &staged, &out)?;
    Ok((name, out, installed))
}

/// Runs componentize-js for `request`: in the session's warm worker if
/// there is one that can, else the one-shot CLI.
fn componentize(
    tools: &Path,
    request: &JsRequest<'_>,
    session: Option<&BuildSession>,
) -> Result<(), BuildError> {
    if let Some(session) = session {
        match session.componentize_js(tools, request) {
            Warm::Built => return Ok(()),
            Warm::Failed(output) => {
                return Err(BuildError::Step {
                    step: "componentize-js",
                    command: format!(
                        "componentize-js {} (warm, in the build session's worker)",
                        request.source.display()
                    ),
                    status: "failed".into(),
                    output,
                });
            }
            Warm::Unavailable => {}
        }
    }
    let bin = tools.join("node_modules").join(".bin");
    let mut cli = Command::new(bin.join("componentize-js"));
    cli.current_dir(request.cwd)
        .arg(request.source)
        .arg("--wit")
        .arg(request.wit)
        .args(["-n", request.world, "-d"])
        .args(request.disable)
        .arg("-o")
        .arg(request.out);
    run_js("componentize-js", &mut cli).map(|_| ())
}

/// Starts the session's componentize-js worker and warms it up with a
/// build of a stub plugin, so that the first rebuild is already warm.
pub(super) fn prewarm_javascript(
    options: &BuildOptions,
    session: &BuildSession,
) -> Result<(), BuildError> {
    let root = cache_root(options)?;
    let (tools, _) = js_toolchain(&root, options)?;
    let work = TempDir::new("js-warm")?;
    let stub = work.path.join("stub.js");
    std::fs::write(
        &stub,
        "export function metadata() {}\nexport function reconcile() {}\n",
    )
    .map_err(io_error(&stub))?;
    let wit = write_wit()?;
    let request = JsRequest {
        source: &stub,
        wit: &wit.path,
        world: WORLD,
        disable: &DISABLED_FEATURES,
        out: &work.path.join("stub.wasm"),
        cwd: &work.path,
    };
    match session.componentize_js(&tools, &request) {
        Warm::Built => Ok(()),
        Warm::Failed(output) => Err(BuildError::Step {
            step: "componentize-js (warm-up)",
            command: "componentize-js stub.js".into(),
            status: "failed".into(),
            output,
        }),
        Warm::Unavailable => Err(BuildError::Step {
            step: "componentize-js (warm-up)",
            command: "node, with componentize-js from the toolchain cache".into(),
            status: "could not start".into(),
            output: format!(
                "the worker could not start or stopped ({})",
                tools.display()
            ),
        }),
    }
}

/// The world a bundle is built against, from the names its entry module
/// exports (esbuild's metafile): the admission world when it exports
/// `validate`, the reconciler world otherwise, so an entry module written
/// before plugins could serve webhooks builds unchanged.
pub(super) fn world_of(metafile: &Path) -> &'static str {
    let exports_validate = std::fs::read(metafile)
        .ok()
        .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
        .is_some_and(|meta| {
            meta["outputs"].as_object().is_some_and(|outputs| {
                outputs.values().any(|o| {
                    o["exports"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|name| name == "validate"))
                })
            })
        });
    if exports_validate {
        ADMISSION_WORLD
    } else {
        WORLD
    }
}

fn run_js(step: &'static str, cmd: &mut Command) -> Result<Output, BuildError> {
    run(step, cmd, Language::JavaScript, "node").map_err(|e| match e {
        BuildError::Step {
            step,
            command,
            status,
            output,
        } if output.contains("Could not resolve") || output.contains("Cannot find module") => {
            BuildError::Step {
                step,
                command,
                status,
                output: format!(
                    "{output}\n(if the plugin has npm dependencies, run `npm install` in its directory first)"
                ),
            }
        }
        other => other,
    })
}

/// The npm prefix with the JavaScript tools, installed if missing; whether it was.
fn js_toolchain(root: &Path, options: &BuildOptions) -> Result<(PathBuf, bool), BuildError> {
    let key: Vec<String> = JS_TOOLS
        .iter()
        .map(|(package, version)| {
            format!(
                "{}-{version}",
                package.rsplit('/').next().unwrap_or(package)
            )
        })
        .collect();
    let dir = root.join(format!("js-{}", key.join("-")));
    ensure_installed(&dir, |dir| {
        check_node()?;
        progress(
            options,
            &format!(
                "installing {} into {} (once) …",
                JS_TOOLS
                    .iter()
                    .map(|(p, v)| format!("{p}@{v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                dir.display()
            ),
        );
        let mut npm = Command::new("npm");
        npm.arg("install")
            .arg("--prefix")
            .arg(dir)
            .args([
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--save-exact",
                "--loglevel=error",
            ])
            .args(JS_TOOLS.iter().map(|(p, v)| format!("{p}@{v}")));
        install_step("the JavaScript toolchain (npm)", dir, &mut npm)
    })
}

fn check_node() -> Result<(), BuildError> {
    let hint = "install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)";
    let output = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|_| BuildError::MissingTool {
            tool: "node",
            language: Language::JavaScript,
            problem: "it is not on PATH".into(),
            hint,
        })?;
    let version = String::from_utf8_lossy(&output.stdout);
    let major = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= MIN_NODE => {}
        _ => {
            return Err(BuildError::MissingTool {
                tool: "node",
                language: Language::JavaScript,
                problem: format!("it is {}, older than v{MIN_NODE}", version.trim()),
                hint,
            });
        }
    }
    match Command::new("npm").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(BuildError::MissingTool {
            tool: "npm",
            language: Language::JavaScript,
            problem: "it is not on PATH".into(),
            hint,
        }),
    }
}
