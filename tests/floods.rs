//! Floods over HTTP (issue 7), bounded and on 127.0.0.1 only: slow clients, oversize
//! bodies, header floods, bad tokens and stalled bodies. Throughout, a probe thread keeps
//! making a valid `tools/call` on fresh connections and must keep being answered; at the
//! end the server's peak RSS (`VmHWM`) is printed and held to a generous bound, and
//! `GET /metrics` must account for what the floods did.
//!
//! Nothing here asserts on time: the probe's slowest answer is printed, not checked.
//! Run with `--nocapture` to see the figures.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{HttpServer, TestDb, modern_meta};

/// How long one request of these tests may wait for its answer before it counts as lost.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The most peak RSS a flood may leave the server with.
const RSS_BOUND_KIB: u64 = 512 * 1024;

// ---- A small keep-alive HTTP/1.1 client that reports errors instead of panicking --------

/// One HTTP response.
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The catalog code of a JSON-RPC error body, or of an `isError` result, or `ok`.
    pub fn code(&self) -> String {
        let body = self.json();
        if let Some(code) = body.pointer("/error/data/code").and_then(Value::as_str) {
            return code.to_owned();
        }
        if body.pointer("/result/isError") == Some(&json!(true)) {
            return body
                .pointer("/result/_meta/dev.tollgate~1error/code")
                .and_then(Value::as_str)
                .unwrap_or("tool_error")
                .to_owned();
        }
        if body.get("result").is_some() {
            "ok".to_owned()
        } else {
            format!("status {}", self.status)
        }
    }
}

/// A client connection; several requests may follow each other on it (keep-alive).
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    addr: SocketAddr,
}

impl Conn {
    /// Connects with [`CALL_TIMEOUT`] on reads and writes.
    pub fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT))?;
        stream.set_write_timeout(Some(CALL_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            addr,
        })
    }

    /// Sends one request (a `Content-Length` is added) and reads its response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Reply> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body)?;
        self.writer.flush()?;
        self.read_reply()
    }

    /// Reads one response (by `Content-Length`, chunked, or to EOF).
    pub fn read_reply(&mut self) -> std::io::Result<Reply> {
        let status_line = self.line()?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.line()?;
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if let Some(len) = get("content-length") {
            let len: usize = len.parse().map_err(std::io::Error::other)?;
            body.resize(len, 0);
            self.reader.read_exact(&mut body)?;
        } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let size =
                    usize::from_str_radix(self.line()?.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(std::io::Error::other)?;
                if size == 0 {
                    while !self.line()?.is_empty() {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.reader.read_exact(&mut body[start..])?;
                self.line()?;
            }
        } else if status != 204 && status != 202 {
            self.reader.read_to_end(&mut body)?;
        }
        Ok(Reply { status, body })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }
}

/// The headers and body of a stateless (2026-07-28) `tools/call` with a bearer token.
pub fn tool_call(
    token: &str,
    id: u64,
    name: &str,
    arguments: &Value,
) -> (Vec<(String, String)>, Vec<u8>) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments, "_meta": modern_meta()}});
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Accept".to_owned(), "application/json".to_owned()),
        ("MCP-Protocol-Version".to_owned(), "2026-07-28".to_owned()),
        ("Mcp-Method".to_owned(), "tools/call".to_owned()),
        ("Mcp-Name".to_owned(), name.to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    (headers, serde_json::to_vec(&body).expect("serialize"))
}

/// Makes one `tools/call` on `conn`.
pub fn call(
    conn: &mut Conn,
    token: &str,
    id: u64,
    name: &str,
    arguments: &Value,
) -> std::io::Result<Reply> {
    let (headers, body) = tool_call(token, id, name, arguments);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    conn.request("POST", "/mcp", &headers, &body)
}

/// A field of `/proc/<pid>/status` in kB (`VmHWM`, `VmRSS`) or as a count (`Threads`).
pub fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Raises every category limit of a credential so a load is never refused by a bucket.
pub fn raise_limits(db: &TestDb, credential: &str) {
    for category in ["read", "write", "destructive", "send", "generate"] {
        db.limit_per_minute(credential, category, 100_000);
    }
}

