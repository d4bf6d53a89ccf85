//! A client's web server for the tests: HTTPS on 127.0.0.1 with a certificate for
//! `localhost` and `127.0.0.1` issued by a certificate authority made for the test (its
//! PEM file is what the fetcher's `ca_file` trusts). Each connection gets the [`Reply`]
//! the test's handler picks for its path, then is closed; a reply can stop half-way and
//! hold the connection open until the server is dropped.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The longest a test connection is held open, should a test forget to drop its server.
const HOLD_LIMIT: Duration = Duration::from_secs(30);

/// A certificate authority and the server certificate it issued.
pub(super) struct Pki {
    /// The authority's certificate, as a PEM file.
    pub(super) ca_file: PathBuf,
    chain: Vec<CertificateDer<'static>>,
    key: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Pki {
    /// A new authority, and a certificate for `localhost` and `127.0.0.1` signed by it.
    pub(super) fn new() -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tollgate test authority");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
        let certificate = params.signed_by(&key, &ca).expect("server certificate");
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("CA file written");
        Pki {
            ca_file,
            chain: vec![certificate.der().clone()],
            key: key.serialize_der(),
            _dir: dir,
        }
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), key)
            .expect("server certificate accepted");
        Arc::new(config)
    }
}

/// What the server answers on one connection.
#[derive(Clone)]
pub(super) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    with_length: bool,
    stall_after: Option<usize>,
}

impl Reply {
    /// `200` with `body` as `application/json`.
    pub(super) fn json(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
            body: body.into(),
            with_length: true,
            stall_after: None,
        }
    }

    /// The same with another status.
    pub(super) fn status(self, status: u16) -> Reply {
        Reply { status, ..self }
    }

    /// The same with one more header.
    pub(super) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same without a `Content-Type`.
    pub(super) fn untyped(mut self) -> Reply {
        self.headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
        self
    }

    /// The same without a `Content-Length`: the body ends when the connection closes.
    pub(super) fn without_length(self) -> Reply {
        Reply {
            with_length: false,
            ..self
        }
    }

    /// The same, but only the first `sent` bytes of the body are sent; the connection is
    /// then held open, silent, until the server is dropped.
    pub(super) fn stalling_after(self, sent: usize) -> Reply {
        Reply {
            stall_after: Some(sent),
            ..self
        }
    }

    fn head(&self) -> String {
        let mut head = format!("HTTP/1.1 {} Test\r\nConnection: close\r\n", self.status);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.with_length {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        head
    }
}

type Handler = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// The server: the handler is called with the request's path and the server's base URL
/// (`https://localhost:PORT`).
pub(super) struct TlsServer {
    port: u16,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    closing: Arc<(Mutex<bool>, Condvar)>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl TlsServer {
    /// Listens on 127.0.0.1 (a free port) with `pki`'s certificate.
    pub(super) fn start(
        pki: &Pki,
        handler: impl Fn(&str, &str) -> Reply + Send + Sync + 'static,
    ) -> TlsServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("local address").port();
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let closing = Arc::new((Mutex::new(false), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Shared {
            config: pki.server_config(),
            handler: Arc::new(handler),
            base: format!("https://localhost:{port}"),
            hits: Arc::clone(&hits),
            closing: Arc::clone(&closing),
        };
        let stopping = Arc::clone(&stop);
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let shared = shared.clone();
                    std::thread::spawn(move || shared.serve(stream));
                }
            }
        });
        TlsServer {
            port,
            hits,
            closing,
            stop,
            accept: Some(accept),
        }
    }

    /// Its port on 127.0.0.1.
    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// `https://localhost:PORT` followed by `path`.
    pub(super) fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// How many requests for `path` arrived.
    pub(super) fn hits(&self, path: &str) -> usize {
        let hits = self.hits.lock().unwrap_or_else(PoisonError::into_inner);
        hits.get(path).copied().unwrap_or(0)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let (closing, released) = &*self.closing;
        *closing.lock().unwrap_or_else(PoisonError::into_inner) = true;
        released.notify_all();
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// What every connection's thread needs.
#[derive(Clone)]
struct Shared {
    config: Arc<rustls::ServerConfig>,
    handler: Arc<Handler>,
    base: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    closing: Arc<(Mutex<bool>, Condvar)>,
}

impl Shared {
    fn serve(&self, stream: TcpStream) {
        let _ = stream.set_read_timeout(Some(HOLD_LIMIT));
        let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&self.config)) else {
            return;
        };
        let mut tls = rustls::StreamOwned::new(connection, stream);
        let Some(path) = read_request_path(&mut tls) else {
            return;
        };
        *self
            .hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(path.clone())
            .or_default() += 1;
        let reply = (self.handler)(&path, &self.base);
        let sent = reply
            .stall_after
            .unwrap_or(reply.body.len())
            .min(reply.body.len());
        let _ = tls.write_all(reply.head().as_bytes());
        let _ = tls.write_all(&reply.body[..sent]);
        let _ = tls.flush();
        if reply.stall_after.is_some() {
            self.hold();
        }
        tls.conn.send_close_notify();
        let _ = tls.flush();
        let _ = tls.sock.shutdown(Shutdown::Both);
    }

    /// Waits until the server is dropped (at most [`HOLD_LIMIT`]).
    fn hold(&self) {
        let (closing, released) = &*self.closing;
        let closing = closing.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = released.wait_timeout_while(closing, HOLD_LIMIT, |closing| !*closing);
    }
}

/// The path of the request line, once the whole head (at most 16 KiB) has arrived.
fn read_request_path(stream: &mut impl Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 || stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ').nth(1).map(str::to_owned)
}
