//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout.
//!
//! stdout carries only MCP messages (one writer thread owns it); logs go to stderr. A
//! line longer than the cap is discarded as it streams in, answered with `-32600`, and
//! the session goes on. Requests are served by a pool of workers so that a slow tool does
//! not hold up `ping` or `notifications/cancelled`, and so that a client with many
//! requests in flight has enough of them at the rate limiter at once to share its
//! transactions. EOF on stdin lets the
//! in-flight requests finish, flushes stdout and ends the process with exit code 0.

use std::io::{BufRead, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::Value;

use crate::catalog::McpError;
use crate::dispatch::{Env, Server, Transport};
use crate::protocol::Session;
use crate::registry::Notifier;

/// Number of requests served at once (32 served a client with 64 in flight fastest: 4
/// left the rate limiter batches of at most 4; 64 contended for the store).
const WORKERS: usize = 32;
/// Lines read ahead of the workers (back-pressure on a client that floods stdin).
const QUEUE_DEPTH: usize = 256;

/// One line read from stdin.
enum Line {
    /// A complete line (without the newline).
    Message(Vec<u8>),
    /// A line that exceeded the cap; its bytes were discarded.
    TooLong,
}

struct StdoutNotifier(Sender<Value>);

impl Notifier for StdoutNotifier {
    fn notify(&self, message: Value) {
        // The writer only goes away at shutdown, when nothing is left to tell.
        let _ = self.0.send(message);
    }
}

/// Reads the credential for this process: `TOLLGATE_TOKEN`, or the first line of the
/// file named by `TOLLGATE_TOKEN_FILE`. Never from the protocol.
pub fn token_from_env() -> Result<Option<String>, String> {
    if let Ok(token) = std::env::var("TOLLGATE_TOKEN") {
        return Ok(Some(token.trim().to_owned()).filter(|t| !t.is_empty()));
    }
    let Ok(path) = std::env::var("TOLLGATE_TOKEN_FILE") else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("TOLLGATE_TOKEN_FILE: cannot read {path}: {e}"))?;
    Ok(text
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|t| !t.is_empty()))
}

/// Serves MCP on stdin/stdout until EOF.
pub fn serve(
    server: Arc<Server>,
    token: Option<String>,
    max_line_bytes: usize,
) -> std::io::Result<()> {
    let (out_tx, out_rx) = mpsc::channel::<Value>();
    let writer = thread::spawn(move || write_loop(out_rx));
    let (line_tx, line_rx) = mpsc::sync_channel::<Line>(QUEUE_DEPTH);
    let line_rx = Arc::new(Mutex::new(line_rx));
    let session = Arc::new(Session::new());
    let source = format!("stdio:{}", std::process::id());
    let new_worker = || Worker {
        server: Arc::clone(&server),
        session: Arc::clone(&session),
        notifier: StdoutNotifier(out_tx.clone()),
        token: token.clone(),
        source: source.clone(),
        max_line_bytes,
    };
    let mut workers = Vec::with_capacity(WORKERS);
    for _ in 0..WORKERS {
        let worker = new_worker();
        let rx = Arc::clone(&line_rx);
        workers.push(thread::spawn(move || worker.run(&rx)));
    }
    // `initialize` is served on the reader thread, so no later line can overtake it.
    let reader_worker = new_worker();
    drop(out_tx);
    let read_result = read_loop(std::io::stdin().lock(), max_line_bytes, &mut |line| {
        if is_handshake(&line, &session) {
            if let Some(response) = reader_worker.handle(line) {
                reader_worker.notifier.notify(response);
            }
            return true;
        }
        line_tx.send(line).is_ok()
    });
    drop(reader_worker);
    drop(line_tx);
    for worker in workers {
        let _ = worker.join();
    }
    let _ = writer.join();
    read_result
}

struct Worker {
    server: Arc<Server>,
    session: Arc<Session>,
    notifier: StdoutNotifier,
    token: Option<String>,
    source: String,
    max_line_bytes: usize,
}

