//! Load benchmark: guarded `tools/call` throughput and latency over stdio, and the cost of
//! charging the rate counters.
//!
//! `cargo bench --bench stdio_load [-- --secs 10 --warmup 2 --inflight 64 --only stdio|limiter --no-pin]`
//!
//! 1. `tollgate stdio --conformance-pack` (the bench-profile binary) on a scratch database,
//!    driven with `--inflight` requests outstanding at all times; after the warm-up it
//!    prints calls/s, p50, p99 and errors for
//!    - `tools/call test_simple_text` with every guard on (authentication from the cached
//!      token, the category and plan buckets charged in SQLite — their limits raised so
//!      nothing is refused —, scopes and plan, audit),
//!    - `ping`, which passes no guard: the transport and dispatcher floor.
//! 2. [`Limiter::charge`] alone, in-process, with 1, 4, 16 and 64 concurrent callers on one
//!    credential, once per transaction and once with group commit, printing charges/s,
//!    p50, p99 and charges per transaction.
//!
//! The server is pinned to CPU 0 with `taskset` when it exists (not with `--no-pin`); the
//! load generator runs wherever the OS puts it. Figures are printed, never asserted.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tollgate::auth::Principal;
use tollgate::ratelimit::{ChargeMode, Limiter};
use tollgate::registry::Category;
use tollgate::store::{Store, StoreOptions};

/// Benchmark settings, from `--secs`, `--warmup` and `--inflight`.
struct Settings {
    /// Run only this part: `stdio` or `limiter` (both when absent).
    only: Option<String>,
    /// Pin the server to CPU 0 with `taskset` (unless `--no-pin`).
    pin: bool,
    measure: Duration,
    warmup: Duration,
    inflight: usize,
    /// Keep-alive connections of the HTTP load.
    connections: usize,
}

fn settings() -> Settings {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    Settings {
        only,
        pin: !args.iter().any(|a| a == "--no-pin") && Path::new("/usr/bin/taskset").exists(),
        measure: Duration::from_secs(value("--secs", 10)),
        warmup: Duration::from_secs(value("--warmup", 2)),
        inflight: usize::try_from(value("--inflight", 64)).unwrap_or(64),
        connections: usize::try_from(value("--connections", 16)).unwrap_or(16),
    }
}

fn tollgate(db: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.arg("--database").arg(db);
    cmd.env_remove("TOLLGATE_TOKEN")
        .env_remove("TOLLGATE_CONFIG");
    cmd.env("RUST_LOG", "error");
    cmd
}

fn run_ok(db: &Path, args: &[&str]) -> Vec<u8> {
    let out = tollgate(db).args(args).output().expect("run tollgate");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Creates the database; returns the admin token, with every limit raised out of the way.
fn prepare_database(db: &Path) -> String {
    let printed: Value =
        serde_json::from_slice(&run_ok(db, &["init", "--json", "--company", "Bench Co"]))
            .expect("init prints JSON");
    let token = printed["admin_key"]
        .as_str()
        .expect("`init --json` prints admin_key")
        .to_owned();
    let id = token.split('_').nth(2).expect("public id").to_owned();
    let huge = "1000000000";
    run_ok(
        db,
        &[
            "limits",
            "set",
            "--credential",
            &id,
            "--category",
            "read",
            "--per-minute",
            huge,
        ],
    );
    run_ok(db, &["limits", "set", "--plan", "pro", "--per-hour", huge]);
    token
}

#[derive(Deserialize)]
struct Reply {
    id: Option<u64>,
    error: Option<serde::de::IgnoredAny>,
    result: Option<ReplyResult>,
}

#[derive(Deserialize)]
struct ReplyResult {
    #[serde(rename = "isError", default)]
    is_error: bool,
}

/// What one load run measured.
struct LoadFigures {
    calls: usize,
    errors: usize,
    secs: f64,
    latencies: Vec<Duration>,
    /// Server CPU time (user + system, all threads) per answered call, in µs.
    cpu_per_call_us: Option<f64>,
}

/// User + system CPU time of process `pid` so far (all its threads), from `/proc`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of proc(5), counted after the command name (which ends field 2).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second(),
    ))
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn print_figures(label: &str, mut figures: LoadFigures) {
    figures.latencies.sort_unstable();
    println!(
        "{label:<44} {:>10.0} calls/s   p50 {:>8.1} µs   p99 {:>8.1} µs   errors {}{}",
        figures.calls as f64 / figures.secs,
        percentile(&figures.latencies, 0.50).as_secs_f64() * 1e6,
        percentile(&figures.latencies, 0.99).as_secs_f64() * 1e6,
        figures.errors,
        figures
            .cpu_per_call_us
            .map_or_else(String::new, |us| format!("   server CPU {us:.1} µs/call"))
    );
}

