//! Tests of the verification core: tokens laid out as each provider issues them, signed
//! by keys made here (ring's ES256 and Ed25519), each refusal provoked on purpose, and the
//! fetching of keys and introspection against a small HTTP server on 127.0.0.1, and
//! sign-in against a token endpoint there.

mod login;
mod presets;
mod refusals;
mod remote;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _,
};
use serde_json::{Value, json};

use super::*;
use crate::clock::ManualClock;
use crate::config::{Config, Overrides};

/// The time every test starts at (unix seconds).
pub(crate) const NOW: i64 = 1_750_000_000;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key made for the test, with its public JWK.
pub(crate) struct Signer {
    kid: String,
    algorithm: Algorithm,
    key: EncodingKey,
    jwk: Value,
}

impl Signer {
    /// A fresh P-256 key (ES256).
    pub(crate) fn es256(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("generate a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("read the P-256 key");
        // An uncompressed point: 0x04, then x and y.
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        });
        Signer {
            kid: kid.to_owned(),
            algorithm: Algorithm::ES256,
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk,
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    fn ed25519(kid: &str) -> Signer {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("generate");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("read the Ed25519 key");
        let jwk = json!({
            "kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(pair.public_key().as_ref()),
        });
        Signer {
            kid: kid.to_owned(),
            algorithm: Algorithm::EdDSA,
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk,
        }
    }

    /// A token of `claims` with the usual header (`alg`, `typ: JWT`, `kid`).
    pub(crate) fn sign(&self, claims: &Value) -> String {
        let alg = crate::config::algorithm_name(self.algorithm).expect("a public-key algorithm");
        self.sign_with_header(&json!({"alg": alg, "typ": "JWT", "kid": self.kid}), claims)
    }

    /// A token of `claims` under `header`, signed with this key whatever the header says.
    fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature =
            jsonwebtoken::crypto::sign(input.as_bytes(), &self.key, self.algorithm).expect("sign");
        format!("{input}.{signature}")
    }
}

/// A JWKS document of these keys.
fn jwks(signers: &[&Signer]) -> Value {
    json!({ "keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>() })
}

/// The issuers a configuration file holding `toml` gives; files it names are relative to
/// `dir`, which also holds the introspection secret `secret` ("s3cret").
fn issuers_of(dir: &Path, toml: &str) -> Vec<IssuerConfig> {
    std::fs::write(dir.join("secret"), "s3cret\n").expect("write the secret");
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).expect("write the configuration");
    Config::load(Some(&path), &[], &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .auth
        .issuers
}

/// An [`Identity`] of the issuers `toml` configures, with `signers` as the local key file
/// `keys.json`, on a manual clock at [`NOW`].
pub(crate) fn offline(
    toml: &str,
    signers: &[&Signer],
) -> (Identity, ManualClock, tempfile::TempDir) {
    offline_within(toml, signers, fetch::FETCH_DEADLINE)
}

/// [`offline`], each fetch bounded by `deadline`.
fn offline_within(
    toml: &str,
    signers: &[&Signer],
    deadline: std::time::Duration,
) -> (Identity, ManualClock, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("keys.json"), jwks(signers).to_string()).expect("write keys");
    let clock = ManualClock::at_unix_secs(NOW);
    let identity =
        Identity::start_with_deadline(&issuers_of(dir.path(), toml), clock.clock(), deadline)
            .expect("identity starts");
    (identity, clock, dir)
}

/// What one request to the test server was.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

type Handler = dyn Fn(&Request) -> (u16, String) + Send + Sync;

/// A tiny HTTP server on 127.0.0.1: each connection gets one answer from the handler (and
/// `Connection: close`); every request is recorded. [`TestServer::stop`] closes the
/// listening socket, so later connections are refused.
struct TestServer {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start(handler: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("local address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stopping = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let thread = {
            let (requests, stopping) = (Arc::clone(&requests), Arc::clone(&stopping));
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        serve(stream, &*handler, &requests);
                    }
                }
            })
        };
        TestServer {
            port,
            requests,
            stopping,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// How many requests asked for `path`.
    fn hits(&self, path: &str) -> usize {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("requests").clone()
    }

    /// Stops answering: the listener is closed once this returns.
    fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so that it sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the server thread ends");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads one request from `stream` and answers it.
fn serve(stream: TcpStream, handler: &Handler, requests: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (status, answer) = handler(&request);
    requests.lock().expect("requests").push(request);
    let mut stream = reader.into_inner();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{answer}",
        answer.len()
    );
}
