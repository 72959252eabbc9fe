//! Toolchain processes kept warm between the builds of one session
//! (`wasmctrl dev --watch`).
//!
//! componentize-js spends most of a cold run warming itself up: in a new
//! Node process its first splice of the StarlingMonkey engine takes about
//! 2 s, a second one in the same process about 0.5 s (V8's code and heap
//! are warm by then). A [`BuildSession`] keeps one Node process that
//! imports componentize-js's own API (`componentize(options)`) and builds
//! on request, so a rebuild takes about 1.4 s instead of 3.5 s
//! (docs/BENCHMARKS.md). The process holds about 0.8 GiB while it lives,
//! because the splicer's linear memory never shrinks; it ends with the
//! session. It is warmed up once, in the background, when the session
//! starts watching a JavaScript plugin.
//!
//! The protocol is this module's own: one JSON request per line on the
//! worker's stdin, one reply per build on its stdout, on a line that starts
//! with [`MARK`]. Any other line on stdout (what a plugin prints while it
//! is pre-initialized) is kept, bounded, for the error of a failed build.
//! A worker that cannot start, or stops, is dropped, and that build runs
//! the one-shot `componentize-js` instead, so a session never builds worse
//! than a plain `wasmctrl build`.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::limits::OUTPUT_TAIL;

/// Starts the line of a reply on the worker's stdout.
const MARK: &str = "\u{1}wasmctrl-componentize ";
/// The longest line read from the worker; a longer one is cut.
const MAX_LINE: u64 = 1 << 20;
/// The worker's script, written into the npm prefix of the toolchain so
/// that its bare import resolves to the pinned componentize-js.
const WORKER_FILE: &str = "wasmctrl-componentize-worker.mjs";
const WORKER_JS: &str = r#"// Written by wasmctrl: builds components on request (see wasmctrl's
// tools/build/warm.rs); one JSON request per stdin line.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';

const MARK = '\u0001wasmctrl-componentize ';
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  let reply;
  try {
    const request = JSON.parse(line);
    process.chdir(request.cwd);
    const { component } = await componentize({
      sourcePath: request.source,
      witPath: request.wit,
      worldName: request.world,
      disableFeatures: request.disable,
    });
    await writeFile(request.out, component);
    reply = { ok: true };
  } catch (e) {
    reply = { ok: false, error: String((e && e.stack) || e) };
  }
  process.stdout.write(MARK + JSON.stringify(reply) + '\n');
}
"#;

/// Warm toolchain processes shared by the builds of one session (cheap to
/// clone: clones share the processes). The processes end when the last
/// clone is dropped.
#[derive(Clone, Default)]
pub struct BuildSession {
    js: Arc<Mutex<Option<JsWorker>>>,
}

impl std::fmt::Debug for BuildSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never waits for a build in progress.
        let js = match self.js.try_lock() {
            Ok(worker) if worker.is_some() => "warm",
            Ok(_) => "none",
            Err(_) => "building",
        };
        f.debug_struct("BuildSession")
            .field("componentize_js", &js)
            .finish()
    }
}

/// One componentize-js build.
pub(super) struct JsRequest<'a> {
    /// The bundle to componentize.
    pub(super) source: &'a Path,
    pub(super) wit: &'a Path,
    pub(super) world: &'a str,
    pub(super) disable: &'a [&'a str],
    pub(super) out: &'a Path,
    /// The directory the build runs in (componentize-js's scratch files).
    pub(super) cwd: &'a Path,
}

/// What a warm build gave.
pub(super) enum Warm {
    Built,
    /// componentize-js refused the bundle: its error and what the worker
    /// printed before it.
    Failed(String),
    /// No warm worker could build it; run the one-shot CLI.
    Unavailable,
}

impl BuildSession {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds `request` in the session's componentize-js worker from the
    /// npm prefix `tools`, starting the worker if there is none.
    pub(super) fn componentize_js(&self, tools: &Path, request: &JsRequest<'_>) -> Warm {
        let mut slot = match self.js.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        if slot.as_ref().is_some_and(|w| w.tools != tools) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = JsWorker::spawn(tools).ok();
        }
        let Some(worker) = slot.as_mut() else {
            return Warm::Unavailable;
        };
        match worker.build(request) {
            Some(warm) => warm,
            None => {
                *slot = None;
                Warm::Unavailable
            }
        }
    }

    /// Whether a componentize-js worker is running (waits for a build in
    /// progress).
    pub fn js_worker_running(&self) -> bool {
        self.js.lock().map(|w| w.is_some()).unwrap_or(false)
    }
}

struct JsWorker {
    tools: PathBuf,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl JsWorker {
    fn spawn(tools: &Path) -> std::io::Result<Self> {
        let script = tools.join(WORKER_FILE);
        if std::fs::read_to_string(&script).ok().as_deref() != Some(WORKER_JS) {
            // Another session may read the file while this one writes it.
            let staged = tools.join(format!("{WORKER_FILE}.{}", std::process::id()));
            std::fs::write(&staged, WORKER_JS)?;
            std::fs::rename(&staged, &script)?;
        }
        let mut child = Command::new("node")
            .arg(&script)
            .current_dir(tools)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("the worker's pipes are missing"));
        };
        Ok(Self {
            tools: tools.to_path_buf(),
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// Sends `request` and reads until its reply: built or failed; None
    /// when the worker is gone or broke the protocol.
    fn build(&mut self, request: &JsRequest<'_>) -> Option<Warm> {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let line = serde_json::json!({
            "source": text(request.source),
            "wit": text(request.wit),
            "world": request.world,
            "disable": request.disable,
            "out": text(request.out),
            "cwd": text(request.cwd),
        });
        writeln!(self.stdin, "{line}").ok()?;
        self.stdin.flush().ok()?;
        let mut printed = String::new();
        loop {
            let mut bytes = Vec::new();
            let read = (&mut self.stdout)
                .take(MAX_LINE)
                .read_until(b'\n', &mut bytes)
                .ok()?;
            if read == 0 {
                return None;
            }
            let line = String::from_utf8_lossy(&bytes);
            let Some(reply) = line.strip_prefix(MARK) else {
                keep_tail(&mut printed, &line);
                continue;
            };
            let reply: serde_json::Value = serde_json::from_str(reply.trim()).ok()?;
            if reply["ok"] == serde_json::Value::Bool(true) {
                return Some(Warm::Built);
            }
            let error = reply["error"].as_str().unwrap_or("componentize-js failed");
            keep_tail(&mut printed, error);
            return Some(Warm::Failed(printed.trim().to_string()));
        }
    }
}

impl Drop for JsWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Appends `more` to `text`, keeping only its last [`OUTPUT_TAIL`] bytes.
fn keep_tail(text: &mut String, more: &str) {
    text.push_str(more);
    if text.len() > OUTPUT_TAIL {
        let mut start = text.len() - OUTPUT_TAIL;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text.replace_range(..start, "…");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_output_is_its_tail_cut_on_a_char_boundary() {
        let mut text = String::new();
        keep_tail(&mut text, &"é".repeat(OUTPUT_TAIL));
        keep_tail(&mut text, "the end");
        assert!(text.len() <= OUTPUT_TAIL + "…".len());
        assert!(text.starts_with('…'));
        assert!(text.ends_with("the end"));
    }
}
