//! Guest stdout/stderr into `tracing`, line by line, inside the reconcile's
//! span. Never blocks and never fills up: a full in-memory pipe looks closed
//! to the guest and turns a `println!` into a trap.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The longest line kept before it is emitted unterminated.
const MAX_LINE: usize = 16 << 10;

/// One of a guest's output streams (`stdout` or `stderr`) for one plugin.
#[derive(Clone)]
pub struct GuestOutput {
    plugin: Arc<str>,
    stream: &'static str,
    pending: Arc<Mutex<Vec<u8>>>,
}

impl GuestOutput {
    pub fn new(plugin: Arc<str>, stream: &'static str) -> Self {
        Self {
            plugin,
            stream,
            pending: Arc::default(),
        }
    }

    fn push(&self, mut bytes: &[u8]) {
        let mut pending = self.pending.lock().unwrap();
        while let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            pending.extend_from_slice(&bytes[..nl]);
            self.emit(&pending);
            pending.clear();
            bytes = &bytes[nl + 1..];
        }
        pending.extend_from_slice(bytes);
        if pending.len() >= MAX_LINE {
            self.emit(&pending);
            pending.clear();
        }
    }

    /// Emits what is left without a trailing newline (at the end of a call).
    pub fn flush_partial(&self) {
        let mut pending = self.pending.lock().unwrap();
        if !pending.is_empty() {
            self.emit(&pending);
            pending.clear();
        }
    }

    fn emit(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        tracing::info!(target: "wasmctrl::guest", plugin = %self.plugin, stream = self.stream, "{line}");
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
