//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

// Patched for tollgate: the connection handling was rewritten for plain HTTP only.
#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
compile_error!("this copy of tiny_http serves plain HTTP only; terminate TLS in a reverse proxy");

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Patched for tollgate: the longest a read or write on a connection may block.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;
use util::{ConnState, Registry, Ticket};

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use limits::{Limits, Refusal, RefusalBody, ServerOptions};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod limits;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // Patched for tollgate: true while the accept thread runs
    accepting: Arc<AtomicBool>,

    // Patched for tollgate: the open connections
    registry: Arc<Registry>,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

/// Patched for tollgate: serves one request on its connection's thread (see
/// [`Server::http_with_handler`]).
pub type Handler = Arc<dyn Fn(Request) + Send + Sync + 'static>;

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with(listener.into(), ssl_config, None)
    }

    /// Patched for tollgate: a plain-HTTP server that calls `handler` for every request
    /// on the thread of the connection it arrived on, instead of queueing it for
    /// [`Server::recv`]. A keep-alive request then costs no hand-off between threads;
    /// the connection's next request is read once `handler` returns.
    pub fn http_with_handler<A>(
        addr: A,
        handler: Handler,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        let listener = ConfigListenAddr::from_socket_addrs(addr)?.bind()?;
        Self::from_listener_with(listener, None, Some(handler))
    }

    fn from_listener_with(
        listener: Listener,
        ssl_config: Option<SslConfig>,
        handler: Option<Handler>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        if ssl_config.is_some() {
            return Err(
                "this copy of tiny_http serves plain HTTP only (terminate TLS in a proxy)".into(),
            );
        }
        let options = ServerOptions {
            // The upstream behaviour: no cap worth speaking of, and the 30 s per-read
            // timeout as every deadline.
            limits: Limits {
                max_connections: usize::MAX,
                head_timeout: SOCKET_TIMEOUT,
                body_timeout: SOCKET_TIMEOUT,
                idle_timeout: SOCKET_TIMEOUT,
                ..Limits::default()
            },
            refusal_body: None,
        };
        Self::serve_listener(listener, handler, options)
    }

    /// Patched for tollgate: like [`Server::http_with_handler`], with the limits and
    /// refusal bodies of `options` (see [`crate::limits`]).
    pub fn http_with_options<A>(
        addr: A,
        handler: Handler,
        options: ServerOptions,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        let listener = ConfigListenAddr::from_socket_addrs(addr)?.bind()?;
        Self::serve_listener(listener, Some(handler), options)
    }

    /// Patched for tollgate: starts the accept thread (which admits connections into the
    /// registry and hands each to a pool thread) and the refusal thread.
    fn serve_listener(
        listener: Listener,
        handler: Option<Handler>,
        options: ServerOptions,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let close_trigger = Arc::new(AtomicBool::new(false));
        let local_addr = listener.local_addr()?;
        log::debug!("Server listening on {}", local_addr);

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);
        let options = Arc::new(options);
        let registry = Registry::new(options.limits.max_connections);
        let accepting = Arc::new(AtomicBool::new(true));
        let acceptor = Acceptor {
            listener,
            handler,
            options: Arc::clone(&options),
            registry: Arc::clone(&registry),
            refuser: Refuser::start(Arc::clone(&options))?,
            pool: util::TaskPool::new()?,
            messages: messages.clone(),
            close: close_trigger.clone(),
            accepting: Running(Arc::clone(&accepting)),
        };
        thread::Builder::new()
            .name("tiny-http-accept".into())
            .spawn(move || acceptor.run())?;

        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            accepting,
            registry,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    pub fn num_connections(&self) -> usize {
        // Patched for tollgate: the connections in the registry.
        self.registry.len()
    }

    /// Patched for tollgate: whether the accept thread still runs. Once it has stopped
    /// (it panicked, or the server is closing) no new connection is served.
    pub fn is_accepting(&self) -> bool {
        self.accepting.load(Relaxed)
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Patched for tollgate: the accept loop and what it needs.
struct Acceptor {
    listener: Listener,
    handler: Option<Handler>,
    options: Arc<ServerOptions>,
    registry: Arc<Registry>,
    refuser: Refuser,
    pool: util::TaskPool,
    messages: Arc<MessagesQueue<Message>>,
    close: Arc<AtomicBool>,
    accepting: Running,
}

/// Clears its flag when dropped: the accept thread ended (normally or by a panic).
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Relaxed);
    }
}

