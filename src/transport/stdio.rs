//! The stdio transport: newline-delimited JSON-RPC on stdin and stdout.
//!
//! stdout carries only MCP messages (one writer thread owns it); logs go to stderr. A
//! line longer than the cap is discarded as it streams in, answered with `-32600`, and
//! the session goes on. The lines of one read (up to `CHUNK_MAX`) go together to one of
//! a pool of workers: a client with many requests in flight then has them charged by the
//! rate limiter in one go, and the worker serves them without a thread switch per call.
//! The pool lets a slow chunk not hold up `ping` or `notifications/cancelled` in the
//! next one, and a tool that waits gets a thread of its own
//! ([`Guards::call_tools`](crate::guards::Guards::call_tools)). EOF on stdin lets the
//! in-flight requests finish, flushes stdout and ends the process with exit code 0.
//!
//! Each line is parsed once, by the dispatcher's [`Message::parse`], on the worker that
//! serves it. Only a line that may be the `initialize` opening the session is parsed on the
//! reader (it is served there, so that no later line overtakes it), and handed on parsed.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::Value;

use crate::catalog::McpError;
use crate::protocol::client::Notifier;
use crate::protocol::dispatch::{Env, Server, Transport};
use crate::protocol::inbound::{Message, MessageKind};
use crate::protocol::revisions::Session;

/// Chunks of lines served at once.
const WORKERS: usize = 16;
/// Most lines handed to a worker together.
const CHUNK_MAX: usize = 32;
/// Chunks read ahead of the workers (back-pressure on a client that floods stdin).
const QUEUE_DEPTH: usize = 16;
/// Bytes read from stdin at a time: room for many requests of a busy client per read.
const READ_BUFFER: usize = 64 * 1024;

/// One line read from stdin.
enum Line {
    /// A complete line (without the newline).
    Message(Vec<u8>),
    /// A line the reader parsed already (to see whether it opens the session).
    Parsed(Message),
    /// A line that exceeded the cap; its bytes were discarded.
    TooLong,
}

/// Hands messages to the stdout writer as finished lines: each is serialized (and its
/// tree freed) on the thread that made it, so the writer only moves bytes.
struct StdoutNotifier(Sender<Vec<u8>>);

impl Notifier for StdoutNotifier {
    fn notify(&self, message: Value) {
        let mut line = Vec::with_capacity(256);
        // Serializing a `Value` into memory cannot fail.
        if serde_json::to_writer(&mut line, &message).is_ok() {
            line.push(b'\n');
            // The writer only goes away at shutdown, when nothing is left to tell.
            let _ = self.0.send(line);
        }
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
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>();
    let writer = thread::spawn(move || write_loop(out_rx));
    let (chunk_tx, chunk_rx) = mpsc::sync_channel::<Vec<Line>>(QUEUE_DEPTH);
    let chunk_rx = Arc::new(Mutex::new(chunk_rx));
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
        let rx = Arc::clone(&chunk_rx);
        workers.push(thread::spawn(move || worker.run(&rx)));
    }
    // `initialize` is served on the reader thread, so no later line can overtake it.
    let reader_worker = new_worker();
    drop(out_tx);
    let mut chunk = Vec::new();
    let input = BufReader::with_capacity(READ_BUFFER, std::io::stdin().lock());
    let read_result = read_loop(input, max_line_bytes, &mut |line, more_buffered| {
        let line = match line {
            Line::Message(bytes) if may_open_the_session(&bytes, &session) => {
                Line::Parsed(Message::parse(&bytes))
            }
            line => line,
        };
        if let Line::Parsed(message) = &line
            && message.kind() == MessageKind::Initialize
        {
            if !chunk.is_empty() && chunk_tx.send(std::mem::take(&mut chunk)).is_err() {
                return false;
            }
            reader_worker.handle(vec![line]);
            return true;
        }
        chunk.push(line);
        if more_buffered && chunk.len() < CHUNK_MAX {
            return true;
        }
        chunk_tx.send(std::mem::take(&mut chunk)).is_ok()
    });
    drop(reader_worker);
    drop(chunk_tx);
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
    fn run(&self, chunks: &Mutex<Receiver<Vec<Line>>>) {
        loop {
            let next = chunks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recv();
            let Ok(chunk) = next else { return };
            self.handle(chunk);
        }
    }

