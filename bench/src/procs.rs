//! Child processes of a benchmark: the API server and the controller under
//! test run as re-executions of this binary (hidden subcommands), so the
//! CPU time and memory of the controller side are read from its own
//! process (`/proc/<pid>/stat`, `/proc/<pid>/status`) and never include the
//! API server's or the load generator's.
//!
//! A child talks line by line: it prints status lines on stdout (`ready`,
//! `resync <start> <end>`, …) and reads commands on stdin; it exits when its
//! stdin closes, so a benchmark that dies takes its children with it.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout, Command};

/// Nanoseconds since the Unix epoch: the one clock every process of a run
/// shares (the writer's response times and the reconcilers' start times are
/// compared across processes).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A running child: this binary with a hidden subcommand.
pub struct Child {
    child: tokio::process::Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    what: String,
}

impl Child {
    /// Starts `wasmctrl-bench <args>`; stderr goes to ours.
    pub fn spawn(what: &str, args: &[String]) -> anyhow::Result<Child> {
        Self::spawn_with(what, args, &[])
    }

    /// [`Child::spawn`] with these environment variables set (the rest is
    /// inherited).
    pub fn spawn_with(what: &str, args: &[String], env: &[(&str, &str)]) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding the bench binary")?;
        let mut child = Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {what} process"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
        Ok(Child {
            child,
            stdin,
            stdout,
            what: what.to_string(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// The next line the child prints, within `limit`.
    pub async fn line(&mut self, limit: Duration) -> anyhow::Result<String> {
        match tokio::time::timeout(limit, self.stdout.next_line()).await {
            Err(_) => bail!("the {} process said nothing for {limit:?}", self.what),
            Ok(Err(e)) => Err(e).with_context(|| format!("reading from the {} process", self.what)),
            Ok(Ok(None)) => bail!("the {} process exited", self.what),
            Ok(Ok(Some(line))) => Ok(line),
        }
    }

    /// Waits for a line starting with `word`; returns the rest of it.
    pub async fn expect(&mut self, word: &str, limit: Duration) -> anyhow::Result<String> {
        let line = self.line(limit).await?;
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => bail!("the {} process said {line:?}, expected {word:?}", self.what),
        }
    }

    /// Sends one command line.
    pub async fn send(&mut self, command: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin.write_all(format!("{command}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// User + system CPU seconds the child has used so far.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        cpu_seconds(self.pid())
    }

    /// The child's resident set size in MiB.
    pub fn rss_mib(&self) -> anyhow::Result<f64> {
        rss_mib(self.pid())
    }

    /// Where the child's resident memory is.
    pub fn memory_map(&self) -> anyhow::Result<MemoryMap> {
        memory_map(self.pid())
    }

    /// Closes stdin (the child shuts down) and waits for it, killing it
    /// after `limit`.
    pub async fn stop(mut self, limit: Duration) -> anyhow::Result<()> {
        drop(self.stdin.take());
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    bail!("the {} process exited with {status}", self.what);
                }
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                bail!("the {} process did not stop within {limit:?}", self.what)
            }
        }
    }
}

/// User + system CPU seconds of process `pid` (fields 14 and 15 of
/// `/proc/<pid>/stat`, in clock ticks).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3.
    let ticks: u64 = fields
        .get(11)
        .zip(fields.get(12))
        .map(|(u, s)| u.parse::<u64>().unwrap_or(0) + s.parse::<u64>().unwrap_or(0))
        .context("malformed /proc stat")?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks as f64 / hz)
}

/// Resident set size of process `pid` in MiB (`VmRSS`).
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS in /proc status")?;
    Ok(kib / 1024.0)
}

/// Resident memory of a process by kind, in MiB.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Residency {
    /// `VmRSS`: every page mapped, counted once per mapping that maps it.
    pub rss: f64,
    /// `Pss` (`smaps_rollup`): each page divided among its mappings, so a
    /// page shared by eight mappings counts one eighth in each: what the
    /// process costs the machine.
    pub pss: f64,
    /// `RssAnon`: private pages (heap, stacks, pages written after a
    /// copy-on-write fault).
    pub private: f64,
    /// `RssFile` + `RssShmem`: file and shared-memory pages, such as a
    /// wasm memory image mapped copy-on-write, counted once per mapping.
    pub shared: f64,
}

/// Reads the [`Residency`] of process `pid` from `/proc/<pid>/status` and
/// `/proc/<pid>/smaps_rollup`.
pub fn residency(pid: u32) -> anyhow::Result<Residency> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let kib = |text: &str, name: &str| -> anyhow::Result<f64> {
        let kib: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}"))?;
        Ok(kib / 1024.0)
    };
    Ok(Residency {
        rss: kib(&status, "VmRSS:")?,
        pss: kib(&rollup, "Pss:")?,
        private: kib(&status, "RssAnon:")?,
        shared: kib(&status, "RssFile:")? + kib(&status, "RssShmem:")?,
    })
}