/// The server under test, pinned to CPU 0 with `taskset` when `pinned`, so the load
/// generator does not compete with it for the core.
fn tollgate_on_cpu0(pinned: bool) -> Command {
    // `TG_BENCH_WRAP="perf record -g -o perf.data --"` runs the server under a profiler.
    if let Ok(wrapper) = std::env::var("TG_BENCH_WRAP") {
        let mut words = wrapper.split_whitespace();
        let mut cmd = Command::new(words.next().expect("a wrapper command"));
        cmd.args(words).arg(env!("CARGO_BIN_EXE_tollgate"));
        return cmd;
    }
    if pinned {
        let mut cmd = Command::new("/usr/bin/taskset");
        cmd.args(["-c", "0", env!("CARGO_BIN_EXE_tollgate")]);
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
    }
}

fn server_command(db: &Path, token: &str, pinned: bool) -> Command {
    let mut cmd = tollgate_on_cpu0(pinned);
    cmd.arg("--database")
        .arg(db)
        .args(["stdio", "--conformance-pack"]);
    cmd.env_remove("TOLLGATE_CONFIG")
        .env("TOLLGATE_TOKEN", token)
        .env("RUST_LOG", "error");
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// Drives one `tollgate stdio` with `settings.inflight` requests of `method` outstanding.
fn stdio_load(db: &Path, token: &str, method: &str, params: &Value, s: &Settings) -> LoadFigures {
    let mut child = server_command(db, token, s.pin)
        .spawn()
        .expect("spawn tollgate stdio");
    let mut stdin = BufWriter::new(child.stdin.take().expect("stdin"));
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "stdio_load", "version": "0"}}});
    writeln!(stdin, "{init}").expect("write");
    stdin.flush().expect("flush");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("initialize reply");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .expect("write");

    let sent_at: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (permit_tx, permit_rx) = mpsc::channel::<()>();
    for _ in 0..s.inflight {
        permit_tx.send(()).expect("permit");
    }
    let writer = {
        let sent_at = Arc::clone(&sent_at);
        let stop = Arc::clone(&stop);
        let method = method.to_owned();
        let params = params.clone();
        std::thread::spawn(move || {
            let mut next_id = 1u64;
            while permit_rx.recv().is_ok() && !stop.load(Ordering::Relaxed) {
                let mut batch = 1;
                while permit_rx.try_recv().is_ok() {
                    batch += 1;
                }
                for _ in 0..batch {
                    let request = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
                    sent_at
                        .lock()
                        .expect("lock")
                        .insert(next_id, Instant::now());
                    writeln!(stdin, "{request}").expect("write request");
                    next_id += 1;
                }
                stdin.flush().expect("flush");
            }
            // Dropping stdin sends EOF: the server finishes what is in flight and exits.
        })
    };

    let started = Instant::now();
    let measure_from = started + s.warmup;
    let measure_to = measure_from + s.measure;
    let mut figures = LoadFigures {
        calls: 0,
        errors: 0,
        secs: s.measure.as_secs_f64(),
        latencies: Vec::new(),
        cpu_per_call_us: None,
    };
    let pid = child.id();
    let mut cpu_from: Option<(Duration, usize)> = None;
    let mut answered = 0usize;
    let mut permits = Some(permit_tx);
    loop {
        line.clear();
        // EOF: the writer closed stdin after the measurement and the server drained.
        if stdout.read_line(&mut line).expect("read") == 0 {
            break;
        }
        let now = Instant::now();
        let reply: Reply = serde_json::from_str(&line).expect("JSON reply");
        let Some(id) = reply.id else { continue };
        let sent = sent_at.lock().expect("lock").remove(&id).expect("known id");
        answered += 1;
        if cpu_from.is_none() && now >= measure_from {
            cpu_from = cpu_time(pid).map(|t| (t, answered));
        }
        if now > measure_to
            && permits.is_some()
            && let (Some((t0, n0)), Some(t1)) = (cpu_from, cpu_time(pid))
        {
            let calls = (answered - n0).max(1) as f64;
            figures.cpu_per_call_us = Some((t1 - t0).as_secs_f64() * 1e6 / calls);
        }
        if sent >= measure_from && now <= measure_to {
            figures.calls += 1;
            figures.latencies.push(now - sent);
            if reply.error.is_some() || reply.result.is_some_and(|r| r.is_error) {
                figures.errors += 1;
            }
        }
        if now > measure_to {
            stop.store(true, Ordering::Relaxed);
            permits = None;
        }
        if let Some(permits) = &permits {
            permits.send(()).expect("writer alive");
        }
    }
    writer.join().expect("writer");
    let _ = child.wait();
    figures
}

