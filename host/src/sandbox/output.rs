//! Guest output — stdout, stderr and `log` messages — into `tracing`, line
//! by line, inside the reconcile's span, within the call's byte budget.
//!
//! # Never blocks, never fills up, never grows past its budget
//! A full in-memory pipe looks closed to the guest and turns a `println!`
//! into a trap, so writes always succeed. What the host keeps is bounded
//! twice: a line is cut at `line_limit` bytes *before* it is buffered (a
//! newline-free write never becomes a line the size of guest memory), and a
//! call's output stops at `budget` bytes. Each cut leaves one marker.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::outbound::HttpCall;

/// Most bytes of a reconcile's error message the host keeps: it is logged
/// on every retry and shown in events, `/plugins` and shadow divergences.
pub const MAX_ERROR_MESSAGE: usize = 4 << 10;

/// Which of a guest's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The output of one store: both streams share the call's budget.
#[derive(Clone)]
pub(crate) struct OutputSink {
    plugin: Arc<str>,
    state: Arc<Mutex<SinkState>>,
}

struct SinkState {
    budget: usize,
    line_limit: usize,
    /// Bytes emitted this call.
    emitted: usize,
    /// Bytes the guest wrote (or logged) this call, kept or not.
    written: u64,
    /// Whether the "budget reached" marker was emitted this call.
    exhausted: bool,
    /// Partial lines of stdout and stderr, at most `line_limit` bytes each.
    pending: [Vec<u8>; 2],
    /// Bytes cut from the pending lines.
    cut: [usize; 2],
    /// The call whose revealed secrets are redacted from the lines.
    call: Option<Arc<HttpCall>>,
    /// The lines emitted, as logged: tests read them here, since tracing's
    /// per-callsite interest, shared by the whole process, cannot be relied
    /// on by a test's own subscriber while other tests log.
    #[cfg(test)]
    emitted_lines: Vec<String>,
}

/// A line as logged: its text, and how many bytes of it were cut. Formatted
/// only by a subscriber that records the event, so a line nobody logs costs
/// no allocation.
struct LineMessage<'a> {
    text: &'a str,
    cut: usize,
}

impl std::fmt::Display for LineMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text)?;
        if self.cut > 0 {
            write!(
                f,
                "… [wasmctrl: {} more bytes of this line dropped]",
                self.cut
            )?;
        }
        Ok(())
    }
}

impl OutputSink {
    pub(crate) fn new(plugin: Arc<str>, budget: usize, line_limit: usize) -> Self {
        Self {
            plugin,
            state: Arc::new(Mutex::new(SinkState {
                budget,
                line_limit: line_limit.max(1),
                emitted: 0,
                written: 0,
                exhausted: false,
                pending: [Vec::new(), Vec::new()],
                cut: [0, 0],
                call: None,
                #[cfg(test)]
                emitted_lines: Vec::new(),
            })),
        }
    }

    /// The WASI stream writing into this sink.
    pub(crate) fn stream(&self, stream: Stream) -> GuestOutput {
        GuestOutput {
            sink: self.clone(),
            stream,
        }
    }

    /// Starts a new call's budget (an instance reused for another call);
    /// a secret `call` reveals is redacted from the lines it writes.
    pub(crate) fn begin_call(&self, call: Arc<HttpCall>) {
        let mut s = self.state.lock().unwrap();
        s.emitted = 0;
        s.written = 0;
        s.exhausted = false;
        s.call = Some(call);
    }

    /// Bytes the guest wrote or logged this call.
    pub(crate) fn written(&self) -> u64 {
        self.state.lock().unwrap().written
    }

