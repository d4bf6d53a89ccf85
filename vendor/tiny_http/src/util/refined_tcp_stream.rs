use std::io::Result as IoResult;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::connection::Connection;
#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use crate::ssl::SslStream;
use crate::util::conn_state::ConnState;

pub(crate) enum Stream {
    // Patched for tollgate: shared, not duplicated (see `Connection::read_shared`).
    Http(Arc<Connection>),
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    Https(SslStream),
}

impl Clone for Stream {
    fn clone(&self) -> Self {
        match self {
            Stream::Http(tcp_stream) => Stream::Http(Arc::clone(tcp_stream)),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => Stream::Https(ssl_stream.clone()),
        }
    }
}

impl From<Arc<Connection>> for Stream {
    fn from(tcp_stream: Arc<Connection>) -> Self {
        Stream::Http(tcp_stream)
    }
}

impl Stream {
    fn secure(&self) -> bool {
        match self {
            Stream::Http(_) => false,
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(_) => true,
        }
    }

    fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.peer_addr(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.peer_addr(),
        }
    }

    fn shutdown(&mut self, how: Shutdown) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.shutdown(how),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.shutdown(how),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.read_shared(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.write_shared(buf),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.write(buf),
        }
    }

    fn flush(&mut self) -> IoResult<()> {
        match self {
            Stream::Http(tcp_stream) => tcp_stream.flush_shared(),
            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
            Stream::Https(ssl_stream) => ssl_stream.flush(),
        }
    }
}

pub struct RefinedTcpStream {
    stream: Stream,
    close_read: bool,
    close_write: bool,
    watch: Option<Watch>,
}

/// Patched for tollgate: reads of a watched stream end at the connection's deadline (for
/// the whole request head or body, not per read). The socket's read timeout is set to the
/// time left whenever the one set before would overshoot the deadline, so reads that
/// follow each other quickly cost no extra system call.
struct Watch {
    state: Arc<ConnState>,
    armed: Option<Duration>,
}

/// How far a read may outlast its deadline before the socket timeout is set again.
const DEADLINE_SLACK: Duration = Duration::from_millis(20);
/// The read timeout while no deadline applies (a request being worked on reads nothing).
const NO_DEADLINE_TIMEOUT: Duration = Duration::from_secs(30);

impl RefinedTcpStream {
    pub(crate) fn new<S>(stream: S) -> (RefinedTcpStream, RefinedTcpStream)
    where
        S: Into<Stream>,
    {
        let stream: Stream = stream.into();

        let (read, write) = (stream.clone(), stream);

        let read = RefinedTcpStream {
            stream: read,
            close_read: true,
            close_write: false,
            watch: None,
        };

        let write = RefinedTcpStream {
            stream: write,
            close_read: false,
            close_write: true,
            watch: None,
        };

        (read, write)
    }

    /// Patched for tollgate: a connection's two halves, its reads under `state`'s deadline.
    pub(crate) fn watched(
        socket: Arc<Connection>,
        state: Arc<ConnState>,
    ) -> (RefinedTcpStream, RefinedTcpStream) {
        let (mut read, write) = RefinedTcpStream::new(socket);
        read.watch = Some(Watch { state, armed: None });
        (read, write)
    }

    fn read_watched(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "request deadline");
        loop {
            let Some(watch) = self.watch.as_mut() else {
                return self.stream.read(buf);
            };
            let remaining = watch.state.remaining().map_err(|()| timed_out())?;
            let wanted = remaining.unwrap_or(NO_DEADLINE_TIMEOUT);
            let rearm = match watch.armed {
                None => true,
                Some(armed) => armed > wanted + DEADLINE_SLACK || armed < wanted / 2,
            };
            if rearm {
                #[allow(irrefutable_let_patterns)]
                if let Stream::Http(socket) = &self.stream {
                    socket.set_read_timeout(wanted);
                }
                watch.armed = Some(wanted);
            }
            match self.stream.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if remaining.is_none() {
                        return Err(timed_out());
                    }
                    // The socket timeout ended before the deadline: look at it again.
                }
                other => return other,
            }
        }
    }

    /// Returns true if this struct wraps around a secure connection.
    #[inline]
    pub(crate) fn secure(&self) -> bool {
        self.stream.secure()
    }

    pub(crate) fn peer_addr(&mut self) -> IoResult<Option<SocketAddr>> {
        self.stream.peer_addr()
    }
}

impl Drop for RefinedTcpStream {
    fn drop(&mut self) {
        if self.close_read {
            self.stream.shutdown(Shutdown::Read).ok();
        }

        if self.close_write {
            self.stream.shutdown(Shutdown::Write).ok();
        }
    }
}

impl Read for RefinedTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        self.read_watched(buf)
    }
}

impl Write for RefinedTcpStream {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.stream.flush()
    }
}