/// Charges from `threads` callers at once for `s.measure` (after `s.warmup`).
fn limiter_load(
    store: &Store,
    mode: ChargeMode,
    threads: usize,
    s: &Settings,
) -> (LoadFigures, f64) {
    let limiter = Limiter::with_mode(store.clone(), mode);
    let principal = Principal {
        credential_id: "benchkey0001".to_owned(),
        client_id: None,
        scopes: vec!["*".to_owned()],
    };
    let started = Instant::now();
    let measure_from = started + s.warmup;
    let measure_to = measure_from + s.measure;
    let (stats_before, per_thread) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut latencies = Vec::new();
                    let mut errors = 0;
                    loop {
                        let t0 = Instant::now();
                        if t0 > measure_to {
                            return (latencies, errors);
                        }
                        let outcome = limiter.charge(&principal, Category::Read);
                        if t0 >= measure_from {
                            latencies.push(t0.elapsed());
                            errors += usize::from(outcome.is_err());
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
        let before = limiter.stats();
        (
            before,
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect::<Vec<_>>(),
        )
    });
    let stats = limiter.stats();
    let charges = stats.charges - stats_before.charges;
    let transactions = (stats.transactions - stats_before.transactions).max(1);
    let mut figures = LoadFigures {
        calls: 0,
        errors: 0,
        secs: s.measure.as_secs_f64(),
        latencies: Vec::new(),
        cpu_per_call_us: None,
    };
    for (latencies, errors) in per_thread {
        figures.calls += latencies.len();
        figures.errors += errors;
        figures.latencies.extend(latencies);
    }
    (figures, charges as f64 / transactions as f64)
}

fn limiter_benchmarks(dir: &Path, s: &Settings) {
    println!("\nLimiter::charge in-process (one credential; category + plan buckets):");
    for mode in [ChargeMode::PerCall, ChargeMode::GroupCommit] {
        for threads in [1, 4, 16, 64] {
            let path = dir.join(format!("limiter-{mode:?}-{threads}.db"));
            let store = Store::open(
                &path,
                &StoreOptions {
                    create: true,
                    pool_size: 8,
                    ..StoreOptions::default()
                },
            )
            .expect("open store");
            run_ok(&path, &["init", "--company", "Bench Co"]);
            run_ok(
                &path,
                &["limits", "set", "--plan", "pro", "--per-hour", "1000000000"],
            );
            run_ok(
                &path,
                &[
                    "limits",
                    "set",
                    "--plan",
                    "pro",
                    "--category",
                    "read",
                    "--per-minute",
                    "1000000000",
                ],
            );
            let (figures, per_tx) = limiter_load(&store, mode, threads, s);
            print_figures(
                &format!("  {mode:?}, {threads} callers ({per_tx:.1} charges/tx)"),
                figures,
            );
        }
    }
}

