//! The host's admin server as a test reads it: plain HTTP/1.1 on a
//! loopback address, and the Prometheus text of `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request without a body to `addr`: (status, body), with a
/// chunked body decoded. `headers` are added as given
/// (`("Authorization", "Bearer x")`). A connection that fails is status 0,
/// so a test can poll a server that is not up yet.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
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

/// GET `path` from `addr`: (status, body), as [`http`].
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

/// The first line of `/metrics` on `admin` that starts with `needle`.
pub async fn metric_line(admin: SocketAddr, needle: &str) -> Option<String> {
    let (_, body) = http_get(admin, "/metrics").await;
    body.lines()
        .find(|l| l.starts_with(needle))
        .map(str::to_string)
}

/// The value of the first `/metrics` line on `admin` that starts with
/// `needle`; None if there is no such line.
pub async fn metric_value(admin: SocketAddr, needle: &str) -> Option<f64> {
    metric_line(admin, needle)
        .await?
        .rsplit_once(' ')?
        .1
        .parse()
        .ok()
}

/// Waits until the `/metrics` line on `admin` starting with `needle` reads
/// at least `min`, and returns its value then; panics naming `what` once
/// `limit` has passed (see [`crate::eventually`]).
pub async fn metric_reaches(
    what: &str,
    limit: Duration,
    admin: SocketAddr,
    needle: &str,
    min: f64,
) -> f64 {
    crate::eventually(what, limit, || async {
        metric_value(admin, needle).await.filter(|n| *n >= min)
    })
    .await
}
