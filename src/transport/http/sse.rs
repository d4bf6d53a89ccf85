//! Server-sent events: a response that turns into an event stream at the first
//! notification of a tool call, and ends with the final response as its last event.

use std::io::Read;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tiny_http::{Header, Request, Response, StatusCode};

use super::Slots;
use super::status::{Body, Reply, respond};
use crate::catalog::{ErrorKind, McpError};
use crate::protocol::client::Notifier;

/// What a handler produced: a complete reply, or the final message of a response that
/// is already streaming as server-sent events.
pub(super) enum Outgoing {
    Reply(Reply),
    Final(Value),
}

/// The response side of one HTTP request. It starts as a plain reply; the first
/// notification or server-to-client request of a tool call turns it into an SSE stream
/// (status 200, sent at once), on which the final response then arrives as the last event.
/// Guard rejections therefore keep their JSON body and HTTP status.
pub(super) struct Stream {
    pub(super) state: Mutex<StreamState>,
    pub(super) sse_allowed: bool,
    /// The body, read before the request took its worker slot.
    pub(super) body: Mutex<Option<Result<Vec<u8>, McpError>>>,
    /// The worker slots, one of which the request holds (none in tests).
    slots: Option<Arc<Slots>>,
    /// The request's calls waiting on another system now: the request's slot is given
    /// up by the first and taken again by the last (the calls of one batch wait side by
    /// side, on threads of their own).
    waiting: Mutex<usize>,
}

pub(super) enum StreamState {
    Pending(Option<Request>),
    Streaming {
        events: std::sync::mpsc::Sender<Vec<u8>>,
        writer: std::thread::JoinHandle<()>,
    },
}

impl Stream {
    pub(super) fn new(
        request: Request,
        sse_allowed: bool,
        body: Result<Vec<u8>, McpError>,
        slots: Option<Arc<Slots>>,
    ) -> Stream {
        Stream {
            state: Mutex::new(StreamState::Pending(Some(request))),
            sse_allowed,
            body: Mutex::new(Some(body)),
            slots,
            waiting: Mutex::new(0),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, StreamState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many of the request's calls wait on another system now.
    fn waiting(&self) -> std::sync::MutexGuard<'_, usize> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn is_streaming(&self) -> bool {
        matches!(*self.lock(), StreamState::Streaming { .. })
    }

    /// The body (read once, at most `cap` bytes).
    pub(super) fn read_body(&self, cap: usize) -> Result<Vec<u8>, McpError> {
        let body = self
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| Err(McpError::internal()))?;
        if body.len() > cap {
            return Err(McpError::new(ErrorKind::PayloadTooLarge).detail("max_bytes", cap));
        }
        Ok(body)
    }

    /// Sends the reply, or ends the stream with the final message.
    pub(super) fn finish(&self, outgoing: Outgoing) {
        let state = std::mem::replace(&mut *self.lock(), StreamState::Pending(None));
        match (state, outgoing) {
            (StreamState::Pending(Some(request)), Outgoing::Reply(reply)) => {
                respond(request, reply)
            }
            (StreamState::Pending(Some(request)), Outgoing::Final(message)) => {
                respond(request, Reply::json(200, message));
            }
            (StreamState::Streaming { events, writer }, outgoing) => {
                let last = match outgoing {
                    Outgoing::Final(message) => message,
                    Outgoing::Reply(Reply {
                        body: Body::Json(message),
                        ..
                    }) => message,
                    Outgoing::Reply(_) => Value::Null,
                };
                let _ = events.send(sse_event(&last));
                drop(events);
                let _ = writer.join();
            }
            (StreamState::Pending(None), _) => {}
        }
    }
}

impl Notifier for Stream {
    fn delivers(&self) -> bool {
        self.sse_allowed
    }

    /// The first of the request's calls to wait on a backend gives its slot up.
    fn step_away(&self) {
        let Some(slots) = &self.slots else {
            return;
        };
        let mut waiting = self.waiting();
        if *waiting == 0 {
            slots.step_away();
        }
        *waiting += 1;
    }

    /// The last of them to be done takes a slot again.
    fn step_back(&self) {
        let Some(slots) = &self.slots else {
            return;
        };
        let mut waiting = self.waiting();
        *waiting = waiting.saturating_sub(1);
        if *waiting == 0 {
            slots.step_back();
        }
    }