fn main() {
    let s = settings();
    let dir = tempfile::tempdir().expect("tempdir");
    let wants = |part: &str| s.only.as_deref().is_none_or(|only| only == part);
    if wants("http") {
        http_benchmarks(dir.path(), &s);
    }
    if wants("stdio") {
        stdio_benchmarks(dir.path(), &s);
    }
    if wants("limiter") {
        limiter_benchmarks(dir.path(), &s);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn http_benchmarks(dir: &Path, s: &Settings) {
    let db = dir.join("http.db");
    let token = prepare_database(&db);
    let port = free_port();
    let mut cmd = tollgate_on_cpu0(s.pin);
    cmd.arg("--database")
        .arg(&db)
        .args([
            "serve",
            "--conformance-pack",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env_remove("TOLLGATE_CONFIG")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null());
    let mut child = cmd.spawn().expect("spawn tollgate serve");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "HTTP, {} keep-alive connections, {} s warm-up, {} s measured (server pinned to CPU 0: {}):",
        s.connections,
        s.warmup.as_secs(),
        s.measure.as_secs(),
        s.pin
    );
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "test_simple_text", "arguments": {}, "_meta": meta}});
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                          "params": {"_meta": meta}});
    let pid = child.id();
    for (label, body, name) in [
        (
            "  tools/call, all guards on",
            &call,
            Some("test_simple_text"),
        ),
        (
            "  server/discover (no guards, no database)",
            &discover,
            None,
        ),
    ] {
        let figures = http_load(addr, &token, body, name, pid, s);
        print_figures(label, figures);
    }
    if let Some(kib) = peak_rss_kib(pid) {
        println!("  server peak RSS {:.1} MiB", kib as f64 / 1024.0);
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();
}

/// One keep-alive connection sending `body` in a closed loop until `stop`.
fn http_client(
    addr: std::net::SocketAddr,
    request: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
) -> Vec<(Instant, Duration, bool)> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut samples = Vec::new();
    let mut head = String::new();
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        stream.write_all(&request).expect("send");
        let mut length = 0usize;
        let mut status_ok = false;
        loop {
            head.clear();
            if reader.read_line(&mut head).expect("read head") == 0 {
                return samples;
            }
            let line = head.trim_end();
            if line.is_empty() {
                break;
            }
            if line.starts_with("HTTP/1.1 ") {
                status_ok = line.starts_with("HTTP/1.1 200");
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).expect("read body");
        let ok = status_ok
            && !body.windows(8).any(|w| w == b"\"error\"")
            && !body.windows(14).any(|w| w == b"\"isError\":true");
        samples.push((sent, sent.elapsed(), ok));
    }
    samples
}

fn http_load(
    addr: std::net::SocketAddr,
    token: &str,
    body: &Value,
    name: Option<&str>,
    pid: u32,
    s: &Settings,
) -> LoadFigures {
    let method = body["method"].as_str().expect("method");
    let payload = body.to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
    );
    if let Some(name) = name {
        request.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    ));
    let request = Arc::new(request.into_bytes());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..s.connections)
        .map(|_| {
            let (request, stop) = (Arc::clone(&request), Arc::clone(&stop));
            std::thread::spawn(move || http_client(addr, request, stop))
        })
        .collect();
    let started = Instant::now();
    let measure_from = started + s.warmup;
    let measure_to = measure_from + s.measure;
    std::thread::sleep(s.warmup);
    let cpu0 = cpu_time(pid);
    std::thread::sleep(s.measure);
    let cpu1 = cpu_time(pid);
    stop.store(true, Ordering::Relaxed);
    let mut figures = LoadFigures {
        calls: 0,
        errors: 0,
        secs: s.measure.as_secs_f64(),
        latencies: Vec::new(),
        cpu_per_call_us: None,
    };
    for client in clients {
        for (sent, latency, ok) in client.join().expect("client") {
            if sent >= measure_from && sent + latency <= measure_to {
                figures.calls += 1;
                figures.latencies.push(latency);
                if !ok {
                    figures.errors += 1;
                }
            }
        }
    }
    if let (Some(t0), Some(t1)) = (cpu0, cpu1) {
        figures.cpu_per_call_us = Some((t1 - t0).as_secs_f64() * 1e6 / figures.calls.max(1) as f64);
    }
    figures
}

fn stdio_benchmarks(dir: &Path, s: &Settings) {
    let db = dir.join("bench.db");
    let token = prepare_database(&db);
    println!(
        "stdio, {} in flight, {} s warm-up, {} s measured (server pinned to CPU 0: {}):",
        s.inflight,
        s.warmup.as_secs(),
        s.measure.as_secs(),
        s.pin
    );
    let call = json!({"name": "test_simple_text", "arguments": {}});
    print_figures(
        "  tools/call, all guards on",
        stdio_load(&db, &token, "tools/call", &call, s),
    );
    print_figures(
        "  ping (no guards, no charge)",
        stdio_load(&db, &token, "ping", &json!({}), s),
    );
}