impl Acceptor {
    fn run(self) {
        log::debug!("Running accept thread");
        while !self.close.load(Relaxed) {
            match self.listener.accept() {
                Ok((sock, _)) => self.admit(sock),
                Err(e) => {
                    // Patched for tollgate: a failed accept (out of file descriptors,
                    // a connection reset before accept) must not stop the listener.
                    log::error!("Error accepting new client: {}", e);
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
        log::debug!("Terminating accept thread");
    }

    /// Registers a connection (evicting one at the cap) and hands it to a pool thread;
    /// refuses it when neither is possible.
    fn admit(&self, sock: Connection) {
        // No read or write may block a connection thread forever, and small replies must
        // not wait for delayed ACKs.
        sock.set_timeouts(SOCKET_TIMEOUT);
        let socket = Arc::new(sock);
        let limits = &self.options.limits;
        let state = Arc::new(ConnState::new(limits.head_timeout, limits.idle_timeout));
        let Some(ticket) = self.registry.admit(&state, &socket) else {
            self.refuser.refuse(socket, Refusal::TooManyConnections);
            return;
        };
        let task = self.connection_task(Arc::clone(&socket), state, ticket);
        if let Err(queued) = self.pool.spawn(task) {
            // No thread could be created: free one that waits on a slow client (its task
            // then runs on it), or refuse.
            if !self.registry.evict_one() && self.pool.withdraw(queued) {
                self.refuser.refuse(socket, Refusal::NoThread);
            }
        }
    }

    fn connection_task(
        &self,
        socket: Arc<Connection>,
        state: Arc<ConnState>,
        ticket: Ticket,
    ) -> Box<dyn FnOnce() + Send> {
        let (options, handler, messages) = (
            Arc::clone(&self.options),
            self.handler.clone(),
            self.messages.clone(),
        );
        // The connection is built on its thread: a task dropped unrun (withdrawn) leaves
        // the socket open for its refusal.
        Box::new(move || {
            let _ticket = ticket;
            let client = ClientConnection::new(socket, state, options);
            match handler {
                Some(handler) => {
                    for rq in client {
                        handler(rq);
                    }
                }
                None => {
                    for rq in client {
                        messages.push(rq.into());
                    }
                }
            }
        })
    }
}

/// Patched for tollgate: writes the refusals of connections that get no thread, on a
/// thread of its own made at start (so that it exists when no thread can be created).
/// At most `REFUSALS_QUEUED` wait; beyond that a connection is closed unanswered.
struct Refuser {
    queue: mpsc::SyncSender<(Arc<Connection>, Refusal)>,
}

const REFUSALS_QUEUED: usize = 64;
/// How long a refused connection is drained so that its client reads the refusal.
const REFUSER_LINGER: Duration = Duration::from_millis(200);

impl Refuser {
    fn start(options: Arc<ServerOptions>) -> IoResult<Refuser> {
        let (queue, refusals) = mpsc::sync_channel::<(Arc<Connection>, Refusal)>(REFUSALS_QUEUED);
        thread::Builder::new()
            .name("tiny-http-refuse".into())
            .spawn(move || {
                for (socket, refusal) in refusals {
                    socket.set_write_timeout(REFUSER_LINGER);
                    client::refuse_connection(&socket, &options, refusal, REFUSER_LINGER);
                }
            })?;
        Ok(Refuser { queue })
    }

    fn refuse(&self, socket: Arc<Connection>, refusal: Refusal) {
        if let Err(mpsc::TrySendError::Full((socket, _))) = self.queue.try_send((socket, refusal)) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}
