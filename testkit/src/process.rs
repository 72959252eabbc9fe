//! A binary run as a child process, as a user runs it: its output kept
//! (bounded) for the test to read and for failure messages, and the
//! process killed when the test ends, passed or not.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::eventually;

/// How many lines of each of stdout and stderr are kept; past it a process
/// still runs (its output is drained) but further lines are dropped.
pub const MAX_LINES: usize = 20_000;

/// How many of the last lines of its log a failure message shows.
const SHOWN: usize = 50;

/// A running child process; killed (and reaped) when dropped.
pub struct Process {
    child: Child,
    what: String,
    stdout: Arc<Mutex<Lines>>,
    stderr: Arc<Mutex<Lines>>,
}

/// The lines a stream printed, up to [`MAX_LINES`].
#[derive(Default)]
struct Lines {
    lines: Vec<String>,
    /// Lines were dropped past `MAX_LINES`.
    cut: bool,
    /// The stream ended (the process closed it or exited).
    ended: bool,
}

impl Process {
    /// Starts `command` with stdin closed and stdout and stderr read by
    /// threads of their own, so the child never blocks on a full pipe.
    /// Stderr is the process's log.
    pub fn spawn(command: &mut Command) -> Process {
        let what = format!("{:?}", command.get_program());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} starts: {e}"));
        let stdout = keep(child.stdout.take().expect("piped stdout"));
        let stderr = keep(child.stderr.take().expect("piped stderr"));
        Process {
            child,
            what,
            stdout,
            stderr,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits, for at most `limit`, until the process prints a line on
    /// stdout that starts with `prefix`, and returns every line it printed
    /// up to and including that one. Panics with its log if the output ends
    /// first or `limit` passes.
    pub async fn printed_until(&self, prefix: &str, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        loop {
            {
                let out = self.stdout.lock().unwrap();
                if let Some(i) = out.lines.iter().position(|l| l.starts_with(prefix)) {
                    return out.lines[..=i].to_vec();
                }
                assert!(
                    !out.ended,
                    "{} ended its output without printing {prefix:?}:\n{}\nits log:\n{}",
                    self.what,
                    out.lines.join("\n"),
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} printed no {prefix:?} within {limit:?}; its log:\n{}",
                self.what,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its log (stderr) so far, one line each.
    pub fn log_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().lines.clone()
    }

    /// Its log so far as one text.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().lines.join("\n")
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.stderr.lock().unwrap();
        log.lines[log.lines.len().saturating_sub(SHOWN)..].join("\n")
    }

    /// Whether lines of its log were dropped past [`MAX_LINES`].
    pub fn log_cut(&self) -> bool {
        self.stderr.lock().unwrap().cut
    }

    /// Whether some line of its log contains every part of `wanted`.
    pub fn logged(&self, wanted: &[&str]) -> bool {
        self.stderr
            .lock()
            .unwrap()
            .lines
            .iter()
            .any(|l| wanted.iter().all(|w| l.contains(w)))
    }

    /// Sends the signal named `signal` (`TERM`, `KILL`, `STOP`, `CONT`…)
    /// with `kill(1)`; panics if it cannot be sent.
    pub fn signal(&self, signal: &str) {
        let pid = self.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -{signal} {pid} ({})", self.what);
    }

    /// Waits, for at most `limit`, until the process exits; its status.
    pub async fn exited(&mut self, limit: Duration) -> ExitStatus {
        let what = format!("{} to exit", self.what);
        let child = &mut self.child;
        eventually(&what, limit, || {
            let status = child.try_wait().expect("the child's status");
            async move { status }
        })
        .await
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A memory figure of the running process from `/proc/PID/status`
    /// (`VmRSS`, `VmHWM`…), in bytes.
    pub fn memory(&self, field: &str) -> u64 {
        let pid = self.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
        kib * 1024
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `stream` line by line on a thread of its own into the returned
/// buffer, until it ends.
fn keep(stream: impl Read + Send + 'static) -> Arc<Mutex<Lines>> {
    let kept = Arc::new(Mutex::new(Lines::default()));
    let into = kept.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let mut into = into.lock().unwrap();
            if into.lines.len() < MAX_LINES {
                into.lines.push(line);
            } else {
                into.cut = true;
            }
        }
        into.lock().unwrap().ended = true;
    });
    kept
}