    fn notify(&self, message: Value) {
        if !self.sse_allowed {
            return;
        }
        let mut state = self.lock();
        if let StreamState::Pending(request) = &mut *state {
            let Some(request) = request.take() else {
                return;
            };
            let (events, rx) = std::sync::mpsc::channel();
            // Each event leaves as soon as it is queued: the reader returns what is ready,
            // and the response flushes after every read.
            let response = Response::new(
                StatusCode(200),
                sse_headers(),
                EventReader {
                    rx,
                    pending: Vec::new(),
                    offset: 0,
                },
                None,
                None,
            )
            .with_flush_each_read();
            let (hand_over, taken) = std::sync::mpsc::sync_channel::<Request>(1);
            let spawned = std::thread::Builder::new()
                .name("http-sse".into())
                .spawn(move || {
                    if let Ok(request) = taken.recv()
                        && let Err(e) = request.respond(response)
                    {
                        tracing::debug!(error = %e, "client closed the event stream");
                    }
                });
            // Without a thread for the stream the call goes on, its notifications are
            // dropped, and its final response is sent as a plain reply.
            let writer = match spawned {
                Ok(writer) => writer,
                Err(e) => {
                    tracing::warn!(error = %e, "no thread for an event stream; notifications dropped");
                    *state = StreamState::Pending(Some(request));
                    return;
                }
            };
            if let Err(std::sync::mpsc::SendError(request)) = hand_over.send(request) {
                *state = StreamState::Pending(Some(request));
                return;
            }
            crate::guards::metrics::global().record_http_status(200);
            *state = StreamState::Streaming { events, writer };
        }
        if let StreamState::Streaming { events, .. } = &*state {
            let _ = events.send(sse_event(&message));
        }
    }
}

/// One SSE event.
fn sse_event(message: &Value) -> Vec<u8> {
    let mut event = b"event: message\ndata: ".to_vec();
    event.extend_from_slice(&serde_json::to_vec(message).unwrap_or_default());
    event.extend_from_slice(b"\n\n");
    event
}

fn sse_headers() -> Vec<Header> {
    [
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
        ("X-Accel-Buffering", "no"),
    ]
    .iter()
    .filter_map(|(n, v)| Header::from_bytes(n.as_bytes(), v.as_bytes()).ok())
    .collect()
}

/// Feeds queued SSE events to tiny_http until the sender is dropped. A read waits only
/// while no event is queued, then returns every event already queued that fits: the
/// response sends (and flushes) each read at once, so an event never waits for another,
/// and a burst leaves in one chunk.
pub(super) struct EventReader {
    pub(super) rx: std::sync::mpsc::Receiver<Vec<u8>>,
    pub(super) pending: Vec<u8>,
    pub(super) offset: usize,
}

impl Read for EventReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.offset == self.pending.len() {
            match self.rx.recv() {
                Ok(next) => {
                    self.pending = next;
                    self.offset = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let mut filled = 0;
        loop {
            let n = (buf.len() - filled).min(self.pending.len() - self.offset);
            buf[filled..filled + n].copy_from_slice(&self.pending[self.offset..self.offset + n]);
            self.offset += n;
            filled += n;
            if filled == buf.len() {
                return Ok(filled);
            }
            match self.rx.try_recv() {
                Ok(next) => {
                    self.pending = next;
                    self.offset = 0;
                }
                Err(_) => return Ok(filled),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> (std::sync::mpsc::Sender<Vec<u8>>, EventReader) {
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = EventReader {
            rx,
            pending: Vec::new(),
            offset: 0,
        };
        (tx, reader)
    }

    #[test]
    fn an_event_is_not_padded() {
        let event = sse_event(&serde_json::json!({"a": 1}));
        assert_eq!(event, b"event: message\ndata: {\"a\":1}\n\n");
    }

    #[test]
    fn a_read_returns_what_is_queued_without_waiting_for_more() {
        let (tx, mut reader) = reader();
        tx.send(b"one".to_vec()).expect("send");
        tx.send(b"two".to_vec()).expect("send");
        let mut buf = [0u8; 64];
        assert_eq!(reader.read(&mut buf).expect("read"), 6);
        assert_eq!(&buf[..6], b"onetwo");
        tx.send(b"three".to_vec()).expect("send");
        // A small buffer: what does not fit waits for the next read.
        let mut small = [0u8; 2];
        assert_eq!(reader.read(&mut small).expect("read"), 2);
        assert_eq!(&small, b"th");
        drop(tx);
        assert_eq!(reader.read(&mut buf).expect("read"), 3);
        assert_eq!(&buf[..3], b"ree");
        assert_eq!(reader.read(&mut buf).expect("read"), 0, "the end");
    }
}