// ---- The probe: a valid call, over and over, from its own thread ------------------------

/// What the probe saw.
struct ProbeReport {
    answered: u64,
    failures: Vec<String>,
    slowest: Duration,
}

/// A thread making a valid `search_clients` call on a fresh connection every few ms.
struct Probe {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    handle: JoinHandle<ProbeReport>,
}

impl Probe {
    fn start(addr: SocketAddr, token: &str) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let (flag, count, token) = (Arc::clone(&stop), Arc::clone(&answered), token.to_owned());
        let handle = std::thread::spawn(move || {
            let mut report = ProbeReport {
                answered: 0,
                failures: Vec::new(),
                slowest: Duration::ZERO,
            };
            let mut id = 0;
            while !flag.load(Ordering::SeqCst) {
                id += 1;
                let started = Instant::now();
                let outcome = Conn::connect(addr)
                    .and_then(|mut conn| call(&mut conn, &token, id, "search_clients", &json!({})));
                match outcome {
                    Ok(reply) if reply.status == 200 && reply.code() == "ok" => {
                        report.answered += 1;
                        report.slowest = report.slowest.max(started.elapsed());
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(reply) => report.failures.push(format!(
                        "status {} code {}",
                        reply.status,
                        reply.code()
                    )),
                    Err(e) => report.failures.push(format!("io: {e}")),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            report
        });
        Probe {
            stop,
            answered,
            handle,
        }
    }

    /// Waits until the probe has been answered `n` more times (fails after a minute).
    fn wait_for_answers(&self, n: u64) {
        let target = self.answered.load(Ordering::SeqCst) + n;
        let deadline = Instant::now() + CALL_TIMEOUT;
        while self.answered.load(Ordering::SeqCst) < target {
            assert!(
                Instant::now() < deadline,
                "the valid call stopped being answered"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn finish(self, phase: &str, server_pid: u32) -> ProbeReport {
        self.stop.store(true, Ordering::SeqCst);
        let report = self.handle.join().expect("probe thread");
        println!(
            "[floods] {phase}: valid calls answered {} (slowest {:?}); server VmHWM {} KiB, VmRSS {} KiB, threads {}",
            report.answered,
            report.slowest,
            proc_status(server_pid, "VmHWM"),
            proc_status(server_pid, "VmRSS"),
            proc_status(server_pid, "Threads"),
        );
        assert!(
            report.failures.is_empty(),
            "{phase}: the valid call failed: {:?}",
            report.failures
        );
        assert!(
            report.answered > 0,
            "{phase}: the valid call was never answered"
        );
        report
    }
}

// ---- The floods --------------------------------------------------------------------------

/// The soft limit on open files of this process (the server inherits it).
fn open_file_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

/// `count` connections that start a request and never finish its headers; every other one
/// keeps trickling a header byte while the probe runs.
fn slow_headers(server: &HttpServer, token: &str, count: usize) {
    let mut conns: Vec<TcpStream> = (0..count)
        .map(|i| {
            let mut stream = TcpStream::connect(server.addr).expect("connect a slow client");
            let start = format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nX-Slow-{i}: ",
                server.addr
            );
            stream
                .write_all(start.as_bytes())
                .expect("write a partial head");
            stream
        })
        .collect();
    let probe = Probe::start(server.addr, token);
    for _ in 0..20 {
        for conn in conns.iter_mut().step_by(2) {
            let _ = conn.write_all(b"a");
        }
        probe.wait_for_answers(1);
    }
    println!(
        "[floods] {count} slow-header clients connected; server threads {}",
        proc_status(server.child.id(), "Threads")
    );
    probe.finish("slow headers", server.child.id());
    drop(conns);
}

/// Bodies over `http.max_body_bytes` (4 MiB), announced or chunked: each gets 413 or the
/// server closes the connection before the client finished writing.
fn oversize_bodies(server: &HttpServer, token: &str) {
    let probe = Probe::start(server.addr, token);
    let addr = server.addr;
    let senders: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                for i in 0..6 {
                    statuses.push(send_oversize(addr, (t + i) % 2 == 0));
                }
                statuses
            })
        })
        .collect();
    let mut refused = 0;
    let mut reset = 0;
    for sender in senders {
        for status in sender.join().expect("sender") {
            match status {
                Some(413) => refused += 1,
                None => reset += 1,
                Some(other) => panic!("an oversize body got status {other}"),
            }
        }
    }
    println!("[floods] oversize bodies: {refused} refused with 413, {reset} cut off by the server");
    assert!(refused > 0, "no oversize body was answered with 413");
    probe.finish("oversize bodies", server.child.id());
}

