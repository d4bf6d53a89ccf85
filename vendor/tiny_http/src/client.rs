use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufRead, BufReader, BufWriter, ErrorKind, Read};

use std::net::{Shutdown, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{HTTPVersion, Method};
use crate::connection::Connection;
use crate::limits::{Refusal, ServerOptions};
use crate::util::RefinedTcpStream;
use crate::util::{ConnState, Phase};
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// Patched for tollgate: how long a refused connection is drained before it is closed, so
/// that the refusal is not lost to a reset (closing with unread input sends RST).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// The most bytes drained from a refused connection.
const REFUSAL_DRAIN: usize = 256 * 1024;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // Patched for tollgate: the socket (to close its writing half after a refusal), the
    // connection's shared state, the listener's limits and refusal bodies
    socket: Arc<Connection>,
    state: Arc<ConnState>,
    options: Arc<ServerOptions>,

    // bytes of the current request head received so far
    head_bytes: usize,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    // Patched for tollgate: a line, the header count or the whole head is over its cap.
    HeadTooLarge,
    // Patched for tollgate: ambiguous or unsupported body framing.
    BadFraming,
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    /// Patched for tollgate: a connection whose reads follow `state`'s deadlines.
    pub(crate) fn new(
        socket: Arc<Connection>,
        state: Arc<ConnState>,
        options: Arc<ServerOptions>,
    ) -> ClientConnection {
        let (mut read_socket, write_socket) =
            RefinedTcpStream::watched(Arc::clone(&socket), Arc::clone(&state));
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();

        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            socket,
            state,
            options,
            head_bytes: 0,
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    fn read_next_line(&mut self) -> Result<AsciiString, ReadError> {
        let mut buf = Vec::new();
        let limits = &self.options.limits;

        loop {
            // Patched for tollgate: a line, and the whole head, may not grow without bound.
            if buf.len() > limits.max_header_line || self.head_bytes > limits.max_header_bytes {
                return Err(ReadError::HeadTooLarge);
            }

            // Patched for tollgate: the line is taken from the reader's buffer as far as it
            // goes (the head's bytes are never read past: the body stays in the buffer),
            // rather than a byte at a time through `Read`.
            let source = self.next_header_source.reader();
            let available = match source.fill_buf() {
                Ok(available) => available,
                Err(e) => return Err(ReadError::ReadIoError(e)),
            };
            if available.is_empty() {
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::ConnectionAborted,
                    "Unexpected EOF",
                )));
            }
            // Patched for tollgate: the first byte of a request on a kept-alive connection
            // starts its head deadline.
            if self.head_bytes == 0
                && self.state.phase() == Phase::Idle
                && !self
                    .state
                    .advance(Phase::Idle, Phase::Head, Some(limits.head_timeout))
            {
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::ConnectionAborted,
                    "connection evicted",
                )));
            }
            // Never more than the caps allow past what is already held.
            let room = (limits.max_header_line + 1 - buf.len().min(limits.max_header_line))
                .min(limits.max_header_bytes + 1 - self.head_bytes.min(limits.max_header_bytes));
            let window = &available[..available.len().min(room.max(1))];
            match window.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    buf.extend_from_slice(&window[..=end]);
                    source.consume(end + 1);
                    self.head_bytes += end + 1;
                    buf.pop(); // the '\n'
                    if buf.last() == Some(&b'\r') {
                        buf.pop(); // the '\r'
                        return AsciiString::from_ascii(buf)
                            .map_err(|_| ReadError::WrongRequestLine);
                    }
                    // A bare LF does not end a line: it is part of it, as before.
                    buf.push(b'\n');
                }
                None => {
                    let taken = window.len();
                    buf.extend_from_slice(window);
                    source.consume(taken);
                    self.head_bytes += taken;
                }
            }
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let line = self.read_next_line()?;

                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line()?;

                    if line.is_empty() {
                        break;
                    };
                    // Patched for tollgate: bounded number of header lines.
                    if headers.len() >= self.options.limits.max_header_lines {
                        return Err(ReadError::HeadTooLarge);
                    }
                    headers.push(match FromStr::from_str(line.as_str().trim_end()) {
                        // TODO: remove this conversion
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                headers
            };

            (method, path, version, headers)
        };

        // Patched for tollgate: the body (if any) is received under its own deadline.
        if !self.state.advance(
            Phase::Head,
            Phase::Body,
            Some(self.options.limits.body_timeout),
        ) {
            return Err(ReadError::ReadIoError(IoError::new(
                ErrorKind::ConnectionAborted,
                "connection evicted",
            )));
        }

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            // Patched for tollgate: a peer that already reset has no address; no panic.
            self.remote_addr.as_ref().ok().copied().flatten(),
            data_source,
            writer,
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
                request::RequestCreationError::BadFraming => ReadError::BadFraming,
            }
        })?;

        // return the request
        Ok(request.track(Arc::clone(&self.state)))
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        // Patched for tollgate: nor when the previous request left the framing unknown, or
        // the connection was evicted.
        if self.no_more_requests || self.state.must_close() {
            return None;
        }

        // Patched for tollgate: a kept-alive connection waits at most `idle_timeout` for
        // its next request (the first request's deadline runs from the accept).
        if self.state.phase() == Phase::Working && !self.state.responded() {
            return None;
        }
        self.head_bytes = 0;

        let rq = match self.read() {
            // Patched for tollgate: refusals carry the application's body (see
            // `ServerOptions::refusal_body`) and close the connection, since where the next
            // request would start is unknown.
            Err(ReadError::WrongRequestLine) | Err(ReadError::WrongHeader(_)) => {
                self.refuse(Refusal::MalformedHead);
                return None;
            }

            Err(ReadError::HeadTooLarge) => {
                self.refuse(Refusal::HeadersTooLarge);
                return None;
            }

            Err(ReadError::BadFraming) => {
                self.refuse(Refusal::BadFraming);
                return None;
            }

            Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                // A request that was started gets 408; a connection that sent nothing is
                // closed without an answer nobody asked for (it could cross a new request).
                if self.head_bytes > 0 || self.state.phase() == Phase::Body {
                    self.refuse(Refusal::RequestTimeout);
                }
                return None;
            }

            Err(ReadError::ExpectationFailed(_)) => {
                // Patched for tollgate: the status line is always HTTP/1.1 (upstream
                // echoed the request's version, e.g. "HTTP/2.0 417").
                let writer = self.sink.next().unwrap();
                let response = with_close(Response::new_empty(StatusCode(417)));
                response
                    .raw_print(writer, HTTPVersion(1, 1), &[], true, None)
                    .ok();
                return None; // TODO: should be recoverable, but needs handling in case of body
            }

            Err(ReadError::ReadIoError(_)) => return None,

            Ok(rq) => rq,
        };

        // checking HTTP version
        // Patched for tollgate: HTTP/0.9 has no status line to answer with.
        if *rq.http_version() > (1, 1) || *rq.http_version() < (1, 0) {
            // Patched for tollgate: the answer goes through the request's own writer.
            // Upstream took the connection's next writer, which waits for this request's
            // writer to finish while the request holds it: the thread hung for good.
            self.state.close_after();
            let mut writer = rq.into_writer();
            let response = with_close(
                Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505)),
            );
            response
                .raw_print(&mut writer, HTTPVersion(1, 1), &[], false, None)
                .and_then(|()| std::io::Write::flush(&mut writer))
                .ok();
            // Patched for tollgate: the request's body is not read, so its end is unknown.
            return None;
        }

        // updating the status of the connection
        let connection_header = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("Connection"))
            .map(|h| h.value.as_str());

        let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

        match lowercase {
            Some(ref val) if val.contains("close") => self.no_more_requests = true,
            Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
            Some(ref val)
                if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
            {
                self.no_more_requests = true
            }
            None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
            _ => (),
        };

        // returning the request
        Some(rq)
    }
}

