//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry) on a loopback port, with its storage in a
//! temporary directory, optionally behind HTTP basic auth.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `docker-registry` package installs the registry.
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// The test user of [`Registry::start_with_auth`].
pub const USER: &str = "wasmctrl";
/// The password of [`USER`].
pub const PASSWORD: &str = "wasmctrl-test-password";
/// `PASSWORD`'s bcrypt hash (cost 4, made with libxcrypt's `crypt`).
const PASSWORD_BCRYPT: &str = "$2b$04$JY4asE19w3xdJgy9M.zBLuvTOXTuG2iUxBGHA0ojbiuzxNjCs28zK";

/// How long a registry may take to answer once started.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A registry on a loopback port; killed, and its storage removed, when
/// dropped.
pub struct Registry {
    child: Option<Child>,
    /// Where it serves (plain HTTP).
    pub addr: SocketAddr,
    /// Its config and storage.
    dir: PathBuf,
}

impl Registry {
    /// An open registry (anonymous push and pull).
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A registry that wants [`USER`]/[`PASSWORD`] (HTTP basic auth).
    pub fn start_with_auth() -> Self {
        Self::start_with(Some(format!("{USER}:{PASSWORD_BCRYPT}\n")))
    }

    /// Starts the registry binary (`$WASMCTRL_TEST_REGISTRY`, default
    /// Debian's) and waits until it answers; panics saying what to install
    /// if it is missing, or with its log if it does not start.
    fn start_with(htpasswd: Option<String>) -> Self {
        let bin = std::env::var("WASMCTRL_TEST_REGISTRY").unwrap_or_else(|_| REGISTRY_BIN.into());
        assert!(
            Path::new(&bin).exists(),
            "{bin} is missing: these tests need a real OCI registry; install Debian's \
             `docker-registry` package (apt-get install docker-registry) or point \
             WASMCTRL_TEST_REGISTRY at a distribution registry binary"
        );
        let addr = free_port();
        let dir = std::env::temp_dir().join(format!(
            "wasmctrl-registry-{}-{}",
            std::process::id(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.yml");
        let mut text = format!(
            "version: 0.1\n\
             log: {{ level: error, accesslog: {{ disabled: true }} }}\n\
             storage:\n  filesystem: {{ rootdirectory: {} }}\n  delete: {{ enabled: true }}\n\
             http: {{ addr: \"{addr}\", secret: wasmctrl-test }}\n",
            dir.join("storage").display()
        );
        if let Some(users) = htpasswd {
            let file = dir.join("htpasswd");
            std::fs::write(&file, users).unwrap();
            text.push_str(&format!(
                "auth: {{ htpasswd: {{ realm: wasmctrl-test, path: {} }} }}\n",
                file.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        // The registry logs every 404 as an error: kept aside, shown only
        // if it does not start.
        let log = dir.join("registry.log");
        let child = Command::new(&bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let mut registry = Self {
            child: Some(child),
            addr,
            dir,
        };
        let deadline = Instant::now() + START_LIMIT;
        // 401 when it wants credentials: it is up either way.
        while !matches!(request(addr, "GET", "/v2/"), Some(200 | 401)) {
            let exited = registry.child.as_mut().unwrap().try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "the registry did not start on {addr} ({exited:?}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// `127.0.0.1:PORT/<path>`: a reference to `path` (`repo:tag`) here.
    pub fn reference(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
    }

    /// Deletes the manifest `digest` of `repository` (as an open registry
    /// allows); the registry's status (202 when deleted), None if it did
    /// not answer.
    pub fn delete_manifest(&self, repository: &str, digest: &str) -> Option<u16> {
        request(
            self.addr,
            "DELETE",
            &format!("/v2/{repository}/manifests/{digest}"),
        )
    }

    /// Kills the registry (as a registry outage).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// One plain HTTP/1.0 request without a body, blocking (the registry is
/// started from sync code): its status, None if the server did not answer.
fn request(addr: SocketAddr, method: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// A docker config without credentials, so a developer's own
/// `~/.docker/config.json` never leaks into the tests.
pub fn empty_docker_config() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    // Written once: tests run concurrently and read it while others start.
    PATH.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("wasmctrl-empty-docker-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"auths": {}}"#).unwrap();
        path
    })
    .clone()
}