/// One oversize POST; its status, or `None` when the connection broke first.
fn send_oversize(addr: SocketAddr, chunked: bool) -> Option<u16> {
    const SIZE: usize = 5 * 1024 * 1024;
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(CALL_TIMEOUT)).ok()?;
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {SIZE}")
    };
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{framing}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).ok()?;
    let block = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < SIZE {
        let written = if chunked {
            stream
                .write_all(format!("{:x}\r\n", block.len()).as_bytes())
                .and_then(|()| stream.write_all(&block))
                .and_then(|()| stream.write_all(b"\r\n"))
        } else {
            stream.write_all(&block)
        };
        if written.is_err() {
            break;
        }
        sent += block.len();
    }
    if chunked {
        let _ = stream.write_all(b"0\r\n\r\n");
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    text.split(' ').nth(1).and_then(|s| s.parse().ok())
}

/// Requests whose headers total more than 64 KiB: many small ones, or one huge one.
fn header_floods(server: &HttpServer, token: &str) {
    let probe = Probe::start(server.addr, token);
    let addr = server.addr;
    let senders: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| {
                        let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 2\r\nConnection: close\r\n");
                        if (t + i) % 2 == 0 {
                            for n in 0..4000 {
                                head.push_str(&format!("X-Flood-{n}: {}\r\n", "v".repeat(16)));
                            }
                        } else {
                            head.push_str(&format!("X-Huge: {}\r\n", "h".repeat(1024 * 1024)));
                        }
                        head.push_str("\r\n{}");
                        let mut stream = TcpStream::connect(addr).expect("connect");
                        stream.set_read_timeout(Some(CALL_TIMEOUT)).expect("timeout");
                        // The listener may refuse and close before the whole head is
                        // written: the write then fails, and the read sees what it sent.
                        let _ = stream.write_all(head.as_bytes());
                        let mut response = Vec::new();
                        let _ = stream.read_to_end(&mut response);
                        let text = String::from_utf8_lossy(&response).into_owned();
                        let status: u16 = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                        (status, text)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // 4 000 header lines exceed the listener's 128-line cap and a 1 MiB line its 16 KiB line
    // cap: both get the catalog's 431 `headers_too_large` (tests/listener.rs checks the
    // body); a client still writing when the connection closes may see it closed instead.
    let mut refused = 0;
    for sender in senders {
        for (status, text) in sender.join().expect("sender") {
            let shown = &text[..text.len().min(300)];
            match status {
                400 | 0 => {}
                431 => assert!(text.contains("\"headers_too_large\""), "{shown}"),
                other => panic!("a header flood got {other}: {shown}"),
            }
            refused += 1;
        }
    }
    println!("[floods] header floods: {refused} requests refused (400, 431 or closed)");
    probe.finish("header floods", server.child.id());
}

/// 10 000 `tools/call` with made-up tokens on keep-alive connections from 8 threads. Each
/// answer is `invalid_token` (401) or, once the source's failure throttle trips,
/// `rate_limited` with `bucket: "auth"`.
fn bad_tokens(server: &HttpServer, token: &str) -> (u64, u64) {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 1250;
    let probe = Probe::start(server.addr, token);
    let addr = server.addr;
    let senders: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut conn = Conn::connect(addr).expect("connect");
                let (mut invalid, mut limited) = (0u64, 0u64);
                for i in 0..PER_THREAD {
                    let bad = format!("tg_live_{:020x}_{}", t * PER_THREAD + i, "x".repeat(43));
                    let reply = match call(&mut conn, &bad, i, "search_clients", &json!({})) {
                        Ok(reply) => reply,
                        // The server may close a keep-alive connection: open another one.
                        Err(_) => {
                            conn = Conn::connect(addr).expect("reconnect");
                            call(&mut conn, &bad, i, "search_clients", &json!({}))
                                .expect("bad-token call")
                        }
                    };
                    match (reply.status, reply.code().as_str()) {
                        (401, "invalid_token") => invalid += 1,
                        (200, "rate_limited") => {
                            assert_eq!(reply.json()["error"]["data"]["bucket"], "auth");
                            limited += 1;
                        }
                        (status, code) => panic!("a bad token got {status} {code}"),
                    }
                }
                (invalid, limited)
            })
        })
        .collect();
    let (mut invalid, mut limited) = (0, 0);
    for sender in senders {
        let (i, l) = sender.join().expect("sender");
        invalid += i;
        limited += l;
    }
    println!("[floods] bad tokens: {invalid} invalid_token, {limited} rate_limited (bucket auth)");
    assert_eq!(invalid + limited, THREADS * PER_THREAD);
    assert!(limited > 0, "the failure throttle never tripped");
    probe.finish("bad tokens", server.child.id());
    (invalid, limited)
}