    /// Serves the lines of one chunk, sending each response as soon as it is ready.
    fn handle(&self, chunk: Vec<Line>) {
        let mut messages = Vec::with_capacity(chunk.len());
        for line in chunk {
            match line {
                Line::Message(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {}
                Line::Message(bytes) => messages.push(Message::parse(&bytes)),
                Line::Parsed(message) => messages.push(message),
                Line::TooLong => {
                    let err = McpError::invalid_request("message_too_large")
                        .detail("max_bytes", self.max_line_bytes);
                    self.notifier
                        .notify(self.server.error_response(None, err).body);
                }
            }
        }
        if messages.is_empty() {
            return;
        }
        let env = Env {
            session: &self.session,
            notifier: &self.notifier,
            transport: Transport::Stdio,
            token: self.token.as_deref(),
            dev_credential: None,
            source: self.source.clone(),
            idempotency_header: None,
            http: None,
            session_id: None,
        };
        self.server.handle(messages, &env, &|response| {
            self.notifier.notify(response.body)
        });
    }
}

/// Whether a line may be an `initialize` that opens the session, which must be served
/// before any later line: only while the session is not negotiated, and only when the
/// line holds the word (a byte search, so that the reader parses nothing else).
fn may_open_the_session(bytes: &[u8], session: &Session) -> bool {
    session.negotiated().is_none() && bytes.windows(10).any(|w| w == b"initialize")
}

fn write_loop(rx: Receiver<Vec<u8>>) {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    while let Ok(line) = rx.recv() {
        let mut ok = out.write_all(&line).is_ok();
        // Batch what is already queued into one flush.
        while ok && let Ok(more) = rx.try_recv() {
            ok = out.write_all(&more).is_ok();
        }
        if !ok || out.flush().is_err() {
            tracing::warn!("stdout closed; stopping the writer");
            return;
        }
    }
}

/// Reads newline-delimited messages, never holding more than `cap` bytes of one line, and
/// hands each to `deliver` with whether another complete line is already buffered (so
/// that reading it will not wait); `deliver` answers false once nobody takes lines any
/// more.
fn read_loop<R: Read>(
    mut input: BufReader<R>,
    cap: usize,
    deliver: &mut dyn FnMut(Line, bool) -> bool,
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
                deliver(Line::TooLong, false);
            } else if !line.is_empty() {
                deliver(Line::Message(line), false);
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
            if !deliver(message, input.buffer().contains(&b'\n')) {
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
        let mut deliver = |l: Line, _more: bool| {
            got.push(match l {
                Line::Message(m) => Some(m),
                Line::Parsed(_) => panic!("the read loop parses nothing"),
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

    /// Whether each delivered line was told that another complete line was buffered.
    fn more_flags(input: &[u8], capacity: usize) -> Vec<bool> {
        let mut flags = Vec::new();
        let mut deliver = |_: Line, more: bool| {
            flags.push(more);
            true
        };
        read_loop(
            std::io::BufReader::with_capacity(capacity, input),
            100,
            &mut deliver,
        )
        .expect("read");
        flags
    }

    #[test]
    fn lines_that_arrived_together_are_marked_so_and_the_last_one_of_a_read_is_not() {
        // One read holds everything: all but the last complete line have another behind
        // them; the unfinished tail is delivered at EOF.
        assert_eq!(
            more_flags(b"a\nb\nc\npartial", 64),
            [true, true, false, false]
        );
        // A read that ends on a newline: the next line has to be read (may wait), so the
        // chunk is handed over.
        assert_eq!(more_flags(b"ab\ncd\n", 3), [false, false]);
    }

    #[test]
    fn only_a_line_naming_initialize_on_a_fresh_session_is_parsed_by_the_reader() {
        let session = Session::new();
        let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#;
        assert!(may_open_the_session(initialize, &session));
        assert!(!may_open_the_session(
            br#"{"jsonrpc":"2.0","method":"ping"}"#,
            &session
        ));
        assert!(session.initialize("2025-11-25", Value::Null));
        assert!(!may_open_the_session(initialize, &session));
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