/// Pages of each wasm memory image this process maps that were written
/// since they were mapped: one entry per mapping (per live instance's
/// memory), from `/proc/self/maps` and `/proc/self/pagemap`. wasmtime maps
/// a module's initial memory copy-on-write from a memfd named
/// `wasm-memory-image`; a page read stays shared with every other instance
/// (pagemap: a file page), a page written becomes a private copy.
pub fn written_image_pages() -> anyhow::Result<Vec<u64>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const PAGE: u64 = 4096;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut pagemap = std::fs::File::open("/proc/self/pagemap")?;
    let mut written = Vec::new();
    for line in maps.lines().filter(|l| l.contains("wasm-memory-image")) {
        let range = line.split_whitespace().next().unwrap_or("");
        let (start, end) = range
            .split_once('-')
            .and_then(|(s, e)| {
                Some((
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                ))
            })
            .with_context(|| format!("malformed maps line {line:?}"))?;
        let mut entries = vec![0u8; ((end - start) / PAGE * 8) as usize];
        pagemap.seek(SeekFrom::Start(start / PAGE * 8))?;
        pagemap.read_exact(&mut entries)?;
        let private = entries
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
            // Bit 63: present; bit 61: a file page or shared (clear for a
            // private copy-on-write copy).
            .filter(|e| e >> 63 & 1 == 1 && e >> 61 & 1 == 0)
            .count();
        written.push(private as u64);
    }
    Ok(written)
}

/// Reads command lines from stdin until it closes; each goes to `tx`.
pub fn commands() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line.trim().to_string()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Prints one status line for the parent and flushes it.
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        let rss = rss_mib(pid).unwrap();
        assert!(rss > 0.5 && rss < 10_000.0, "{rss}");
        // Burn a little CPU so the counter is not trivially zero.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_seconds(pid).unwrap() > 0.0);
        let map = memory_map(pid).unwrap();
        let total = map.jit_code + map.reservations + map.anon + map.files;
        assert!((total - rss).abs() < rss * 0.5 + 1.0, "{map:?} vs {rss}");
        assert!(map.files > 0.0, "{map:?}");
        let r = residency(pid).unwrap();
        assert!(r.pss > 0.0 && r.pss <= r.rss + 1.0, "{r:?}");
        assert!((r.private + r.shared - r.rss).abs() < 1.0, "{r:?}");
    }

    #[test]
    fn counts_the_image_pages_written() {
        // A stand-in for wasmtime's image: a memfd of the same name,
        // mapped privately; one page read, one written, one untouched.
        let len = 3 * 4096;
        // SAFETY: plain syscalls on a fresh fd and a fresh mapping of it,
        // used only inside this test and unmapped at its end.
        unsafe {
            let fd = libc::memfd_create(c"wasm-memory-image".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                fd,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let bytes = base.cast::<u8>();
            std::hint::black_box(bytes.read_volatile());
            bytes.add(4096).write_volatile(1);
            let written = written_image_pages().unwrap();
            libc::munmap(base, len);
            libc::close(fd);
            // Other tests of this process map no wasm images.
            assert_eq!(written, vec![1]);
        }
    }
}

/// Where a process's resident memory is, from `/proc/<pid>/smaps`, in MiB.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryMap {
    /// Executable anonymous mappings: code compiled at run time (wasm).
    pub jit_code: f64,
    /// Anonymous mappings of at least 1 GiB: reservations such as
    /// wasmtime's pooling allocator (linear memories, tables, stacks), of
    /// which only touched pages count.
    pub reservations: f64,
    /// Other anonymous and `[heap]` mappings: malloc arenas, thread stacks.
    pub anon: f64,
    /// File-backed mappings: the binary and shared libraries.
    pub files: f64,
}

/// Reads `/proc/<pid>/smaps` into a [`MemoryMap`].
pub fn memory_map(pid: u32) -> anyhow::Result<MemoryMap> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut map = MemoryMap::default();
    // The header of the mapping being read: (size in bytes, executable, file-backed).
    let mut current = (0u64, false, false);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            let perms = words.next().unwrap_or("");
            let path = words.nth(3).unwrap_or("");
            let file = !path.is_empty() && !path.starts_with('[');
            current = (end - start, perms.contains('x'), file);
        } else if first == "Rss:" {
            let kib: f64 = words.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            let mib = kib / 1024.0;
            let (size, exec, file) = current;
            if file {
                map.files += mib;
            } else if exec {
                map.jit_code += mib;
            } else if size >= 1 << 30 {
                map.reservations += mib;
            } else {
                map.anon += mib;
            }
        }
    }
    Ok(map)
}
