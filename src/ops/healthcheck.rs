//! `tollgate healthcheck`: the database's own check (it opens, its schema is current, it
//! is writable, and an SQLite file passes `PRAGMA quick_check`), or with `--url …` an HTTP
//! probe of a running server's `/healthz`, for container health checks and operators who
//! cannot (or should not) open the database.
//!
//! The probe is one `GET` over a plain `TcpStream` with connect, read and write timeouts;
//! `http://` only (the server itself speaks plain HTTP on loopback; TLS belongs to the
//! reverse proxy). Healthy means status 200 and a JSON body whose `status` is `"ok"`.

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::assemble::open_store;
use super::exit::fail;
use crate::config::Config;
use crate::store::{Store, Unhealthy};

/// The largest response the probe reads; `/healthz` answers a few dozen bytes.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;

/// `tollgate healthcheck`.
#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// Probe a running server over HTTP instead of opening the database,
    /// e.g. http://127.0.0.1:8787/healthz.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Seconds to wait for the connection and for the answer (with --url).
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub timeout: u64,
}

/// Why the probe failed. `Display` is for the operator.
#[derive(Debug)]
pub enum ProbeError {
    /// The URL is not `http://host[:port][/path]`.
    BadUrl(String),
    /// Connecting, sending or reading failed.
    Io(std::io::Error),
    /// The answer is not an HTTP response.
    Malformed,
    /// The server answered, but not healthy.
    Unhealthy {
        /// HTTP status.
        status: u16,
        /// The response body (truncated by `MAX_RESPONSE_BYTES`).
        body: String,
    },
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadUrl(url) => write!(
                f,
                "invalid --url {url:?}: expected http://host[:port][/path], \
                 e.g. http://127.0.0.1:8787/healthz"
            ),
            Self::Io(e) => write!(f, "no answer: {e}"),
            Self::Malformed => f.write_str("the answer is not an HTTP response"),
            Self::Unhealthy { status, body } => write!(f, "HTTP {status}: {body}"),
        }
    }
}

impl std::error::Error for ProbeError {}

impl From<std::io::Error> for ProbeError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Result<Target, ProbeError> {
    let bad = || ProbeError::BadUrl(url.to_owned());
    let rest = url.trim().strip_prefix("http://").ok_or_else(bad)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        // "[::1]" has colons but no port.
        _ if authority.ends_with(']') => (authority, 80),
        Some((host, port)) => (host, port.parse::<u16>().map_err(|_| bad())?),
        None => (authority, 80),
    };
    if host.is_empty() || path.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(Target {
        host: host.to_owned(),
        port,
        path: path.to_owned(),
    })
}

/// Sends `GET url` and returns the body when the server answers 200 with `status: ok`.
pub fn probe(url: &str, timeout: Duration) -> Result<String, ProbeError> {
    let target = parse_url(url)?;
    let host = target.host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, target.port).to_socket_addrs()?.collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return exchange(stream, &target, timeout),
            Err(e) => last = Some(e),
        }
    }
    Err(ProbeError::Io(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "the host has no address")
    })))
}

fn exchange(
    mut stream: TcpStream,
    target: &Target,
    timeout: Duration,
) -> Result<String, ProbeError> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        target.path, target.host, target.port
    );
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.take(MAX_RESPONSE_BYTES).read_to_end(&mut raw)?;
    let (status, body) = split_response(&raw)?;
    let healthy = status == 200
        && serde_json::from_str::<serde_json::Value>(&body)
            .is_ok_and(|v| v.get("status").and_then(|s| s.as_str()) == Some("ok"));
    if healthy {
        Ok(body)
    } else {
        Err(ProbeError::Unhealthy { status, body })
    }
}

/// The status code and the body of a `Connection: close` response (chunked or not).
fn split_response(raw: &[u8]) -> Result<(u16, String), ProbeError> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or(ProbeError::Malformed)?;
    let status = head
        .lines()
        .next()
        .filter(|line| line.starts_with("HTTP/"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or(ProbeError::Malformed)?;
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body.trim().to_owned()))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size =
            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Handler of `tollgate healthcheck --url`.