impl Worker {
    fn run(&self, lines: &Mutex<Receiver<Line>>) {
        loop {
            let next = lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recv();
            let Ok(line) = next else { return };
            if let Some(response) = self.handle(line) {
                self.notifier.notify(response);
            }
        }
    }

    fn handle(&self, line: Line) -> Option<Value> {
        let bytes = match line {
            Line::Message(bytes) => bytes,
            Line::TooLong => {
                let err = McpError::invalid_request("message_too_large")
                    .detail("max_bytes", self.max_line_bytes);
                return Some(self.server.error_body(None, &err));
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let env = Env {
            session: &self.session,
            notifier: &self.notifier,
            transport: Transport::Stdio,
            token: self.token.as_deref(),
            dev_credential: None,
            source: self.source.clone(),
            idempotency_header: None,
        };
        self.server.handle_bytes(&bytes, &env)
    }
}

/// A line that must be served before any later one: an `initialize` while the session is
/// not negotiated yet (a cheap byte search first, the real parse only on a hit).
fn is_handshake(line: &Line, session: &Session) -> bool {
    let Line::Message(bytes) = line else {
        return false;
    };
    if session.negotiated().is_some() || !bytes.windows(10).any(|w| w == b"initialize") {
        return false;
    }
    matches!(
        crate::jsonrpc::parse(bytes),
        crate::jsonrpc::Parsed::Single(crate::jsonrpc::Incoming::Request(req)) if req.method == "initialize"
    )
}

fn write_loop(rx: Receiver<Value>) {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while let Ok(message) = rx.recv() {
        let mut ok =
            serde_json::to_writer(&mut out, &message).is_ok() && out.write_all(b"\n").is_ok();
        // Batch what is already queued into one flush.
        while ok && let Ok(more) = rx.try_recv() {
            ok = serde_json::to_writer(&mut out, &more).is_ok() && out.write_all(b"\n").is_ok();
        }
        if !ok || out.flush().is_err() {
            tracing::warn!("stdout closed; stopping the writer");
            return;
        }
    }
}

/// Reads newline-delimited messages, never holding more than `cap` bytes of one line, and
/// hands each to `deliver` (which answers false once nobody takes lines any more).
fn read_loop(
    mut input: impl BufRead,
    cap: usize,
    deliver: &mut dyn FnMut(Line) -> bool,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    let mut discarding = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            // EOF: a final line without a newline still counts.
            if discarding {
                deliver(Line::TooLong);
            } else if !line.is_empty() {
                deliver(Line::Message(line));
            }
            return Ok(());
        }
        let (used, complete) = match chunk.iter().position(|&b| b == b'\n') {
            Some(pos) => (pos + 1, Some(pos)),
            None => (chunk.len(), None),
        };
        let data = &chunk[..complete.unwrap_or(used)];
        if !discarding {
            if line.len() + data.len() > cap {
                discarding = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(data);
            }
        }
        input.consume(used);
        if complete.is_some() {
            let message = if discarding {
                Line::TooLong
            } else {
                Line::Message(std::mem::take(&mut line))
            };
            discarding = false;
            if !deliver(message) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<Option<Vec<u8>>> {
        let mut got = Vec::new();
        let mut deliver = |l: Line| {
            got.push(match l {
                Line::Message(m) => Some(m),
                Line::TooLong => None,
            });
            true
        };
        read_loop(
            std::io::BufReader::with_capacity(7, input),
            cap,
            &mut deliver,
        )
        .expect("read");
        got
    }

    #[test]
    fn splits_lines_across_small_reads() {
        let got = lines(b"{\"a\":1}\n{\"b\":22}\nlast", 100);
        assert_eq!(
            got,
            vec![
                Some(b"{\"a\":1}".to_vec()),
                Some(b"{\"b\":22}".to_vec()),
                Some(b"last".to_vec())
            ]
        );
    }

    #[test]
    fn an_oversized_line_is_reported_and_the_next_one_still_read() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\nok\n");
        assert_eq!(lines(&input, 10), vec![None, Some(b"ok".to_vec())]);
    }
}