/// The value of one sample of the metrics page, 0 when absent.
fn sample(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn floods_leave_valid_calls_answered_and_memory_bounded() {
    let db = TestDb::new();
    raise_limits(&db, &db.admin_key_id());
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start_with_env(&db, &[], &[("TOLLGATE_HTTP_METRICS", "true")]);
    let pid = server.child.id();
    // Warm the verified-token cache, as any real client's first call does.
    let mut conn = Conn::connect(server.addr).expect("connect");
    assert_eq!(
        call(&mut conn, &token, 0, "search_clients", &json!({}))
            .expect("first call")
            .code(),
        "ok"
    );
    drop(conn);
    println!(
        "[floods] baseline: server VmHWM {} KiB, threads {}",
        proc_status(pid, "VmHWM"),
        proc_status(pid, "Threads")
    );

    // Both ends of every connection live on this machine, each process under the limit.
    let slow = usize::try_from(open_file_limit().saturating_sub(100).min(1000)).unwrap_or(1000);
    if slow < 1000 {
        println!(
            "[floods] open-file limit {}: {slow} slow clients instead of 1000",
            open_file_limit()
        );
    }
    slow_headers(&server, &token, slow);
    oversize_bodies(&server, &token);
    header_floods(&server, &token);
    let (invalid, limited) = bad_tokens(&server, &token);

    let peak = proc_status(pid, "VmHWM");
    println!(
        "[floods] peak RSS of the server over all floods: {peak} KiB ({} MiB)",
        peak / 1024
    );
    assert!(peak > 0, "VmHWM is readable");
    assert!(
        peak < RSS_BOUND_KIB,
        "peak RSS {peak} KiB is over {RSS_BOUND_KIB} KiB"
    );

    let metrics = server.get("/metrics");
    assert_eq!(metrics.status, 200);
    let page = String::from_utf8_lossy(&metrics.body);
    assert_eq!(
        sample(
            &page,
            "tollgate_guard_rejections_total{code=\"invalid_token\"}"
        ),
        invalid,
        "{page}"
    );
    assert_eq!(
        sample(&page, "tollgate_rate_limited_total{bucket=\"auth\"}"),
        limited,
        "{page}"
    );
    assert!(
        sample(
            &page,
            "tollgate_tool_calls_total{tool=\"search_clients\",code=\"ok\"}"
        ) > 0,
        "{page}"
    );
}

/// Opens a connection that sends complete headers announcing a 100 kB body, then one
/// byte of it, then nothing.
fn stalled_body(addr: SocketAddr) -> Conn {
    let mut conn = Conn::connect(addr).expect("connect a stalled client");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
    );
    conn.writer
        .write_all(head.as_bytes())
        .expect("write the head");
    conn
}