pub fn healthcheck_url(url: &str, timeout_secs: u64) -> ExitCode {
    match probe(url, Duration::from_secs(timeout_secs.max(1))) {
        Ok(body) => {
            println!("ok: {url} {body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tollgate: unhealthy: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tollgate healthcheck` without `--url`: the configured database's check.
pub(super) fn healthcheck_database(config: &Config) -> ExitCode {
    let store = match open_store(config, false) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let healthy = store
        .health()
        .and_then(|version| quick_check(&store).map(|()| version));
    match healthy {
        Ok(version) => {
            println!("ok: {} (schema version {version})", config.database);
            ExitCode::SUCCESS
        }
        Err(reason) => fail(&format!(
            "unhealthy: {}: {reason} ({})",
            config.database,
            reason.code()
        )),
    }
}

/// `PRAGMA quick_check` of an SQLite store (a PostgreSQL server checks its own pages);
/// the problems it finds go to stderr.
fn quick_check(store: &Store) -> Result<(), Unhealthy> {
    if store.path().is_none() {
        return Ok(());
    }
    match store.quick_check() {
        Ok(found) if found == "ok" => Ok(()),
        Ok(found) => {
            eprintln!(
                "tollgate: PRAGMA quick_check of {}:\n{found}",
                store.location()
            );
            Err(Unhealthy::Corrupt)
        }
        Err(e) => {
            eprintln!(
                "tollgate: PRAGMA quick_check of {} failed: {e}",
                store.location()
            );
            Err(Unhealthy::Corrupt)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls_parse_with_and_without_port_and_path() {
        let t = parse_url("http://127.0.0.1:8787/healthz").expect("url");
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8787, "/healthz")
        );
        let t = parse_url("http://localhost").expect("url");
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 80, "/")
        );
        let t = parse_url("http://[::1]:9000/healthz").expect("url");
        assert_eq!((t.host.as_str(), t.port), ("[::1]", 9000));
        let t = parse_url("http://[::1]/healthz").expect("url");
        assert_eq!((t.host.as_str(), t.port), ("[::1]", 80));
        for bad in [
            "https://x/healthz",
            "127.0.0.1:8787",
            "http://:80/",
            "http://h:port/",
        ] {
            assert!(
                matches!(parse_url(bad), Err(ProbeError::BadUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn responses_split_into_status_and_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"status\":\"ok\"}";
        assert_eq!(
            split_response(raw).expect("ok"),
            (200, "{\"status\":\"ok\"}".to_owned())
        );
        let chunked =
            b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        assert_eq!(
            split_response(chunked).expect("ok"),
            (503, "hello".to_owned())
        );
        assert!(matches!(
            split_response(b"garbage"),
            Err(ProbeError::Malformed)
        ));
    }

    fn serve_once(answer: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        format!("http://{addr}/healthz")
    }

    #[test]
    fn probe_accepts_ok_and_rejects_unavailable() {
        let ok = serve_once(
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"status\":\"ok\",\"schema_version\":1}",
        );
        let body = probe(&ok, Duration::from_secs(5)).expect("healthy");
        assert_eq!(body, "{\"status\":\"ok\",\"schema_version\":1}");
        let down =
            serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n{\"status\":\"unavailable\"}");
        match probe(&down, Duration::from_secs(5)) {
            Err(ProbeError::Unhealthy { status, body }) => {
                assert_eq!(
                    (status, body.as_str()),
                    (503, "{\"status\":\"unavailable\"}")
                );
            }
            other => panic!("expected unhealthy, got {other:?}"),
        }
    }

    #[test]
    fn probe_of_a_closed_port_is_an_io_error() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let err =
            probe(&format!("http://{addr}/healthz"), Duration::from_secs(2)).expect_err("closed");
        assert!(matches!(err, ProbeError::Io(_)), "{err:?}");
    }
}
