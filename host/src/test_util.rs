//! Helpers every test of the host needs (feature `test-util`, and the
//! crate's own unit tests): one bounded `eventually`, one raw HTTP client for
//! the admin server, and a manager started in-process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod registry;

pub use registry::{
    PASSWORD, Registry, USER, empty_docker_config, http_request, insecure_registry, push_component,
};

use crate::ObjectKey;
use crate::config::HostConfig;
use crate::control::metrics::Metrics;
use crate::control::workqueue::WorkQueue;
use crate::ops::manager::{Manager, ManagerError, ManagerOptions};

/// Polls `check` every 20 ms until it returns Some, for at most `limit`;
/// panics naming `what` past it. Convergence in tests is always bounded
/// polling, never a bare sleep.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One HTTP/1.1 request to `addr` (the admin server): (status, body).
/// `headers` are added as given (`("Authorization", "Bearer x")`).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{extra}\r\n"
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

/// GET `path` from `addr`.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path, &[]).await
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The first line of the admin server's `/metrics` that starts with `needle`.
pub async fn metric_line(admin: SocketAddr, needle: &str) -> Option<String> {
    let (_, body) = http_get(admin, "/metrics").await;
    body.lines()
        .find(|l| l.starts_with(needle))
        .map(str::to_string)
}

/// The numeric value of the first `/metrics` line starting with `needle`.
pub async fn metric_value(admin: SocketAddr, needle: &str) -> Option<f64> {
    metric_line(admin, needle)
        .await?
        .rsplit_once(' ')?
        .1
        .parse()
        .ok()
}

/// A host config from YAML text, with plugin paths relative to `base`.
pub fn host_config(text: &str, base: &Path) -> HostConfig {
    HostConfig::parse(Path::new("test.yaml"), text, base.to_path_buf()).expect("valid config")
}

/// A manager running in this process, its admin server on an ephemeral port.
pub struct RunningHost {
    pub admin: SocketAddr,
    pub metrics: Arc<Metrics>,
    manager_queues: Vec<(String, WorkQueue<ObjectKey>)>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<JoinHandle<Result<(), ManagerError>>>,
}

impl RunningHost {
    /// Starts a manager with `config` against `client` and waits (bounded)
    /// until `/readyz` answers 200. `config_path`, when set, is watched and
    /// reloaded like `wasmctrl run --config` does.
    pub async fn start(
        config: HostConfig,
        client: kube::Client,
        config_path: Option<PathBuf>,
    ) -> Self {
        let names: Vec<String> = config.plugins.iter().map(|p| p.name.clone()).collect();
        let manager = Manager::start(
            config,
            client,
            ManagerOptions {
                admin_bind: Some("127.0.0.1:0".parse().unwrap()),
                config_path,
                ..ManagerOptions::default()
            },
        )
        .await
        .expect("manager starts");
        let admin = manager.admin_addr();
        let metrics = manager.metrics().clone();
        let manager_queues = names
            .into_iter()
            .filter_map(|n| manager.queue(&n).map(|q| (n, q)))
            .collect();
        let (stop, rx) = oneshot::channel();
        let done = tokio::spawn(manager.run(async move {
            let _ = rx.await;
        }));
        eventually("readiness", Duration::from_secs(60), || async {
            (http_get(admin, "/readyz").await.0 == 200).then_some(())
        })
        .await;
        Self {
            admin,
            metrics,
            manager_queues,
            stop: Some(stop),
            done: Some(done),
        }
    }

    /// The queue of plugin `name` as it was at start.
    pub fn queue(&self, name: &str) -> WorkQueue<ObjectKey> {
        self.manager_queues
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, q)| q.clone())
            .unwrap_or_else(|| panic!("no plugin {name:?} at start"))
    }

    /// `/plugins` as JSON.
    pub async fn plugins(&self) -> serde_json::Value {
        let (_, body) = http_get(self.admin, "/plugins").await;
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
    }

    /// The `/plugins` entry of `name`.
    pub async fn plugin(&self, name: &str) -> Option<serde_json::Value> {
        self.plugins()
            .await
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    }

    /// Shuts the manager down (as on SIGTERM) and returns how `run` ended.
    pub async fn stop(mut self) -> Result<(), ManagerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.done
            .take()
            .expect("stopped once")
            .await
            .expect("the manager task does not panic")
    }
}

impl Drop for RunningHost {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The import cycles among the top-level modules of the crate whose
/// sources are in `src` (each cycle as its modules in order). A top-level
/// module is a file or directory directly in `src`; `crate::x` anywhere in
/// it is an edge to `x`. Binaries' roots (`main.rs`) are ignored.
pub fn module_cycles(src: &Path) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("the crate's src directory") {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main"].contains(&name.as_str()) {
            continue;
        }
        let files = if path.is_dir() {
            rust_files(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            vec![path.clone()]
        } else {
            continue;
        };
        modules.entry(name).or_default().extend(files);
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, files) in &modules {
        let out = edges.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            for target in crate_references(&text) {
                if target != *module && names.contains(&target) {
                    out.insert(target);
                }
            }
        }
    }
    // Every elementary cycle through its smallest module, found by DFS.
    let mut cycles = Vec::new();
    for start in &names {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    cycles.push(path.clone());
                } else if next > start && !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    cycles
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The top-level module names the code in `text` reaches through
/// `crate::`: `crate::a` and each first segment of `crate::{a::x, b}`.
/// Comments (doc links included) are not code and do not count.
fn crate_references(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let text = code.as_str();
    let mut found = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        // Not `wasmctrl_crate::` or `super_crate::`.
        let preceded = rest[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded {
            if let Some(group) = after.strip_prefix('{') {
                let mut depth = 0;
                let mut item_start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            item_start = true;
                            continue;
                        }
                        c if c.is_whitespace() => continue,
                        _ => {}
                    }
                    if item_start && depth == 0 && c != '{' && c != '}' {
                        found.push(ident(&group[j..]));
                        item_start = false;
                    }
                }
            } else {
                found.push(ident(after));
            }
        }
        rest = after;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::module_cycles;

    fn write(dir: &std::path::Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn an_import_from_a_nested_file_closes_a_cycle() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
        write(src.path(), "a.rs", "use crate::b::inner::Thing;\n");
        write(src.path(), "b/mod.rs", "pub mod inner;\n");
        write(
            src.path(),
            "b/inner/deep.rs",
            "use crate::{c, a::x};\n// crate::zzz in a comment is no edge\n",
        );
        write(src.path(), "c.rs", "use crate::b;\n");
        assert_eq!(
            module_cycles(src.path()),
            [["a", "b"], ["b", "c"]].map(|c| c.map(String::from).to_vec())
        );
    }

    #[test]
    fn layers_that_import_only_downwards_form_no_cycle() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "low/mod.rs", "pub mod x;\n");
        write(src.path(), "low/x.rs", "use crate::low;\n");
        write(src.path(), "high/mod.rs", "use crate::low::x;\n");
        write(src.path(), "high/deep/y.rs", "use crate::{high, low::x};\n");
        assert!(module_cycles(src.path()).is_empty());
    }
}