    fn write(&self, stream: Stream, mut bytes: &[u8]) {
        let mut s = self.state.lock().unwrap();
        s.written += bytes.len() as u64;
        let i = stream as usize;
        while !bytes.is_empty() {
            let (chunk, ended) = match bytes.iter().position(|b| *b == b'\n') {
                Some(nl) => (&bytes[..nl], true),
                None => (bytes, false),
            };
            let room = s.line_limit - s.pending[i].len().min(s.line_limit);
            let kept = chunk.len().min(room);
            s.pending[i].extend_from_slice(&chunk[..kept]);
            s.cut[i] += chunk.len() - kept;
            bytes = &bytes[(chunk.len() + usize::from(ended)).min(bytes.len())..];
            if ended {
                self.emit_pending(&mut s, stream);
            }
        }
    }

    /// Emits the unterminated rest of both streams (at the end of a call).
    pub(crate) fn flush(&self) {
        let mut s = self.state.lock().unwrap();
        for stream in [Stream::Stdout, Stream::Stderr] {
            if !s.pending[stream as usize].is_empty() || s.cut[stream as usize] > 0 {
                self.emit_pending(&mut s, stream);
            }
        }
    }

    fn emit_pending(&self, s: &mut SinkState, stream: Stream) {
        let i = stream as usize;
        let line = std::mem::take(&mut s.pending[i]);
        let cut = std::mem::take(&mut s.cut[i]);
        if self.admit(s, line.len()) {
            let text = String::from_utf8_lossy(&line);
            let text = match &s.call {
                Some(call) => std::borrow::Cow::Owned(call.redact(&text)),
                None => text,
            };
            let stream = stream.as_str();
            let message = LineMessage { text: &text, cut };
            tracing::info!(target: "wasmctrl::guest", plugin = %self.plugin, stream, "{message}");
            #[cfg(test)]
            s.emitted_lines.push(message.to_string());
        }
        // Keep the allocation of a reasonably sized line for the next one.
        if line.capacity() <= 4096 {
            let mut line = line;
            line.clear();
            s.pending[i] = line;
        }
    }

    /// Counts a `log` message against the budget: Some(message, cut bytes)
    /// to emit, None once the budget is spent.
    pub(crate) fn admit_log<'m>(&self, message: &'m str) -> Option<(&'m str, usize)> {
        let mut s = self.state.lock().unwrap();
        s.written += message.len() as u64;
        let mut end = message.len().min(s.line_limit);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        self.admit(&mut s, end)
            .then_some((&message[..end], message.len() - end))
    }

    /// Bounds the error message a call returned, which the host logs on
    /// each retry and puts in events and status: counted as output the
    /// guest wrote (`outputBytes` accounting), and cut to
    /// [`MAX_ERROR_MESSAGE`] bytes or the line limit, whichever is less,
    /// with a marker naming what was dropped. Returns whether it was cut.
    pub(crate) fn bound_error(&self, message: &mut String) -> bool {
        let mut s = self.state.lock().unwrap();
        s.written += message.len() as u64;
        let max = MAX_ERROR_MESSAGE.min(s.line_limit);
        if message.len() <= max {
            return false;
        }
        let mut end = max;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let dropped = message.len() - end;
        message.truncate(end);
        message.shrink_to_fit();
        message.push_str(&format!(
            "… [wasmctrl: {dropped} more bytes of this message dropped]"
        ));
        true
    }

    /// Whether a line of `len` bytes fits the call's budget; emits the
    /// marker the first time one does not. An empty line costs a byte, so
    /// that a guest writing only newlines cannot log without end.
    fn admit(&self, s: &mut SinkState, len: usize) -> bool {
        let len = len.max(1);
        if s.emitted + len <= s.budget {
            s.emitted += len;
            return true;
        }
        if !s.exhausted {
            s.exhausted = true;
            tracing::warn!(target: "wasmctrl::guest", plugin = %self.plugin,
                "[wasmctrl: the output limit of {} bytes per call is reached; the rest of this call's output is dropped]", s.budget);
        }
        false
    }
}

