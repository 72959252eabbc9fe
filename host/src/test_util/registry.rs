//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry) on a loopback port, with its storage in a
//! temporary directory, optionally behind HTTP basic auth.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::FetchLimits;
use crate::ops::source::oci::{self, RegistryOptions};

/// Where Debian's `docker-registry` package installs the registry.
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// The test user of [`Registry::start_with_auth`] and its password.
pub const USER: &str = "wasmctrl";
pub const PASSWORD: &str = "wasmctrl-test-password";
/// `PASSWORD`'s bcrypt hash (cost 4, made with libxcrypt's `crypt`).
const PASSWORD_BCRYPT: &str = "$2b$04$JY4asE19w3xdJgy9M.zBLuvTOXTuG2iUxBGHA0ojbiuzxNjCs28zK";

/// A registry on a loopback port; killed when dropped.
pub struct Registry {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// Its config and storage; removed when dropped.
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
        let deadline = Instant::now() + Duration::from_secs(30);
        // 401 when it wants credentials: it is up either way.
        while !matches!(
            http_request(addr, "GET", "/v2/").map(|r| r.0),
            Some(200 | 401)
        ) {
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

    /// `127.0.0.1:PORT/<path>`.
    pub fn reference(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
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

/// One plain HTTP/1.0 request (blocking): status and body.
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
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
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
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

/// Plain HTTP, no credentials, a 30 s timeout.
pub fn insecure_registry() -> RegistryOptions {
    RegistryOptions {
        insecure: true,
        docker_config: Some(empty_docker_config()),
        credentials: None,
        limits: FetchLimits {
            timeout: Duration::from_secs(30),
            ..FetchLimits::default()
        },
    }
}

/// Pushes the component file `component` to `reference` with `options`;
/// returns the manifest digest.
pub async fn push_component(reference: &str, component: &str, options: &RegistryOptions) -> String {
    let bytes = std::fs::read(component).unwrap();
    oci::push(reference, bytes, Default::default(), options)
        .await
        .unwrap_or_else(|e| panic!("push to {reference}: {e}"))
        .manifest_digest
}