impl ClientConnection {
    /// Patched for tollgate: writes the response of `refusal` with `Connection: close`,
    /// then closes the writing half and drains what the client still sends for a moment,
    /// so that the client reads the refusal instead of a connection reset.
    fn refuse(&mut self, refusal: Refusal) {
        use std::io::Write;
        let response = with_close(self.options.refusal_response(refusal));
        let mut writer = self.sink.next().unwrap();
        let written = response
            .raw_print(writer.by_ref(), HTTPVersion(1, 1), &[], false, None)
            .and_then(|()| writer.flush());
        drop(writer);
        if written.is_err() {
            return;
        }
        let _ = self.socket.shutdown(Shutdown::Write);
        if !self.state.enter(Phase::Closing, Some(REFUSAL_LINGER)) {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut drained = 0;
        while drained < REFUSAL_DRAIN {
            match self.next_header_source.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
}

/// Patched for tollgate: a refusal response that says the connection closes.
pub(crate) fn with_close<R: Read>(response: crate::Response<R>) -> crate::Response<R> {
    response.closing()
}

/// Patched for tollgate: refuses a connection that gets no thread of its own (the cap is
/// reached, or no thread can be created): the refusal is written at once, the writing half
/// closed, and the input drained for at most `linger` so that the client reads the refusal.
pub(crate) fn refuse_connection(
    socket: &Connection,
    options: &ServerOptions,
    refusal: Refusal,
    linger: Duration,
) {
    let response = with_close(options.refusal_response(refusal));
    let mut writer = SocketWriter(socket);
    if response
        .raw_print(&mut writer, HTTPVersion(1, 1), &[], false, None)
        .is_err()
    {
        return;
    }
    let _ = socket.shutdown(Shutdown::Write);
    let deadline = std::time::Instant::now() + linger;
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < REFUSAL_DRAIN {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        socket.set_read_timeout(left);
        match socket.read_shared(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// Writes straight to a shared socket.
struct SocketWriter<'a>(&'a Connection);

impl std::io::Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.0.write_shared(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.0.flush_shared()
    }
}

fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }
}