/// One of a guest's output streams, as WASI sees it.
#[derive(Clone)]
pub(crate) struct GuestOutput {
    sink: OutputSink,
    stream: Stream,
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

/// How much a single WASI write may carry; a guest writes more in pieces.
const WRITE_CHUNK: usize = 64 << 10;

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.sink.write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_CHUNK)
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
        self.sink.write(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_free_write_is_cut_before_it_is_buffered() {
        let sink = OutputSink::new("p".into(), 1 << 20, 16);
        sink.write(Stream::Stdout, &[b'x'; 100_000]);
        {
            let s = sink.state.lock().unwrap();
            assert_eq!(s.pending[0].len(), 16);
            assert_eq!(s.cut[0], 100_000 - 16);
        }
        sink.flush();
        let s = sink.state.lock().unwrap();
        assert!(s.pending[0].is_empty());
        assert_eq!(s.emitted, 16);
        assert_eq!(s.written, 100_000);
    }

    #[test]
    fn output_stops_at_the_budget() {
        let sink = OutputSink::new("p".into(), 10, 100);
        sink.write(Stream::Stdout, b"12345\n12345\n12345\n");
        sink.write(Stream::Stderr, b"abc\n");
        assert_eq!(sink.admit_log("hello"), None);
        let s = sink.state.lock().unwrap();
        assert_eq!(s.emitted, 10);
        assert!(s.exhausted);
        assert_eq!(s.written, 18 + 4 + 5);
        drop(s);
        sink.begin_call(call());
        assert_eq!(sink.admit_log("héllo"), Some(("héllo", 0)));
    }

    fn call() -> Arc<HttpCall> {
        Arc::new(HttpCall::new(
            "p".into(),
            Arc::new(crate::control::metrics::Metrics::new()),
            std::time::Instant::now(),
            None,
            false,
        ))
    }

    #[test]
    fn a_revealed_secret_is_redacted_from_the_lines_a_guest_writes() {
        let sink = OutputSink::new("p".into(), 1 << 20, 1 << 10);
        let call = call();
        call.revealed("tok", b"s3cr3t");
        sink.begin_call(call);
        sink.write(Stream::Stdout, b"the token is s3cr3t\n");
        sink.write(Stream::Stderr, b"again: s3cr3t");
        sink.flush();
        let lines = sink.state.lock().unwrap().emitted_lines.clone();
        assert_eq!(
            lines,
            ["the token is <secret:tok>", "again: <secret:tok>"],
            "{lines:?}"
        );
    }

    #[test]
    fn an_error_message_is_counted_and_cut_on_a_char_boundary() {
        let sink = OutputSink::new("p".into(), 1 << 20, 16 << 10);
        let mut short = "failed".to_string();
        assert!(!sink.bound_error(&mut short));
        assert_eq!(short, "failed");
        let mut huge = "é".repeat(MAX_ERROR_MESSAGE);
        assert!(sink.bound_error(&mut huge));
        assert!(huge.starts_with(&"é".repeat(MAX_ERROR_MESSAGE / 2)));
        assert!(huge.ends_with(&format!(
            "[wasmctrl: {} more bytes of this message dropped]",
            MAX_ERROR_MESSAGE
        )));
        assert!(huge.len() < MAX_ERROR_MESSAGE + 100);
        assert_eq!(sink.written(), 6 + 2 * MAX_ERROR_MESSAGE as u64);
        // A smaller line limit cuts sooner.
        let narrow = OutputSink::new("p".into(), 1 << 20, 10);
        let mut message = "x".repeat(100);
        assert!(narrow.bound_error(&mut message));
        assert!(message.starts_with("xxxxxxxxxx…"), "{message}");
    }

    #[test]
    fn empty_lines_count_against_the_budget() {
        let sink = OutputSink::new("p".into(), 16, 64);
        sink.write(Stream::Stdout, &b"\n".repeat(10_000));
        assert_eq!(sink.admit_log(""), None);
        let s = sink.state.lock().unwrap();
        assert_eq!(s.emitted, 16);
        assert!(s.exhausted);
    }

    #[test]
    fn log_messages_are_cut_on_a_char_boundary() {
        let sink = OutputSink::new("p".into(), 1 << 20, 4);
        assert_eq!(sink.admit_log("aéé"), Some(("aé", 2)));
    }
}