/// Whether the server has closed `conn` (a read sees end of file), without waiting.
fn closed_by_server(conn: &Conn) -> bool {
    conn.writer.set_nonblocking(true).expect("nonblocking");
    let closed = match conn.writer.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    conn.writer.set_nonblocking(false).expect("blocking");
    closed
}

/// A valid call whose body is over 1 KiB, so the listener reads it on a helper thread.
fn large_call(addr: SocketAddr, token: &str) -> Reply {
    let mut meta = modern_meta();
    meta["dev.tollgate/padding"] = json!("p".repeat(2048));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "search_clients", "arguments": {}, "_meta": meta}});
    let (headers, _) = tool_call(token, 1, "search_clients", &json!({}));
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let mut conn = Conn::connect(addr).expect("connect");
    conn.request(
        "POST",
        "/mcp",
        &headers,
        &serde_json::to_vec(&body).expect("serialize"),
    )
    .expect("large call")
}

/// More stalled bodies than `http.max_connections`: each newcomer past the cap closes the
/// stalled connection that has waited longest, so a valid call with a large body is still
/// served, and the cap leaves room again when the stalled clients go away.
#[test]
fn stalled_bodies_beyond_the_cap_are_closed_oldest_first_and_valid_calls_go_on() {
    const CAP: usize = 256;
    const STALLED: usize = 350;
    let db = TestDb::new();
    raise_limits(&db, &db.admin_key_id());
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start_with_env(
        &db,
        &[],
        &[
            ("TOLLGATE_HTTP_MAX_CONNECTIONS", "256"),
            ("TOLLGATE_HTTP_BODY_TIMEOUT_MS", "600000"),
        ],
    );
    assert_eq!(
        large_call(server.addr, &token).code(),
        "ok",
        "a large body is served normally"
    );
    let stalled: Vec<Conn> = (0..STALLED).map(|_| stalled_body(server.addr)).collect();
    let probe = Probe::start(server.addr, &token);
    probe.wait_for_answers(20);
    assert_eq!(large_call(server.addr, &token).code(), "ok");
    probe.finish("stalled bodies", server.child.id());
    let closed = stalled.iter().filter(|c| closed_by_server(c)).count();
    println!("[floods] {STALLED} stalled bodies, cap {CAP}: {closed} closed by the server");
    // Connections that were ending when the stalled ones came (the harness's start-up
    // check, the first large call) may have made room first: a margin of three.
    assert!(closed + 3 > STALLED - CAP, "{closed} of {STALLED} closed");
    assert!(
        closed_by_server(&stalled[0]) && !closed_by_server(&stalled[STALLED - 1]),
        "the oldest are closed first"
    );

    drop(stalled);
    assert_eq!(large_call(server.addr, &token).code(), "ok");
    let peak = proc_status(server.child.id(), "VmHWM");
    println!("[floods] stalled bodies: server peak RSS {peak} KiB");
    assert!(peak < RSS_BOUND_KIB, "peak RSS {peak} KiB");
}

// A request takes its worker slot only once its body is in, so stalled clients never hold
// the fixed workers: a valid call behind 64 of them is answered at once.
#[test]
fn stalled_bodies_do_not_hold_up_valid_calls() {
    let db = TestDb::new();
    raise_limits(&db, &db.admin_key_id());
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start(&db, &[]);
    let stalled: Vec<Conn> = (0..64).map(|_| stalled_body(server.addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut conn = Conn::connect(server.addr).expect("connect");
    let reply = call(&mut conn, &token, 1, "search_clients", &json!({}));
    assert_eq!(
        reply.map(|r| r.code()).map_err(|e| e.to_string()),
        Ok("ok".to_owned())
    );
    drop(stalled);
}

// tiny_http 0.12 drained an unread body into a buffer of the announced size, so one
// `Content-Length: 1000000000000` request aborted the server; the vendored copy drains
// through a fixed buffer, at most 1 MiB (vendor/tiny_http/PATCHES.md).
#[test]
fn a_huge_announced_body_is_refused_without_taking_the_server_down() {
    let db = TestDb::new();
    let mut server = HttpServer::start(&db, &[]);
    let mut conn = Conn::connect(server.addr).expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{{",
        server.addr
    );
    conn.writer
        .write_all(head.as_bytes())
        .expect("write the head");
    let reply = conn.read_reply().expect("an answer");
    assert_eq!(
        (reply.status, reply.code().as_str()),
        (413, "payload_too_large")
    );
    drop(conn);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "the server died: {}",
        server.log_text()
    );
    assert_eq!(server.get("/healthz").status, 200);
}

// ---- Observability -----------------------------------------------------------------------

#[test]
fn metrics_are_off_by_default() {
    let db = TestDb::new();
    let server = HttpServer::start(&db, &[]);
    let response = server.get("/metrics");
    assert_eq!(response.status, 404);
    assert_eq!(response.json()["error"]["data"]["code"], "path_not_found");
}

/// With `http.metrics` on, `/metrics` serves the text format behind the same `Host` check
/// as `/mcp`; every log line of a call carries its request span, and a rejection or a tool
/// failure leaves one line with its catalog code — never a token or an argument value.
#[test]
fn metrics_count_outcomes_and_log_lines_carry_the_request_id() {
    let db = TestDb::new();
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start_with_env(
        &db,
        &["--log-format", "json"],
        &[("TOLLGATE_HTTP_METRICS", "true"), ("RUST_LOG", "info")],
    );
    let mut conn = Conn::connect(server.addr).expect("connect");
    let secret_arg = "inv_secret_argument_value";
    let failed = call(
        &mut conn,
        &token,
        4242,
        "get_invoice",
        &json!({ "invoice_id": secret_arg }),
    )
    .expect("call");
    assert_eq!(failed.code(), "invalid_format");
    let bad_token = "tg_live_00000000000000000000_notarealsecretnotarealsecretnotarealsecr";
    let rejected = call(&mut conn, bad_token, 4343, "search_clients", &json!({})).expect("call");
    assert_eq!(rejected.code(), "invalid_token");

    let page = server.get("/metrics");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = String::from_utf8_lossy(&page.body).into_owned();
    assert_eq!(
        sample(
            &text,
            "tollgate_tool_calls_total{tool=\"get_invoice\",code=\"invalid_format\"}"
        ),
        1,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tollgate_tool_calls_total{tool=\"search_clients\",code=\"invalid_token\"}"
        ),
        1,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tollgate_guard_rejections_total{code=\"invalid_token\"}"
        ),
        1,
        "{text}"
    );
    assert_eq!(
        sample(&text, "tollgate_tool_call_duration_seconds_count"),
        2,
        "{text}"
    );
    assert!(
        !text.contains(secret_arg) && !text.contains(bad_token),
        "{text}"
    );
    let foreign = crate::util::http_request(
        server.addr,
        "GET",
        "/metrics",
        &[("Host", "evil.example")],
        b"",
    );
    assert_eq!(foreign.status, 403);

    let log = server.log_text();
    assert!(
        !log.contains(secret_arg),
        "an argument value reached the log:\n{log}"
    );
    assert!(
        !log.contains("notarealsecret"),
        "a token reached the log:\n{log}"
    );
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let line = |message: &str, rpc_id: &str| {
        let matching: Vec<&Value> = lines
            .iter()
            .filter(|l| l["fields"]["message"] == message && l["span"]["rpc_id"] == rpc_id)
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "one {message:?} line for request {rpc_id}:\n{log}"
        );
        matching[0].clone()
    };
    let failure = line("tool call failed", "4242");
    assert_eq!(failure["fields"]["code"], "invalid_format");
    assert_eq!(failure["fields"]["tool"], "get_invoice");
    assert_eq!(failure["span"]["name"], "request");
    assert_eq!(failure["span"]["method"], "tools/call");
    assert!(failure["span"]["id"].is_u64(), "{failure}");
    let rejection = line("tool call rejected", "4343");
    assert_eq!(rejection["fields"]["code"], "invalid_token");
    assert_ne!(
        rejection["span"]["id"], failure["span"]["id"],
        "each request has its own id"
    );
}
