//! Load benchmark: every figure of the performance acceptance table, measured on the real
//! binary — guarded `tools/call` throughput, latency and memory over HTTP and stdio, a
//! built-in read tool on a large invoice book, the same HTTP load on a database with a
//! large audit log and a million rate windows, cold start, a call forwarded to an upstream
//! MCP server (against the upstream called directly and against mcp-proxy) and to a REST
//! backend, the cost of exporting traces (and of an exporter that cannot deliver), the cost
//! of each guard — and the rate limiter alone, in-process.
//!
//! ```text
//! cargo bench --features conformance-pack --bench load -- [options]
//! cargo bench --features bench-switches,conformance-pack --bench load -- [options]   # with the guard costs
//! ```
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `--secs N` | 10 | seconds measured per load run |
//! | `--warmup N` | 2 | seconds of load before each measurement starts |
//! | `--runs N` | 3 | runs of every measurement (each on a new server process); every run is printed, then the median of calls/s, p50, p99 and CPU, and the highest peak RSS. `limiter` runs once. |
//! | `--only A,B` | all | run only these scenarios (names below; comma-separated or repeated) |
//! | `--connections N` | 16 | keep-alive connections of every HTTP load, each in a closed loop |
//! | `--inflight N` | 64 | requests outstanding on every stdio load |
//! | `--invoices N` | 100000 | invoices seeded for `invoice` |
//! | `--audit-rows N` | 10000000 | audit rows seeded for `bigdb` |
//! | `--counter-windows N` | 1000000 | rate-counter windows seeded for `bigdb` |
//! | `--window-minutes N` | 121 | minute windows per counter in `bigdb` (past 120, expired) |
//! | `--starts N` | 10 | server starts timed by `coldstart` |
//! | `--no-pin` | | do not pin the server to CPU 0 (`taskset`, when it exists) |
//!
//! Scenarios, in the order they run:
//!
//! - `http` — `tollgate serve --conformance-pack` on a fresh database: `tools/call
//!   test_simple_text` with every guard on (token authentication, the category and plan
//!   buckets charged in SQLite with their limits raised so nothing is refused, scopes and
//!   plan, guardrails, idempotency, audit), then `server/discover`, which passes no guard and
//!   reads no database (the transport floor). Calls/s, p50, p99, errors, server CPU µs per
//!   call and the server's peak RSS (`VmHWM`) after the guarded load.
//! - `stdio` — `tollgate stdio --conformance-pack`, the same guarded call, then `ping` (the
//!   floor).
//! - `provider` — the guarded HTTP load of `http` on one server with an identity provider
//!   configured (`[[auth.issuers]]`, its keys in a local JWKS file), once with the API key
//!   and once with the provider's access token (a JWT signed ES256 naming a user and an
//!   OAuth client, so the client's bucket is charged too), alternating which goes first;
//!   prints both and the token's server CPU per call as a ratio to the key's (target ≤ 1.10).
//! - `invoice` — `get_invoice` over HTTP on a book of `--invoices` invoices, seeded in one
//!   transaction through the crate's own `store::invoicing` functions (2 000 clients with valid
//!   NIFs; series F and S numbered in date order over three years; 1–4 lines with real VAT
//!   and withholding; drafts, issued, partly paid and paid invoices with their payments).
//!   Plain `tollgate serve` (the invoicing tools are always on) with an `invoices:read` key;
//!   every connection asks for random invoices.
//! - `bigdb` — the guarded HTTP load of `http` on a fresh database and, alternately, on one
//!   whose audit log holds `--audit-rows` rows (six months of calls by 50 keys and 5 OAuth
//!   clients, sixteen tools, realistic outcomes and durations) and whose rate-counter table
//!   holds `--counter-windows` windows — a large installation in steady state: many
//!   credentials' one-minute windows from the current minute back `--window-minutes`
//!   minutes (121: one minute past the two-hour retention, the minute's worth of expired
//!   windows the once-a-minute pruner deletes in steady state; 130 shows it catching up with
//!   ten minutes of backlog), which the server prunes in the background during the run
//!   (the pruned windows are put back before each run). Both are seeded by direct SQL, in transactions of 500 000 rows. Prints both and
//!   how much the large database falls behind.
//! - `coldstart` — `--starts` times: spawn `tollgate serve` (not pinned, not wrapped) on an
//!   initialised database and poll `GET /healthz` (a new connection every ~1 ms) until it
//!   answers 200; median and max.
//! - `backend` — a `tools/call` forwarded to an upstream MCP server, against the upstream
//!   called directly and against a peer gateway (`benches/load/forwarding.rs`). The upstream
//!   is the official Rust SDK's server, rmcp 3.11, stateless Streamable HTTP with JSON
//!   responses, run by the bench itself (below) with one read-only tool, `echo`. The gate is
//!   `tollgate serve` on a fresh database whose configuration has one backend, `up`
//!   (`kind = "mcp"`, `url` the upstream's `/mcp`); its key has the scope `up:read` and its
//!   limits raised, so every guard runs and nothing is refused. The peer is mcp-proxy 0.6.0
//!   (`benches/load/mcp_proxy.rs`; bearer authentication, the upstream as its HTTP backend
//!   `up`, so the tool is `up/echo`; each connection opens a session of its own first), when
//!   its binary is found (`TG_BENCH_MCP_PROXY`, else `PATH`, else `~/.cargo/bin`); when not,
//!   one line says so (`mcp-proxy: skipped (not installed; cargo install mcp-proxy
//!   --version 0.6.0 --locked)`) and the rest runs. The run waits (at most 30 s) for the
//!   gate's `/healthz` to report the backend `ready` and for a first call through mcp-proxy,
//!   then measures `echo` direct (as the gate's client sends it: revision 2025-11-25, no
//!   session), `up_echo` through tollgate and `up/echo` through mcp-proxy, in an order that
//!   rotates from run to run, with `--connections` connections and then with one (no
//!   queueing: the latency a caller sees). Upstream, gate and mcp-proxy are all pinned to
//!   CPU 0, so a gateway's latency includes its share of the one core. Prints calls/s, p50,
//!   p99, errors, the CPU µs per call and peak RSS of the process in front (the upstream
//!   when direct, else the gateway) and the upstream's CPU µs per call during each
//!   gateway's load; then the goals as ratios beside their targets: tollgate's CPU per
//!   forwarded call / the upstream's per direct call (≤ 2.5) and / mcp-proxy's (≤ 1.0),
//!   calls/s through tollgate / through mcp-proxy (≥ 1.2), the upstream's CPU per call
//!   through tollgate / direct (≤ 1.10), and with one connection the p50 tollgate adds over
//!   direct (≤ 0.3 ms). When the gate does not report the backend ready, prints `skipped:`
//!   and why.
//! - `rest` — a call forwarded to a REST backend against a local guarded call, on one
//!   `tollgate serve --conformance-pack` (`benches/load/rest.rs`). The backend is the
//!   bench's own REST server (`GET /items/{id}`, a small JSON object) described by an
//!   OpenAPI 3.1 document written to the temporary directory, configured as `shop`
//!   (`kind = "openapi"`): its operation `getItem` is the tool `shop_get_item` (read). Each
//!   run measures `tools/call test_simple_text` (as in `http`) and `tools/call
//!   shop_get_item`, both with the admin key and every guard, alternating which goes
//!   first; prints both, the REST server's CPU per forwarded call, and the gate's CPU per
//!   forwarded call as a ratio to its CPU per local call (target ≤ 2.5).
//! - `telemetry` — what exporting traces costs a call (`benches/load/telemetry.rs`): the
//!   guarded HTTP load of `http` on four `tollgate serve --conformance-pack` gates that
//!   differ only in their OTLP exporter: export off; export on to a closed port (a listener
//!   bound, its port noted, the listener dropped); to a receiver that accepts TCP
//!   connections and never answers (`OTEL_EXPORTER_OTLP_TIMEOUT` 3 s); and to one that
//!   answers every export 200 with an empty protobuf body (the cost of export that works).
//!   Both receivers are threads of the bench's own. Each run starts every gate afresh on a
//!   fresh database, one after the other in an order that rotates from run to run, and
//!   reads each exporting gate's span counts (exported, dropped, failed exports) from its
//!   `/metrics` after its load. Prints calls/s, p50, p99 and server CPU per call of each,
//!   the span counts, each exporter's CPU per call as a ratio to export off's (target for
//!   the two failing ones: ≤ 1.05, with spans dropped and counted in every run), by run and
//!   median, and a markdown table of the four.
//! - `policy` — what the operator's policy rules cost a call (`benches/load/policy.rs`): the
//!   guarded HTTP load of `http` on a gate without `[[policy.rules]]` and on one with ten
//!   rules that all cover the tool called and whose conditions are all evaluated, and
//!   false, on every call. Prints both and ten rules' CPU per call as a ratio to none's
//!   (target ≤ 1.05).
//! - `postgres` — the guarded HTTP load of `http` on an SQLite file, then on a PostgreSQL
//!   database with one `tollgate serve` node, then with two nodes on one database (the
//!   connections split between them; CPU per call is both nodes' together), in the same
//!   run. The server is `TG_BENCH_POSTGRES` (a URL without a database) when set, else a
//!   private one started by `tests/postgres/cluster.sh`; without either it is skipped.
//! - `guards` — the guarded HTTP and stdio loads once with the whole guard chain and once
//!   with the chain built without each step in turn (`TG_BENCH_SKIP_GUARDS=<step>`), so the
//!   CPU each step costs per call is the difference. Needs `--features bench-switches` (only
//!   such a binary reads the variable); without it, prints how to enable it and skips.
//! - `limiter` — `Limiter::charge` alone, in-process, with 1, 4, 16 and 64 concurrent
//!   callers on one credential (group commit): charges/s, p50, p99 and charges per
//!   transaction.
//!
//! At the end a markdown table of the headline figures with their targets is printed, to
//! paste into a report.
//!
//! Environment: `TG_BENCH_WRAP="perf record -g -o perf.data --"` runs every measured
//! tollgate server under that command (profiling; not the cold starts, not the bench's own
//! servers, not mcp-proxy). No `OTEL_*` variable of the bench's environment reaches a
//! server: only the `telemetry` scenario's gates export. `TG_BENCH_SKIP_GUARDS` is set by the `guards` scenario alone and
//! removed from every other server. `TG_BENCH_BIN` measures another build of the binary (an
//! A/B comparison) instead of the one built with the bench. `TG_BENCH_MCP_PROXY` names the
//! mcp-proxy binary `backend` measures.
//!
//! The bench's own servers (`benches/load/serve.rs`): the bench binary re-executes itself
//! with a hidden first argument, `--serve-upstream ADDR` (the rmcp upstream) or
//! `--serve-rest ADDR` (the REST backend), so each runs in a process of its own, pinned to
//! CPU 0 like the servers under test, its CPU time its own: hyper's HTTP/1 server on tokio,
//! `TCP_NODELAY` on every accepted socket. Each ends when its standard input (held by the
//! bench) closes, or on SIGTERM.
//!
//! Everything talks to 127.0.0.1 only, every load stops after its time, every server is
//! stopped (SIGTERM, then SIGKILL after 10 s) and the databases live in a temporary
//! directory that is removed at the end. The load generator runs wherever the OS puts it.
//! Figures are printed, never asserted.

#[path = "load/forwarding.rs"]
mod forwarding;
#[path = "load/mcp_proxy.rs"]
mod mcp_proxy;
#[path = "load/policy.rs"]
mod policy;
#[path = "load/postgres.rs"]
mod postgres;
#[path = "load/provider.rs"]
mod provider;
#[path = "load/rest.rs"]
mod rest;
#[path = "load/serve.rs"]
mod serve;
#[path = "load/telemetry.rs"]
mod telemetry;

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::params;
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate::clock::Clock;
use tollgate::guards::ratelimit::{ChargeRequest, Limiter, RETENTION_SECS};
use tollgate::store::invoicing as invoice_db;
use tollgate::store::{Store, StoreError, StoreOptions};
use tollgate::tools::invoicing::date::Date;
use tollgate::tools::invoicing::model::{
    Client, ClientId, Invoice, InvoiceKind, InvoiceStatus, Line, LinePricing, Payment, PaymentId,
    PaymentMethod, Totals,
};
use tollgate::tools::invoicing::taxid::TaxId;
use tollgate::tools::{Book, Category};

/// The binary under test, built by cargo with the bench's features.
const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The binary under test: `TG_BENCH_BIN`, else the one built with this bench.
fn bin() -> String {
    std::env::var("TG_BENCH_BIN").unwrap_or_else(|_| BIN.to_owned())
}
/// The variable a `bench-switches` build reads to switch guards off.
const SKIP_VAR: &str = "TG_BENCH_SKIP_GUARDS";
/// Every scenario, in the order they run.
const SCENARIOS: [&str; 13] = [
    "http",
    "stdio",
    "provider",
    "invoice",
    "bigdb",
    "coldstart",
    "backend",
    "rest",
    "telemetry",
    "policy",
    "postgres",
    "guards",
    "limiter",
];
/// The steps of the guard chain a `bench-switches` build can leave out (`Step::name` in
/// `src/guards/steps.rs`; resolving the tool and running it stay).
const GUARDS: [&str; 9] = [
    "authenticate",
    "charge",
    "access",
    "rehearse",
    "replay",
    "policy",
    "guardrails",
    "claim",
    "audit",
];

// Targets of the performance acceptance table, printed beside the figures.
const TARGET_HTTP_CALLS: f64 = 29_000.0;
const TARGET_HTTP_P99_MS: f64 = 2.0;
const TARGET_HTTP_RSS_MIB: f64 = 64.0;
const TARGET_STDIO_CALLS: f64 = 50_000.0;
const TARGET_STDIO_P99_MS: f64 = 5.0;
const TARGET_INVOICE_CALLS: f64 = 15_000.0;
const TARGET_BIGDB_FALL_PERCENT: f64 = 10.0;
const TARGET_COLD_START_MS: f64 = 50.0;

// ---------------------------------------------------------------------------------------
// Settings

/// What to run and for how long, from the command line.
#[derive(Clone)]
struct Settings {
    /// Scenarios to run; empty: all.
    only: Vec<String>,
    /// Pin the server to CPU 0 with `taskset`.
    pin: bool,
    measure: Duration,
    warmup: Duration,
    runs: usize,
    inflight: usize,
    connections: usize,
    invoices: usize,
    audit_rows: u64,
    counter_windows: u64,
    /// Minute windows per counter in `bigdb` (`--window-minutes`).
    window_minutes: u64,
    starts: usize,
    /// Calls/s all connections together send at most (each connection its share, the
    /// connections' turns staggered so that the requests are evenly spaced); `None`: each
    /// sends its next request as soon as it has the answer.
    pace: Option<f64>,
}

impl Settings {
    fn from_args() -> Settings {
        let args: Vec<String> = std::env::args().collect();
        let mut only = Vec::new();
        for (i, arg) in args.iter().enumerate() {
            if arg != "--only" {
                continue;
            }
            let list = args.get(i + 1).expect("--only needs a scenario name");
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                assert!(
                    SCENARIOS.contains(&name),
                    "--only: unknown scenario {name:?}; one of {SCENARIOS:?}"
                );
                only.push(name.to_owned());
            }
        }
        Settings {
            only,
            pin: !args.iter().any(|a| a == "--no-pin") && Path::new("/usr/bin/taskset").exists(),
            measure: Duration::from_secs(number(&args, "--secs", 10)),
            warmup: Duration::from_secs(number(&args, "--warmup", 2)),
            runs: number(&args, "--runs", 3usize).max(1),
            inflight: number(&args, "--inflight", 64usize).max(1),
            connections: number(&args, "--connections", 16usize).max(1),
            invoices: number(&args, "--invoices", 100_000usize).max(1),
            audit_rows: number(&args, "--audit-rows", 10_000_000),
            counter_windows: number(&args, "--counter-windows", 1_000_000),
            window_minutes: number(&args, "--window-minutes", WINDOW_MINUTES).max(1),
            starts: number(&args, "--starts", 10usize).max(1),
            pace: None,
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == scenario)
    }

    /// How each load run is timed, for headings.
    fn timing(&self) -> String {
        format!(
            "{} s warm-up + {} s measured per run, {} run{}, server pinned to CPU 0: {}",
            self.warmup.as_secs(),
            self.measure.as_secs(),
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            self.pin
        )
    }
}

/// The value after `name`, or `default` when the option is absent.
fn number<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} needs a whole number")),
    }
}

// ---------------------------------------------------------------------------------------
// Figures

/// What one load run measured, raw.
struct LoadFigures {
    calls: usize,
    errors: usize,
    secs: f64,
    latencies: Vec<Duration>,
    /// Server CPU time (user + system, all threads) per answered call, in µs.
    cpu_per_call_us: Option<f64>,
    /// The server's peak resident memory when the measurement ended.
    peak_rss_kib: Option<u64>,
}

impl LoadFigures {
    fn new(secs: f64) -> LoadFigures {
        LoadFigures {
            calls: 0,
            errors: 0,
            secs,
            latencies: Vec::new(),
            cpu_per_call_us: None,
            peak_rss_kib: None,
        }
    }

    fn summarise(mut self) -> RunFigures {
        self.latencies.sort_unstable();
        RunFigures {
            calls_per_sec: self.calls as f64 / self.secs,
            p50: percentile(&self.latencies, 0.50),
            p99: percentile(&self.latencies, 0.99),
            errors: self.errors,
            cpu_us: self.cpu_per_call_us,
            rss_kib: self.peak_rss_kib,
        }
    }
}

/// The figures of one run (or the median of several).
#[derive(Debug, Clone, Copy)]
struct RunFigures {
    calls_per_sec: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
    cpu_us: Option<f64>,
    rss_kib: Option<u64>,
}

impl RunFigures {
    /// Medians of calls/s, p50, p99 and CPU; errors added up; the highest peak RSS.
    fn median(runs: &[RunFigures]) -> RunFigures {
        let secs = |pick: fn(&RunFigures) -> Duration| {
            Duration::from_secs_f64(median(runs.iter().map(|r| pick(r).as_secs_f64())))
        };
        let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_us).collect();
        RunFigures {
            calls_per_sec: median(runs.iter().map(|r| r.calls_per_sec)),
            p50: secs(|r| r.p50),
            p99: secs(|r| r.p99),
            errors: runs.iter().map(|r| r.errors).sum(),
            cpu_us: (!cpu.is_empty()).then(|| median(cpu.into_iter())),
            rss_kib: runs.iter().filter_map(|r| r.rss_kib).max(),
        }
    }

    fn line(&self) -> String {
        self.line_of(None)
    }

    /// The figures; the CPU and peak RSS named after `process` (else "server CPU" and
    /// "peak RSS").
    fn line_of(&self, process: Option<&str>) -> String {
        let mut line = format!(
            "{:>9.0} calls/s   p50 {:>7.3} ms   p99 {:>7.3} ms   errors {}",
            self.calls_per_sec,
            ms(self.p50),
            ms(self.p99),
            self.errors
        );
        let (cpu, rss) = match process {
            None => (Cow::Borrowed("server CPU"), Cow::Borrowed("peak RSS")),
            Some(p) => (
                Cow::Owned(format!("{p} CPU")),
                Cow::Owned(format!("{p} peak RSS")),
            ),
        };
        if let Some(us) = self.cpu_us {
            line.push_str(&format!("   {cpu} {us:.1} µs/call"));
        }
        if let Some(kib) = self.rss_kib {
            line.push_str(&format!("   {rss} {:.1} MiB", mib(kib)));
        }
        line
    }
}

/// One measurement repeated `--runs` times: prints every run as it comes, then the median.
struct Series {
    label: String,
    runs: Vec<RunFigures>,
    /// Whose CPU and peak RSS the figures are, when not "the server's".
    process: Option<&'static str>,
}

impl Series {
    fn new(label: impl Into<String>) -> Series {
        Series {
            label: label.into(),
            runs: Vec::new(),
            process: None,
        }
    }

    /// The CPU and peak RSS are `process`'s (printed as "`process` CPU").
    fn of(mut self, process: &'static str) -> Series {
        self.process = Some(process);
        self
    }

    fn record(&mut self, figures: RunFigures) {
        self.runs.push(figures);
        let tag = format!("run {}", self.runs.len());
        println!(
            "  {:<46} {tag:<9} {}",
            self.label,
            figures.line_of(self.process)
        );
    }

    fn median(&self) -> RunFigures {
        RunFigures::median(&self.runs)
    }

    /// The median line (nothing new when there was one run).
    fn print_median(&self) {
        if self.runs.len() > 1 {
            let tag = format!("median {}", self.runs.len());
            println!(
                "  {:<46} {tag:<9} {}",
                self.label,
                self.median().line_of(self.process)
            );
        }
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `31234.6` → `31 235`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `12.3`, or `–` when the figure could not be read.
fn us_or_dash(us: Option<f64>) -> String {
    us.map_or_else(|| "–".to_owned(), |us| format!("{us:.1}"))
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
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The peak resident set (`VmHWM`) of process `pid`.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A small deterministic generator (SplitMix64) for seeding and picking invoice ids.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index into a slice of `len` items (`len > 0`).
    fn index(&mut self, len: usize) -> usize {
        (self.next() % len as u64) as usize
    }

    /// True `per_mille` times in a thousand.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// One of `table`'s words, by its weight (weights add up to 1000).
    fn pick<'a>(&mut self, table: &[(&'a str, u64)]) -> &'a str {
        let mut roll = self.below(1000);
        for &(word, weight) in table {
            if roll < weight {
                return word;
            }
            roll -= weight;
        }
        table[table.len() - 1].0
    }

    /// Twenty lowercase hex digits, like a credential's public id.
    fn hex20(&mut self) -> String {
        format!("{:016x}{:04x}", self.next(), self.next() & 0xffff)
    }
}

// ---------------------------------------------------------------------------------------
// Databases and servers

/// A `tollgate` admin command on `db`: never pinned, never wrapped.
fn tollgate(db: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("--database").arg(db);
    cmd.env_remove("TOLLGATE_TOKEN")
        .env_remove("TOLLGATE_CONFIG")
        .env_remove(SKIP_VAR)
        .env("RUST_LOG", "error");
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

/// A key: its token and public id.
struct Credential {
    token: String,
    public_id: String,
}

/// Where the limits are raised to: nothing the bench sends is ever refused.
const HUGE_LIMIT: &str = "1000000000";

/// Creates the database (company on the pro plan); returns its admin key (scopes `*`),
/// with its read limit and the plan's hourly limit raised out of the way.
fn prepare_database(db: &Path) -> Credential {
    let printed: Value =
        serde_json::from_slice(&run_ok(db, &["init", "--json", "--company", "Bench Co"]))
            .expect("init prints JSON");
    let token = printed["admin_key"]
        .as_str()
        .expect("`init --json` prints admin_key")
        .to_owned();
    let admin = credential(token);
    raise_read_limit(db, &admin.public_id);
    run_ok(
        db,
        &["limits", "set", "--plan", "pro", "--per-hour", HUGE_LIMIT],
    );
    admin
}

fn credential(token: String) -> Credential {
    let public_id = token.split('_').nth(2).expect("a public id").to_owned();
    Credential { token, public_id }
}

fn raise_read_limit(db: &Path, public_id: &str) {
    run_ok(
        db,
        &[
            "limits",
            "set",
            "--credential",
            public_id,
            "--category",
            "read",
            "--per-minute",
            HUGE_LIMIT,
        ],
    );
}

/// A new API key with `scopes`, its read limit raised.
fn create_key(db: &Path, name: &str, scopes: &str) -> Credential {
    create_key_with(db, name, scopes, &[])
}

/// [`create_key`] with more arguments (a configuration file).
fn create_key_with(db: &Path, name: &str, scopes: &str, extra: &[&str]) -> Credential {
    let mut args = vec![
        "key", "create", "--name", name, "--scopes", scopes, "--json",
    ];
    args.extend_from_slice(extra);
    let printed: Value =
        serde_json::from_slice(&run_ok(db, &args)).expect("`key create --json` prints JSON");
    let key = credential(printed["token"].as_str().expect("a token").to_owned());
    raise_read_limit(db, &key.public_id);
    key
}

/// A store on `db` for seeding and counting (one connection).
fn open_store(db: &Path) -> Store {
    let options = StoreOptions {
        pool_size: 1,
        ..StoreOptions::default()
    };
    Store::open(db, &options).expect("open the database")
}

/// A plain SQLite connection on `db`, for the bulk seeding and the checks the store's
/// functions do not offer (the store hands out no SQLite types).
fn sqlite(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("open the database");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    conn
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction on `conn`, committing on `Ok`.
fn sqlite_write<T>(
    conn: &mut rusqlite::Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let value = f(&tx)?;
    tx.commit()?;
    Ok(value)
}

fn remove_database(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

fn file_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / (1024.0 * 1024.0))
}

/// The server under test on `db`: run by `TG_BENCH_WRAP` when set, else pinned to CPU 0
/// when `pinned` (so the load generator does not compete with it for the core), with the
/// `skip`: the guard steps to leave out (honoured by a `bench-switches` build only). No
/// `OTEL_*` variable of the bench's environment reaches it: traces are exported only where
/// the `telemetry` scenario asks.
fn server_command(db: &Path, skip: Option<&str>, pinned: bool) -> Command {
    let mut cmd = if let Ok(wrapper) = std::env::var("TG_BENCH_WRAP") {
        let mut words = wrapper.split_whitespace();
        let mut cmd = Command::new(words.next().expect("a wrapper command"));
        cmd.args(words).arg(bin());
        cmd
    } else if pinned {
        let mut cmd = Command::new("/usr/bin/taskset");
        cmd.args(["-c", "0", &bin()]);
        cmd
    } else {
        Command::new(bin())
    };
    cmd.arg("--database").arg(db);
    cmd.env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TOKEN")
        .env_remove(SKIP_VAR)
        .env("RUST_LOG", "error");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(name);
        }
    }
    if let Some(skip) = skip {
        cmd.env(SKIP_VAR, skip);
    }
    cmd
}

/// A child process that is stopped when dropped, even when the bench panics.
struct Running(Child);

impl Running {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    /// SIGTERM (the server finishes in-flight requests and flushes its audit rows), then
    /// SIGKILL if it is still there after 10 s.
    fn drop(&mut self) {
        let child = &mut self.0;
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `tollgate serve` listening on a free loopback port.
struct HttpServer {
    process: Running,
    addr: SocketAddr,
}

impl HttpServer {
    /// Starts `tollgate serve <extra>` on `db` and waits until it accepts connections.
    fn start(db: &Path, extra: &[&str], skip: Option<&str>, s: &Settings) -> HttpServer {
        HttpServer::start_env(db, extra, skip, &[], s)
    }

    /// [`HttpServer::start`] with the variables `env` set in the server's environment.
    fn start_env(
        db: &Path,
        extra: &[&str],
        skip: Option<&str>,
        env: &[(&str, String)],
        s: &Settings,
    ) -> HttpServer {
        let server = HttpServer::spawn_env(db, extra, skip, env, s, Stdio::inherit());
        let addr = server.addr;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                panic!("the server did not listen on {addr} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Spawns `tollgate serve <extra>` on `db` with its standard error to `stderr`, without
    /// waiting for it.
    fn spawn(
        db: &Path,
        extra: &[&str],
        skip: Option<&str>,
        s: &Settings,
        stderr: Stdio,
    ) -> HttpServer {
        HttpServer::spawn_env(db, extra, skip, &[], s, stderr)
    }

    /// [`HttpServer::spawn`] with the variables `env` set in the server's environment.
    fn spawn_env(
        db: &Path,
        extra: &[&str],
        skip: Option<&str>,
        env: &[(&str, String)],
        s: &Settings,
        stderr: Stdio,
    ) -> HttpServer {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut cmd = server_command(db, skip, s.pin);
        cmd.arg("serve")
            .args(extra)
            .args(["--listen", &addr.to_string()])
            .env("TOLLGATE_HTTP_METRICS", "true")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(stderr);
        HttpServer {
            process: Running(cmd.spawn().expect("spawn tollgate serve")),
            addr,
        }
    }

    /// Whether the process has ended, and how.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.0.try_wait().ok().flatten()
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

// ---------------------------------------------------------------------------------------
// HTTP load

/// `_meta` of a stateless 2026-07-28 request.
fn stateless_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {}})
}

fn guarded_call() -> Value {
    tool_call("test_simple_text")
}

/// A stateless `tools/call` of `tool` without arguments.
fn tool_call(tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": {}, "_meta": stateless_meta()}})
}

fn discover() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
           "params": {"_meta": stateless_meta()}})
}

/// Request line and headers of a `POST /mcp`, up to (not including) `Content-Length`.
fn request_head(token: &str, method: &str, tool: Option<&str>) -> String {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
    );
    if let Some(tool) = tool {
        head.push_str(&format!("Mcp-Name: {tool}\r\n"));
    }
    head
}

fn with_body(head: &str, body: &str) -> Vec<u8> {
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// What the HTTP clients send.
enum Requests {
    /// The same request every time.
    Fixed(Vec<u8>),
    /// `get_invoice` of a random invoice each time: the body is `before + id + after`.
    Invoices {
        head: String,
        before: String,
        after: String,
        ids: Vec<String>,
    },
    /// The same request every time on a session each connection opens first (`initialize`,
    /// then `notifications/initialized`), carrying its `Mcp-Session-Id`.
    Session(mcp_proxy::SessionCalls),
}

impl Requests {
    fn fixed(token: &str, body: &Value) -> Arc<Requests> {
        let method = body["method"].as_str().expect("a method");
        let tool = body["params"]["name"].as_str();
        let head = request_head(token, method, tool);
        Arc::new(Requests::Fixed(with_body(&head, &body.to_string())))
    }

    fn invoices(token: &str, ids: Vec<String>) -> Arc<Requests> {
        const MARK: &str = "@INVOICE@";
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "get_invoice", "arguments": {"invoice_id": MARK},
                                     "_meta": stateless_meta()}})
        .to_string();
        let (before, after) = body.split_once(MARK).expect("the mark");
        Arc::new(Requests::Invoices {
            head: request_head(token, "tools/call", Some("get_invoice")),
            before: before.to_owned(),
            after: after.to_owned(),
            ids,
        })
    }

    fn next(&self, rng: &mut SplitMix64) -> Cow<'_, [u8]> {
        match self {
            Requests::Fixed(bytes) => Cow::Borrowed(bytes),
            Requests::Invoices {
                head,
                before,
                after,
                ids,
            } => {
                let id = &ids[rng.index(ids.len())];
                Cow::Owned(with_body(head, &format!("{before}{id}{after}")))
            }
            Requests::Session(_) => {
                unreachable!("a connection sends the calls its session's opening returned")
            }
        }
    }
}

/// One answered call: when it was sent, how long it took, whether it succeeded.
type Sample = (Instant, Duration, bool);

/// One keep-alive connection sending requests in a closed loop until `stop`; when `pace`
/// is some, `(first, every)`, its first request at `first` and then one each `every` (a
/// request whose turn has passed goes at once). Returns its samples and whether the server
/// closed the connection first.
fn http_client(
    addr: SocketAddr,
    requests: &Requests,
    stop: &AtomicBool,
    seed: u64,
    pace: Option<(Instant, Duration)>,
) -> (Vec<Sample>, bool) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut rng = SplitMix64(seed);
    let mut samples = Vec::new();
    let mut line = String::new();
    let opened;
    let requests = match requests {
        Requests::Session(calls) => match calls.open(&mut stream, &mut reader, &mut line) {
            Some(fixed) => {
                opened = fixed;
                &opened
            }
            None => return (samples, true),
        },
        other => other,
    };
    let mut turn = pace.map_or_else(Instant::now, |(first, _)| first);
    while !stop.load(Ordering::Relaxed) {
        let request = requests.next(&mut rng);
        if let Some((_, every)) = pace {
            // The load generator's pacing, not a wait for the server: a late request does
            // not make the next one early.
            let now = Instant::now();
            std::thread::sleep(turn.saturating_duration_since(now));
            turn = turn.max(now) + every;
        }
        let sent = Instant::now();
        if stream.write_all(&request).is_err() {
            return (samples, true);
        }
        let Some((status_ok, body)) = read_response(&mut reader, &mut line) else {
            return (samples, true);
        };
        samples.push((sent, sent.elapsed(), status_ok && answered_ok(&body)));
    }
    (samples, false)
}

/// Whether a JSON-RPC answer is neither an error nor a tool's `isError` result.
fn answered_ok(body: &[u8]) -> bool {
    !body.windows(8).any(|w| w == b"\"error\"")
        && !body.windows(14).any(|w| w == b"\"isError\":true")
}

/// Reads one HTTP/1.1 response: whether its status is 200, and its body (`Content-Length`
/// or chunked). `None` when the connection ends or fails.
fn read_response(reader: &mut BufReader<TcpStream>, line: &mut String) -> Option<(bool, Vec<u8>)> {
    let head = read_head(reader, line)?;
    Some((head.status_ok, read_body(reader, line, &head)?))
}

/// What [`read_head`] keeps of a response's status line and headers.
struct ResponseHead {
    status_ok: bool,
    length: usize,
    chunked: bool,
    /// `Mcp-Session-Id`, when the response has one.
    session_id: Option<String>,
}

/// Reads a response's status line and headers, up to the empty line.
fn read_head(reader: &mut BufReader<TcpStream>, line: &mut String) -> Option<ResponseHead> {
    let mut head = ResponseHead {
        status_ok: false,
        length: 0,
        chunked: false,
        session_id: None,
    };
    loop {
        line.clear();
        if reader.read_line(line).ok()? == 0 {
            return None;
        }
        let header = line.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            return Some(head);
        }
        if let Some(status) = header.strip_prefix("http/1.1 ") {
            head.status_ok = status.starts_with("200");
        } else if let Some(value) = header.strip_prefix("content-length:") {
            head.length = value.trim().parse().ok()?;
        } else if header.starts_with("transfer-encoding:") && header.contains("chunked") {
            head.chunked = true;
        } else if header.starts_with("mcp-session-id:") {
            let value = line.trim_end().split_once(':')?.1.trim();
            head.session_id = Some(value.to_owned());
        }
    }
}

/// Reads the body of the response whose head is `head`.
fn read_body(
    reader: &mut BufReader<TcpStream>,
    line: &mut String,
    head: &ResponseHead,
) -> Option<Vec<u8>> {
    if head.chunked {
        return read_chunked(reader, line);
    }
    let mut body = vec![0u8; head.length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

fn read_chunked(reader: &mut BufReader<TcpStream>, line: &mut String) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        line.clear();
        reader.read_line(line).ok()?;
        let size = line.trim().split(';').next()?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            // Trailers, up to the empty line that ends the message.
            loop {
                line.clear();
                if reader.read_line(line).ok()? == 0 || line.trim_end().is_empty() {
                    return Some(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).ok()?;
        line.clear();
        reader.read_line(line).ok()?;
    }
}

/// `--connections` clients on `server` for the warm-up and the measurement.
fn http_load(server: &HttpServer, requests: &Arc<Requests>, s: &Settings) -> LoadFigures {
    http_load_watching(server, requests, s, &[]).0
}

/// [`http_load`], also measuring the CPU time the processes `others` spent during the
/// measurement, per call answered by `server` (µs), in their order.
fn http_load_watching(
    server: &HttpServer,
    requests: &Arc<Requests>,
    s: &Settings,
    others: &[u32],
) -> (LoadFigures, Vec<Option<f64>>) {
    http_load_spread(&[server], requests, s, others)
}

/// `--connections` clients spread over `servers` (connection `i` on server `i mod n`) for
/// the warm-up and the measurement; the CPU per call is that of all of `servers`
/// together, the peak RSS the largest of theirs, and the processes `others` are measured
/// as in [`http_load_watching`].
fn http_load_spread(
    servers: &[&HttpServer],
    requests: &Arc<Requests>,
    s: &Settings,
    others: &[u32],
) -> (LoadFigures, Vec<Option<f64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..s.connections)
        .map(|i| {
            let addr = servers[i % servers.len()].addr;
            let (requests, stop) = (Arc::clone(requests), Arc::clone(&stop));
            let pace = s.pace.map(|rate| {
                let every = Duration::from_secs_f64(s.connections as f64 / rate);
                let first = started + every.mul_f64(i as f64 / s.connections as f64);
                (first, every)
            });
            std::thread::spawn(move || http_client(addr, &requests, &stop, i as u64 + 1, pace))
        })
        .collect();
    let measure_from = started + s.warmup;
    let measure_to = measure_from + s.measure;
    let cpu_of = |pids: &mut dyn Iterator<Item = u32>| -> Option<Duration> {
        pids.map(cpu_time).sum::<Option<Duration>>()
    };
    std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
    let cpu0 = cpu_of(&mut servers.iter().map(|server| server.pid()));
    let others0: Vec<Option<Duration>> = others.iter().map(|&pid| cpu_time(pid)).collect();
    std::thread::sleep(measure_to.saturating_duration_since(Instant::now()));
    let cpu1 = cpu_of(&mut servers.iter().map(|server| server.pid()));
    let others1: Vec<Option<Duration>> = others.iter().map(|&pid| cpu_time(pid)).collect();
    let rss = servers
        .iter()
        .filter_map(|server| peak_rss_kib(server.pid()))
        .max();
    stop.store(true, Ordering::Relaxed);
    let mut figures = LoadFigures::new(s.measure.as_secs_f64());
    figures.peak_rss_kib = rss;
    let mut broken = 0;
    for client in clients {
        let (samples, closed) = client.join().expect("client");
        broken += usize::from(closed);
        for (sent, latency, ok) in samples {
            if sent >= measure_from && sent + latency <= measure_to {
                figures.calls += 1;
                figures.latencies.push(latency);
                figures.errors += usize::from(!ok);
            }
        }
    }
    if broken > 0 {
        println!("  warning: the server closed {broken} connections during the load");
    }
    let per_call = |t0: Option<Duration>, t1: Option<Duration>| match (t0, t1) {
        (Some(t0), Some(t1)) => {
            Some(t1.saturating_sub(t0).as_secs_f64() * 1e6 / figures.calls.max(1) as f64)
        }
        _ => None,
    };
    let others_per_call = others0
        .into_iter()
        .zip(others1)
        .map(|(t0, t1)| per_call(t0, t1))
        .collect();
    figures.cpu_per_call_us = per_call(cpu0, cpu1);
    (figures, others_per_call)
}

// ---------------------------------------------------------------------------------------
// stdio load

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

/// Drives one `tollgate stdio --conformance-pack` with `--inflight` requests of `method`
/// outstanding.
fn stdio_load(
    db: &Path,
    token: &str,
    (method, params): (&str, &Value),
    skip: Option<&str>,
    s: &Settings,
) -> LoadFigures {
    let mut cmd = server_command(db, skip, s.pin);
    cmd.args(["stdio", "--conformance-pack"])
        .env("TOLLGATE_TOKEN", token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Running(cmd.spawn().expect("spawn tollgate stdio"));
    let watchdog = Watchdog::arm(child.pid(), s.warmup + s.measure + STDIO_GRACE);
    let mut stdin = BufWriter::new(child.0.stdin.take().expect("stdin"));
    let mut stdout = BufReader::new(child.0.stdout.take().expect("stdout"));
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
    let mut figures = LoadFigures::new(s.measure.as_secs_f64());
    let pid = child.pid();
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
        if now > measure_to && permits.is_some() {
            if let (Some((t0, n0)), Some(t1)) = (cpu_from, cpu_time(pid)) {
                let calls = (answered - n0).max(1) as f64;
                figures.cpu_per_call_us = Some((t1 - t0).as_secs_f64() * 1e6 / calls);
            }
            figures.peak_rss_kib = peak_rss_kib(pid);
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
    let _ = child.0.wait();
    watchdog.disarm();
    figures
}

/// How long a stdio server may take to drain after its load before it is killed.
const STDIO_GRACE: Duration = Duration::from_secs(60);

/// Kills a process that outlives its deadline, so a server that stops answering cannot
/// hold the benchmark (the reader then sees EOF).
struct Watchdog {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn arm(pid: u32, after: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let theirs = Arc::clone(&done);
        let deadline = Instant::now() + after;
        let thread = std::thread::spawn(move || {
            while !theirs.load(Ordering::Relaxed) {
                if Instant::now() > deadline {
                    println!("  warning: the server did not finish in time; killing it");
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watchdog { done, thread }
    }

    fn disarm(self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios

/// The medians the summary table reports.
#[derive(Default)]
struct Headlines {
    http: Option<RunFigures>,
    stdio: Option<RunFigures>,
    /// get_invoice, and how many invoices the book held.
    invoice: Option<(RunFigures, usize)>,
    /// Fresh and large database.
    bigdb: Option<(RunFigures, RunFigures)>,
    /// Median and max of the starts that answered, and how many starts were tried.
    coldstart: Option<(Duration, Duration, usize)>,
    /// Direct, through tollgate and through mcp-proxy.
    backend: Option<forwarding::ForwardingFigures>,
    /// A REST backend's forwarded call against a local guarded call.
    rest: Option<rest::RestFigures>,
    /// SQLite, PostgreSQL with one node and with two.
    postgres: Option<postgres::PostgresFigures>,
    /// The API key and the provider's token on one server.
    provider: Option<provider::ProviderFigures>,
    /// Export off, failing and succeeding.
    telemetry: Option<telemetry::TelemetryFigures>,
    /// No policy rules against ten.
    policy: Option<policy::PolicyFigures>,
}

/// Prints how many calls the server's charging transactions held on average so far, from
/// its `/metrics` page.
fn print_group_commit(addr: SocketAddr) {
    let Some(page) = http_get(addr, "/metrics") else {
        println!("  (no /metrics page)");
        return;
    };
    if let Some((charges, transactions)) = charge_totals(&page) {
        println!(
            "  group commit: {:.1} calls per charging transaction",
            charges / transactions.max(1.0)
        );
    }
}

/// The calls charged and the charging transactions so far, from a `/metrics` page.
fn charge_totals(page: &str) -> Option<(f64, f64)> {
    let value = |name: &str| {
        page.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    Some((
        value("tollgate_rate_charges_total")?,
        value("tollgate_rate_charge_transactions_total")?,
    ))
}

/// The body of `GET path`, on a connection of its own.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response.split_once("\r\n\r\n")?.1.to_owned())
}

fn http_scenario(dir: &Path, s: &Settings, headlines: &mut Headlines) {
    println!(
        "\n== http: tollgate serve --conformance-pack, {} keep-alive connections; {}",
        s.connections,
        s.timing()
    );
    let mut guarded = Series::new("tools/call test_simple_text, all guards");
    let mut floor = Series::new("server/discover (no guards, no database)");
    for run in 1..=s.runs {
        let db = dir.join(format!("http-{run}.db"));
        let admin = prepare_database(&db);
        let server = HttpServer::start(&db, &["--conformance-pack"], None, s);
        guarded.record(
            http_load(&server, &Requests::fixed(&admin.token, &guarded_call()), s).summarise(),
        );
        print_group_commit(server.addr);
        let mut figures = http_load(&server, &Requests::fixed(&admin.token, &discover()), s);
        // The peak so far belongs to the guarded load.
        figures.peak_rss_kib = None;
        floor.record(figures.summarise());
        drop(server);
        remove_database(&db);
    }
    guarded.print_median();
    floor.print_median();
    headlines.http = Some(guarded.median());
}

fn stdio_scenario(dir: &Path, s: &Settings, headlines: &mut Headlines) {
    println!(
        "\n== stdio: tollgate stdio --conformance-pack, {} in flight; {}",
        s.inflight,
        s.timing()
    );
    let call = json!({"name": "test_simple_text", "arguments": {}});
    let mut guarded = Series::new("tools/call test_simple_text, all guards");
    let mut floor = Series::new("ping (no guards, no charge)");
    for run in 1..=s.runs {
        let db = dir.join(format!("stdio-{run}.db"));
        let admin = prepare_database(&db);
        guarded.record(stdio_load(&db, &admin.token, ("tools/call", &call), None, s).summarise());
        let mut figures = stdio_load(&db, &admin.token, ("ping", &json!({})), None, s);
        figures.peak_rss_kib = None;
        floor.record(figures.summarise());
        remove_database(&db);
    }
    guarded.print_median();
    floor.print_median();
    headlines.stdio = Some(guarded.median());
}

fn invoice_scenario(dir: &Path, s: &Settings, headlines: &mut Headlines) {
    println!(
        "\n== invoice: get_invoice over HTTP on {} invoices, tollgate serve, {} keep-alive connections; {}",
        thousands(s.invoices as f64),
        s.connections,
        s.timing()
    );
    let db = dir.join("invoices.db");
    prepare_database(&db);
    let reader = create_key(&db, "bench-reader", "invoices:read");
    let started = Instant::now();
    let book = seed_invoices(&db, s.invoices).expect("seed the invoices");
    println!(
        "  seeded {} invoices ({} clients, {} lines, {} payments) in {:.1} s; database {:.0} MiB",
        book.ids.len(),
        book.clients,
        book.lines,
        book.payments,
        started.elapsed().as_secs_f64(),
        file_mib(&db)
    );
    let requests = Requests::invoices(&reader.token, book.ids);
    let mut series = Series::new("tools/call get_invoice, random invoices");
    for _ in 0..s.runs {
        let server = HttpServer::start(&db, &[], None, s);
        series.record(http_load(&server, &requests, s).summarise());
    }
    series.print_median();
    headlines.invoice = Some((series.median(), s.invoices));
    remove_database(&db);
}

fn bigdb_scenario(dir: &Path, s: &Settings, headlines: &mut Headlines) {
    println!(
        "\n== bigdb: the guarded HTTP load of `http` on a fresh database and on one with {} audit rows and {} rate windows ({} minutes of them per counter); {}",
        thousands(s.audit_rows as f64),
        thousands(s.counter_windows as f64),
        s.window_minutes,
        s.timing()
    );
    let big = dir.join("big.db");
    let admin = prepare_database(&big);
    let people = Population::new(&admin.public_id);
    let started = Instant::now();
    seed_audit_log(&big, s.audit_rows, &people).expect("seed the audit log");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "  seeded {} audit rows in {secs:.1} s ({} rows/s)",
        thousands(s.audit_rows as f64),
        thousands(s.audit_rows as f64 / secs.max(1e-9))
    );
    let windows = CounterWindows::new(s.counter_windows, s.window_minutes, &people);
    let started = Instant::now();
    let inserted = windows.insert(&big).expect("seed the rate counters");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "  seeded {} rate windows in {secs:.1} s ({} rows/s); {} of them expired",
        thousands(inserted as f64),
        thousands(inserted as f64 / secs.max(1e-9)),
        thousands(count_expired_windows(&big) as f64)
    );
    checkpoint(&big);
    println!("  database {:.0} MiB", file_mib(&big));
    let mut fresh = Series::new("tools/call, all guards, fresh database");
    let mut large = Series::new("tools/call, all guards, large database");
    for run in 1..=s.runs {
        let db = dir.join(format!("bigdb-fresh-{run}.db"));
        let fresh_admin = prepare_database(&db);
        let server = HttpServer::start(&db, &["--conformance-pack"], None, s);
        fresh.record(
            http_load(
                &server,
                &Requests::fixed(&fresh_admin.token, &guarded_call()),
                s,
            )
            .summarise(),
        );
        drop(server);
        remove_database(&db);
        if run > 1 {
            let restored = windows.insert(&big).expect("restore the pruned windows");
            println!(
                "  put back {} pruned rate windows",
                thousands(restored as f64)
            );
        }
        let server = HttpServer::start(&big, &["--conformance-pack"], None, s);
        large.record(
            http_load(&server, &Requests::fixed(&admin.token, &guarded_call()), s).summarise(),
        );
        drop(server);
        println!(
            "  expired rate windows left after the run: {}",
            thousands(count_expired_windows(&big) as f64)
        );
    }
    fresh.print_median();
    large.print_median();
    let (f, l) = (fresh.median(), large.median());
    println!(
        "  large database: {:.1} % of the fresh throughput ({:+.1} %)",
        100.0 * l.calls_per_sec / f.calls_per_sec.max(1e-9),
        100.0 * (l.calls_per_sec / f.calls_per_sec.max(1e-9) - 1.0)
    );
    headlines.bigdb = Some((f, l));
    remove_database(&big);
}

fn coldstart_scenario(dir: &Path, s: &Settings, headlines: &mut Headlines) {
    println!(
        "\n== coldstart: {} starts of tollgate serve on an initialised database, until GET /healthz answers 200 (not pinned)",
        s.starts
    );
    let db = dir.join("coldstart.db");
    prepare_database(&db);
    let mut times = Vec::new();
    for start in 1..=s.starts {
        match time_cold_start(&db) {
            Some(t) => {
                println!("  start {start:>2}: {:.1} ms", ms(t));
                times.push(t);
            }
            None => println!("  start {start:>2}: no 200 from /healthz within 10 s"),
        }
    }
    if let Some(max) = times.iter().max().copied() {
        let median = Duration::from_secs_f64(median(times.iter().map(Duration::as_secs_f64)));
        println!(
            "  median {:.1} ms, max {:.1} ms ({} of {} starts answered)",
            ms(median),
            ms(max),
            times.len(),
            s.starts
        );
        headlines.coldstart = Some((median, max, s.starts));
    }
    remove_database(&db);
}

/// From spawning `tollgate serve` to its first 200 on `/healthz`; the server is stopped
/// afterwards.
fn time_cold_start(db: &Path) -> Option<Duration> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new(bin());
    cmd.arg("--database")
        .arg(db)
        .args(["serve", "--listen", &addr.to_string()])
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TOKEN")
        .env_remove(SKIP_VAR)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null());
    let started = Instant::now();
    let mut server = Running(cmd.spawn().expect("spawn tollgate serve"));
    let deadline = started + Duration::from_secs(10);
    while Instant::now() < deadline {
        if healthz_ok(addr) {
            return Some(started.elapsed());
        }
        if matches!(server.0.try_wait(), Ok(Some(_))) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// One `GET /healthz` on a new connection: did it answer 200?
fn healthz_ok(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).is_ok() && status.starts_with("HTTP/1.1 200")
}

fn guards_scenario(dir: &Path, s: &Settings) {
    if !cfg!(feature = "bench-switches") {
        println!(
            "\n== guards: skipped; leaving guard steps out needs a bench-switches build: \
             cargo bench --features bench-switches,conformance-pack --bench load -- --only guards"
        );
        return;
    }
    println!(
        "\n== guards: the guarded loads of `http` and `stdio` with the chain built without one step ({SKIP_VAR}); {}",
        s.timing()
    );
    let configs: Vec<Option<&str>> = std::iter::once(None).chain(GUARDS.map(Some)).collect();
    let label = |transport: &str, skip: Option<&str>| match skip {
        None => format!("{transport} tools/call, all guards on"),
        Some(step) => format!("{transport} tools/call, without {step}"),
    };
    let mut http: Vec<Series> = configs
        .iter()
        .map(|c| Series::new(label("HTTP", *c)))
        .collect();
    let mut stdio: Vec<Series> = configs
        .iter()
        .map(|c| Series::new(label("stdio", *c)))
        .collect();
    let call = json!({"name": "test_simple_text", "arguments": {}});
    for run in 1..=s.runs {
        for (i, skip) in configs.iter().enumerate() {
            let db = dir.join(format!("guards-http-{run}-{i}.db"));
            let admin = prepare_database(&db);
            let server = HttpServer::start(&db, &["--conformance-pack"], *skip, s);
            http[i].record(
                http_load(&server, &Requests::fixed(&admin.token, &guarded_call()), s).summarise(),
            );
            drop(server);
            remove_database(&db);
        }
        for (i, skip) in configs.iter().enumerate() {
            let db = dir.join(format!("guards-stdio-{run}-{i}.db"));
            let admin = prepare_database(&db);
            stdio[i]
                .record(stdio_load(&db, &admin.token, ("tools/call", &call), *skip, s).summarise());
            remove_database(&db);
        }
    }
    for series in http.iter().chain(&stdio) {
        series.print_median();
    }
    print_guard_table(&configs, &http, &stdio, s.runs);
}

/// Each guard's cost: the CPU per call it saves when switched off.
fn print_guard_table(configs: &[Option<&str>], http: &[Series], stdio: &[Series], runs: usize) {
    println!(
        "\nGuard costs (medians of {runs}; cost = server CPU per call with all guards on minus with the guard off):\n"
    );
    println!(
        "| guard off | HTTP calls/s | HTTP p99 | HTTP CPU/call | HTTP cost | stdio calls/s | stdio p99 | stdio CPU/call | stdio cost |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let (http_all, stdio_all) = (http[0].median(), stdio[0].median());
    for (i, skip) in configs.iter().enumerate() {
        let (h, st) = (http[i].median(), stdio[i].median());
        let cost = |all: &RunFigures, off: &RunFigures| match (skip, all.cpu_us, off.cpu_us) {
            (Some(_), Some(a), Some(o)) => format!("{:.1} µs", a - o),
            _ => "—".to_owned(),
        };
        let cpu = |f: &RunFigures| f.cpu_us.map_or("—".to_owned(), |us| format!("{us:.1} µs"));
        println!(
            "| {} | {} | {:.3} ms | {} | {} | {} | {:.3} ms | {} | {} |",
            skip.unwrap_or("none (all on)"),
            thousands(h.calls_per_sec),
            ms(h.p99),
            cpu(&h),
            cost(&http_all, &h),
            thousands(st.calls_per_sec),
            ms(st.p99),
            cpu(&st),
            cost(&stdio_all, &st)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Seeding: the invoice book

/// Clients of the seeded invoice book.
const BOOK_CLIENTS: usize = 2_000;
/// Control letters of a Spanish DNI, indexed by the number mod 23.
const DNI_LETTERS: &[u8; 23] = b"TRWAGMYFPDXBNJZSQVHLCKE";
const LINE_TEXTS: [&str; 8] = [
    "Mantenimiento mensual de equipos",
    "Horas de consultoría",
    "Licencia de software (anual)",
    "Material de oficina",
    "Transporte y entrega",
    "Diseño gráfico",
    "Revisión de instalaciones",
    "Formación del personal",
];

/// What [`seed_invoices`] wrote.
struct InvoiceBook {
    ids: Vec<String>,
    clients: usize,
    lines: usize,
    payments: usize,
}

/// Fills the invoicing tables with `count` invoices, in one transaction, through the same
/// pricing and SQL functions as the tools.
fn seed_invoices(db: &Path, count: usize) -> Result<InvoiceBook, StoreError> {
    open_store(db).in_transaction(|tx| {
        let clients = seed_clients(tx, BOOK_CLIENTS.min(count))?;
        let mut book = InvoiceBook {
            ids: Vec::with_capacity(count),
            clients: clients.len(),
            lines: 0,
            payments: 0,
        };
        let mut rng = SplitMix64(0x1_2024);
        let today = Date::today(&Clock::System);
        // Three years of invoices in issue order, so each series' dates never go back.
        let span = 3 * 365;
        for i in 0..count {
            let days_ago = span - (i * span as usize / count) as i64;
            let client = &clients[rng.index(clients.len())];
            seed_invoice(tx, client, today, days_ago, &mut rng, &mut book)?;
        }
        Ok(book)
    })
}

fn seed_clients(tx: &tollgate::store::Tx<'_>, count: usize) -> Result<Vec<Client>, StoreError> {
    let mut clients = Vec::with_capacity(count);
    for i in 0..count {
        let number = 10_000_000 + i * 3_677;
        let nif = format!("{number:08}{}", char::from(DNI_LETTERS[number % 23]));
        let tax_id = TaxId::parse(&nif).expect("a valid NIF");
        let name = if i % 3 == 0 {
            format!("Cliente {i:04} García López")
        } else {
            format!("Comercial {i:04} S.L.")
        };
        let client = Client {
            id: ClientId::generate(),
            name,
            tax_id: Some(tax_id.as_str().to_owned()),
            email: Some(format!("facturas{i}@cliente.example")),
            address: Some(format!("Calle Mayor {}, 28013 Madrid", i % 200 + 1)),
        };
        invoice_db::insert_client(tx, Book::Live.as_str(), &client, Clock::System.unix_secs())?;
        clients.push(client);
    }
    Ok(clients)
}

fn seed_line(rng: &mut SplitMix64, simplified: bool) -> Line {
    let pricing = if simplified {
        LinePricing {
            quantity: 1 + rng.below(5) as i64,
            unit_price_cents: 500 + rng.below(3_500) as i64,
            discount_percent: 0,
            vat_rate: [10, 21][rng.index(2)],
            withholding_rate: 0,
        }
    } else {
        LinePricing {
            quantity: 1 + rng.below(20) as i64,
            unit_price_cents: 500 + rng.below(150_000) as i64,
            discount_percent: [0, 0, 0, 5, 10][rng.index(5)],
            vat_rate: [21, 21, 21, 10, 4][rng.index(5)],
            withholding_rate: [0, 0, 0, 15][rng.index(4)],
        }
    };
    Line {
        description: LINE_TEXTS[rng.index(LINE_TEXTS.len())].to_owned(),
        pricing,
        amounts: pricing.amounts().expect("line amounts fit"),
    }
}

/// One invoice issued `days_ago` (2 % drafts, 10 % simplified), with its payments: most
/// invoices older than 45 days are paid, a few others partly.
fn seed_invoice(
    tx: &tollgate::store::Tx<'_>,
    client: &Client,
    today: Date,
    days_ago: i64,
    rng: &mut SplitMix64,
    book: &mut InvoiceBook,
) -> Result<(), StoreError> {
    let draft = rng.chance(20);
    let simplified = !draft && rng.chance(100);
    let lines: Vec<Line> = if simplified {
        vec![seed_line(rng, true)]
    } else {
        (0..1 + rng.index(4))
            .map(|_| seed_line(rng, false))
            .collect()
    };
    let totals = Totals::sum(lines.iter().map(|l| &l.amounts)).expect("totals fit");
    let (kind, series) = if simplified {
        (InvoiceKind::Simplified, "S")
    } else {
        (InvoiceKind::Full, "F")
    };
    let issue = today.add_days(-days_ago);
    let mut invoice = Invoice {
        notes: rng
            .chance(100)
            .then(|| "Pago por transferencia.".to_owned()),
        ..Invoice::new_draft(
            client.id.clone(),
            client.name.clone(),
            kind,
            series.to_owned(),
            lines,
            totals,
        )
    };
    if !draft {
        let issue_date = issue.to_string();
        invoice.number = Some(invoice_db::next_number(
            tx,
            Book::Live.as_str(),
            series,
            &issue_date,
        )?);
        invoice.status = InvoiceStatus::Issued;
        invoice.issue_date = Some(issue_date);
        invoice.due_date = Some(issue.add_days(30).to_string());
        invoice.recipient_name = Some(client.name.clone());
        invoice.recipient_tax_id = client.tax_id.clone();
    }
    invoice_db::insert_invoice(tx, Book::Live.as_str(), &invoice, Clock::System.unix_secs())?;
    book.lines += invoice.lines.len();
    book.ids.push(invoice.id.as_str().to_owned());
    let total = invoice.totals.total_cents;
    let payment = if draft || total <= 0 {
        None
    } else if days_ago > 45 && rng.chance(900) {
        Some((total, issue.add_days(1 + rng.below(44) as i64)))
    } else if rng.chance(100) {
        Some((
            total / 2,
            issue.add_days(rng.below(days_ago as u64 + 1) as i64),
        ))
    } else {
        None
    };
    if let Some((amount_cents, paid_on)) = payment.filter(|(amount, _)| *amount > 0) {
        let methods = [
            PaymentMethod::Transfer,
            PaymentMethod::Transfer,
            PaymentMethod::DirectDebit,
            PaymentMethod::Card,
        ];
        invoice_db::insert_payment(
            tx,
            Book::Live.as_str(),
            &Payment {
                id: PaymentId::generate(),
                invoice_id: invoice.id.clone(),
                amount_cents,
                currency: invoice.currency.clone(),
                paid_on: paid_on.to_string(),
                method: methods[rng.index(methods.len())],
                reference: invoice.number.as_ref().map(|n| format!("TRF {n}")),
            },
            Clock::System.unix_secs(),
        )?;
        book.payments += 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Seeding: a large audit log and many rate windows

/// Rows per seeding transaction.
const SEED_CHUNK: u64 = 500_000;
/// The seeding connection's page cache: 256 MiB keeps the index pages being filled hot.
const SEED_CACHE_KIB: i64 = 262_144;

/// Who calls in the seeded history: 50 API keys (the first is the bench's own admin key),
/// the first five of them OAuth access tokens of five clients.
struct Population {
    credentials: Vec<String>,
    clients: Vec<String>,
}

impl Population {
    fn new(admin_public_id: &str) -> Population {
        let mut rng = SplitMix64(0x0AD1_7000);
        let mut credentials = vec![admin_public_id.to_owned()];
        credentials.extend((1..50).map(|_| rng.hex20()));
        let clients = (0..5).map(|_| format!("client{}", rng.hex20())).collect();
        Population {
            credentials,
            clients,
        }
    }
}

/// Tools called, per thousand calls.
const AUDIT_TOOLS: [(&str, u64); 16] = [
    ("get_invoice", 300),
    ("search_invoices", 200),
    ("search_clients", 100),
    ("get_client", 100),
    ("list_payments", 50),
    ("create_invoice", 60),
    ("issue_invoice", 40),
    ("record_payment", 40),
    ("update_invoice", 30),
    ("create_client", 30),
    ("send_invoice", 20),
    ("update_client", 10),
    ("export_invoices", 10),
    ("void_invoice", 5),
    ("delete_invoice", 3),
    ("delete_client", 2),
];

/// Outcomes of authenticated calls, per thousand.
const AUDIT_OUTCOMES: [(&str, u64); 6] = [
    ("ok", 960),
    ("rate_limited", 15),
    ("invoice_not_found", 10),
    ("insufficient_scope", 5),
    ("invalid_params", 5),
    ("mcp_guardrail_violation", 5),
];

/// Appends `rows` audit rows spread over the six months up to an hour ago.
fn seed_audit_log(db: &Path, rows: u64, people: &Population) -> rusqlite::Result<()> {
    const SPAN_MS: u64 = 182 * 24 * 3600 * 1000;
    let mut conn = sqlite(db);
    let now_ms = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("milliseconds fit");
    let first_ms = now_ms - 3_600_000 - SPAN_MS as i64;
    let mut rng = SplitMix64(0xA0D1_7106);
    let mut done = 0;
    while done < rows {
        let end = (done + SEED_CHUNK).min(rows);
        sqlite_write(&mut conn, |tx| {
            tx.pragma_update(None, "cache_size", -SEED_CACHE_KIB)?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO audit_log (at, request_id, credential_id, client_id, tool, outcome,
                     duration_us, transport) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for i in done..end {
                let at = first_ms + (u128::from(i) * u128::from(SPAN_MS) / u128::from(rows)) as i64;
                let who = rng.index(people.credentials.len());
                // One call in 200 presents a bad token: no credential, `invalid_token`.
                let authenticated = !rng.chance(5);
                let outcome = if authenticated {
                    rng.pick(&AUDIT_OUTCOMES)
                } else {
                    "invalid_token"
                };
                let duration_us = match outcome {
                    "ok" => {
                        150 + rng.below(2_500)
                            + if rng.chance(10) {
                                rng.below(200_000)
                            } else {
                                0
                            }
                    }
                    _ => 20 + rng.below(300),
                };
                let request_id = if rng.chance(100) {
                    format!("\"{:08x}\"", rng.next() as u32)
                } else {
                    (i % 50_000 + 1).to_string()
                };
                insert.execute(params![
                    at,
                    request_id,
                    authenticated.then(|| people.credentials[who].as_str()),
                    people.clients.get(who).filter(|_| authenticated),
                    rng.pick(&AUDIT_TOOLS),
                    outcome,
                    duration_us as i64,
                    if rng.chance(700) { "http" } else { "stdio" },
                ])?;
            }
            Ok(())
        })?;
        done = end;
    }
    Ok(())
}

/// The category buckets (per credential, one-minute windows).
const CATEGORIES: [&str; 5] = ["read", "write", "destructive", "send", "generate"];

/// Minute windows per counter seeded by `bigdb` (`--window-minutes`): from the
/// current minute back, so those past the two-hour retention are the pruner's work — one
/// minute's worth in steady state (the pruner runs once a minute), more to see it catch up
/// with a backlog.
const WINDOW_MINUTES: u64 = 121;

/// The rate-counter table of a large installation in steady state: `count` one-minute
/// windows of many credentials' category buckets, from the current minute back
/// `minutes` minutes (those past the two-hour retention wait for the pruner), plus the plan's hour
/// windows.
struct CounterWindows {
    count: u64,
    /// (bucket, key, window length in seconds).
    counters: Vec<(&'static str, String, i64)>,
    /// The newest window start of each length.
    newest_minute: i64,
    newest_hour: i64,
}

impl CounterWindows {
    fn new(count: u64, minutes: u64, people: &Population) -> CounterWindows {
        let mut counters = Vec::new();
        for credential in &people.credentials {
            for category in CATEGORIES {
                counters.push((category, credential.clone(), 60));
            }
        }
        for client in &people.clients {
            counters.push(("client", client.clone(), 60));
        }
        // Enough more credentials that every counter holds about `minutes` windows.
        let wanted = usize::try_from(count.div_ceil(minutes)).unwrap_or(usize::MAX);
        let mut extra = 0usize;
        while counters.len() < wanted {
            let key = format!("bulk{extra:08}");
            counters.push((CATEGORIES[extra % CATEGORIES.len()], key, 60));
            extra += 1;
        }
        counters.push(("plan", "pro".to_owned(), 3600));
        let newest = Clock::System.unix_secs();
        CounterWindows {
            count,
            counters,
            newest_minute: newest - newest.rem_euclid(60),
            newest_hour: newest - newest.rem_euclid(3600),
        }
    }

    /// Inserts the windows that are missing (all of them the first time, the pruned ones
    /// later); returns how many went in.
    fn insert(&self, db: &Path) -> rusqlite::Result<usize> {
        let mut conn = sqlite(db);
        let mut rng = SplitMix64(0xC0_FFEE);
        let per_round = self.counters.len() as u64;
        let (mut done, mut inserted) = (0, 0);
        while done < self.count {
            let end = (done + SEED_CHUNK).min(self.count);
            inserted += sqlite_write(&mut conn, |tx| {
                tx.pragma_update(None, "cache_size", -SEED_CACHE_KIB)?;
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO rate_counters (bucket, key, window_start, count)
                     VALUES (?1, ?2, ?3, ?4)",
                )?;
                let mut inserted = 0;
                for i in done..end {
                    let (bucket, key, length) = &self.counters[(i % per_round) as usize];
                    let age = (i / per_round) as i64 * length;
                    let newest = if *length == 60 {
                        self.newest_minute
                    } else {
                        self.newest_hour
                    };
                    let count = 1 + rng.below(120) as i64;
                    inserted += insert.execute(params![bucket, key, newest - age, count])?;
                }
                Ok(inserted)
            })?;
            done = end;
        }
        Ok(inserted)
    }
}

fn count_expired_windows(db: &Path) -> i64 {
    let cutoff = Clock::System.unix_secs() - RETENTION_SECS;
    sqlite(db)
        .query_row(
            "SELECT count(*) FROM rate_counters WHERE window_start < ?1",
            [cutoff],
            |r| r.get(0),
        )
        .expect("count the expired windows")
}

/// Moves everything from the WAL into the database file, so the server starts clean.
fn checkpoint(db: &Path) {
    sqlite(db)
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

// ---------------------------------------------------------------------------------------
// The limiter alone

/// Charges from `threads` callers at once for `s.measure` (after `s.warmup`).
fn limiter_load(store: &Store, threads: usize, s: &Settings) -> (LoadFigures, f64) {
    let limiter = Limiter::new(store.clone(), Clock::System);
    let request = ChargeRequest {
        credential_id: "benchkey0001".to_owned(),
        client_id: None,
        category: Category::Read,
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
                        let outcome = limiter.charge(request.clone());
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
    let mut figures = LoadFigures::new(s.measure.as_secs_f64());
    for (latencies, errors) in per_thread {
        figures.calls += latencies.len();
        figures.errors += errors;
        figures.latencies.extend(latencies);
    }
    (figures, charges as f64 / transactions as f64)
}

fn limiter_scenario(dir: &Path, s: &Settings) {
    println!(
        "\n== limiter: Limiter::charge in-process (one credential; category + plan buckets); {} s warm-up + {} s measured, once",
        s.warmup.as_secs(),
        s.measure.as_secs()
    );
    for threads in [1, 4, 16, 64] {
        let path = dir.join(format!("limiter-{threads}.db"));
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
            &["limits", "set", "--plan", "pro", "--per-hour", HUGE_LIMIT],
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
                HUGE_LIMIT,
            ],
        );
        let (figures, per_tx) = limiter_load(&store, threads, s);
        let label = format!("GroupCommit, {threads} callers ({per_tx:.1} charges/tx)");
        println!("  {label:<46} {:<9} {}", "", figures.summarise().line());
        drop(store);
        remove_database(&path);
    }
}

// ---------------------------------------------------------------------------------------
// Summary

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "no" }
}

/// `(N errors)` after a figure whose runs had errors.
fn errors_note(f: &RunFigures) -> String {
    if f.errors == 0 {
        String::new()
    } else {
        format!(" ({} errors)", f.errors)
    }
}

/// The headline figures and their targets, as a markdown table.
fn print_summary(h: &Headlines, s: &Settings) {
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut row = |figure: String, measured: String, target: &str, ok: bool| {
        rows.push([figure, measured, target.to_owned(), met(ok).to_owned()]);
    };
    if let Some(f) = &h.http {
        let clean = f.errors == 0;
        row(
            "HTTP, guarded tools/call: throughput".into(),
            format!("{} calls/s{}", thousands(f.calls_per_sec), errors_note(f)),
            "≥ 29 000 calls/s",
            clean && f.calls_per_sec >= TARGET_HTTP_CALLS,
        );
        row(
            "HTTP, guarded tools/call: p99".into(),
            format!("{:.3} ms", ms(f.p99)),
            "≤ 2 ms",
            ms(f.p99) <= TARGET_HTTP_P99_MS,
        );
        let rss = f.rss_kib.map_or(f64::NAN, mib);
        row(
            "HTTP, guarded tools/call: server peak RSS".into(),
            format!("{rss:.1} MiB"),
            "≤ 64 MiB",
            rss <= TARGET_HTTP_RSS_MIB,
        );
    }
    if let Some(f) = &h.stdio {
        row(
            "stdio, guarded tools/call: throughput".into(),
            format!("{} calls/s{}", thousands(f.calls_per_sec), errors_note(f)),
            "≥ 50 000 calls/s",
            f.errors == 0 && f.calls_per_sec >= TARGET_STDIO_CALLS,
        );
        row(
            "stdio, guarded tools/call: p99".into(),
            format!("{:.3} ms", ms(f.p99)),
            "≤ 5 ms",
            ms(f.p99) <= TARGET_STDIO_P99_MS,
        );
    }
    if let Some((f, invoices)) = &h.invoice {
        row(
            format!(
                "HTTP, get_invoice on {} invoices",
                thousands(*invoices as f64)
            ),
            format!(
                "{} calls/s (p99 {:.3} ms){}",
                thousands(f.calls_per_sec),
                ms(f.p99),
                errors_note(f)
            ),
            "≥ 15 000 calls/s",
            f.errors == 0 && f.calls_per_sec >= TARGET_INVOICE_CALLS,
        );
    }
    if let Some((fresh, large)) = &h.bigdb {
        let fall = 100.0 * (1.0 - large.calls_per_sec / fresh.calls_per_sec.max(1e-9));
        row(
            format!(
                "HTTP, guarded tools/call: {} audit rows + {} rate windows vs fresh",
                thousands(s.audit_rows as f64),
                thousands(s.counter_windows as f64)
            ),
            format!(
                "{} vs {} calls/s: falls {fall:.1} %{}",
                thousands(large.calls_per_sec),
                thousands(fresh.calls_per_sec),
                errors_note(large)
            ),
            "falls ≤ 10 %",
            large.errors == 0 && fall <= TARGET_BIGDB_FALL_PERCENT,
        );
    }
    if let Some((median, max, starts)) = &h.coldstart {
        row(
            "cold start to a served GET /healthz".into(),
            format!(
                "median {:.1} ms, max {:.1} ms ({starts} starts)",
                ms(*median),
                ms(*max)
            ),
            "≤ 50 ms",
            ms(*median) <= TARGET_COLD_START_MS,
        );
    }
    if let Some(p) = &h.provider {
        let ratio = p.cpu_ratio();
        row(
            "HTTP, guarded tools/call with a provider JWT: server CPU per call, to an API key's"
                .into(),
            format!(
                "{} ({} µs vs {} µs){}",
                ratio.map_or("–".to_owned(), |r| format!("×{r:.3}")),
                us_or_dash(p.token.cpu_us),
                us_or_dash(p.key.cpu_us),
                errors_note(&p.token)
            ),
            "≤ ×1.10",
            p.token.errors == 0 && ratio.is_some_and(|r| r <= provider::TARGET_PROVIDER_CPU_RATIO),
        );
        rows.push([
            "HTTP, the same with a JWT naming its OAuth client (one more bucket)".into(),
            format!(
                "{} µs/call{}",
                us_or_dash(p.with_client.cpu_us),
                errors_note(&p.with_client)
            ),
            "–".into(),
            "–".into(),
        ]);
    }
    if let Some(b) = &h.backend {
        rows.extend(b.goals());
    }
    if let Some(r) = &h.rest {
        rows.push(r.goal());
    }
    if let Some(t) = &h.telemetry {
        rows.extend(t.goals());
    }
    if let Some(p) = &h.policy {
        rows.push(p.goal());
    }
    if let Some(p) = &h.postgres {
        for (label, f) in [
            ("SQLite file, one node", &p.sqlite),
            ("PostgreSQL, one node", &p.one_node),
            ("PostgreSQL, two nodes on one database", &p.two_nodes),
        ] {
            rows.push([
                format!("HTTP, guarded tools/call on {label}"),
                format!(
                    "{} calls/s, p50 {:.3} ms, p99 {:.3} ms, CPU {} µs/call{}",
                    thousands(f.calls_per_sec),
                    ms(f.p50),
                    ms(f.p99),
                    us_or_dash(f.cpu_us),
                    errors_note(f)
                ),
                "–".into(),
                "–".into(),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    println!(
        "\n## Summary\n\nMedians of {} run{} ({} s measured after {} s warm-up; HTTP {} keep-alive connections, stdio {} in flight; server pinned to CPU 0: {}).\n",
        s.runs,
        if s.runs == 1 { "" } else { "s" },
        s.measure.as_secs(),
        s.warmup.as_secs(),
        s.connections,
        s.inflight,
        s.pin
    );
    println!("| figure | measured | target | met |");
    println!("|---|---|---|---|");
    for [figure, measured, target, ok] in rows {
        println!("| {figure} | {measured} | {target} | {ok} |");
    }
}

fn main() {
    // The bench re-executed as one of its own servers serves and never comes back.
    serve::serve_if_asked();
    let s = Settings::from_args();
    // These scenarios call the conformance fixtures (`test_simple_text` and friends), which
    // a binary carries only when built with the `conformance-pack` feature.
    let needs_fixtures = [
        "http",
        "stdio",
        "provider",
        "bigdb",
        "rest",
        "telemetry",
        "policy",
        "postgres",
        "guards",
    ];
    if !tollgate::HAS_CONFORMANCE_PACK
        && std::env::var_os("TG_BENCH_BIN").is_none()
        && needs_fixtures.iter().any(|name| s.wants(name))
    {
        eprintln!(
            "load: the http, stdio, provider, bigdb, rest, telemetry, policy, postgres and guards scenarios need the conformance fixtures: \
             run `cargo bench --features conformance-pack --bench load` (with \
             `--only invoice,coldstart,backend,limiter` they are not needed)"
        );
        std::process::exit(2);
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut headlines = Headlines::default();
    if s.wants("http") {
        http_scenario(dir.path(), &s, &mut headlines);
    }
    if s.wants("stdio") {
        stdio_scenario(dir.path(), &s, &mut headlines);
    }
    if s.wants("provider") {
        headlines.provider = Some(provider::provider_scenario(dir.path(), &s));
    }
    if s.wants("invoice") {
        invoice_scenario(dir.path(), &s, &mut headlines);
    }
    if s.wants("bigdb") {
        bigdb_scenario(dir.path(), &s, &mut headlines);
    }
    if s.wants("coldstart") {
        coldstart_scenario(dir.path(), &s, &mut headlines);
    }
    if s.wants("backend") {
        headlines.backend = forwarding::backend_scenario(dir.path(), &s);
    }
    if s.wants("rest") {
        headlines.rest = rest::rest_scenario(dir.path(), &s);
    }
    if s.wants("telemetry") {
        headlines.telemetry = Some(telemetry::telemetry_scenario(dir.path(), &s));
    }
    if s.wants("policy") {
        headlines.policy = Some(policy::policy_scenario(dir.path(), &s));
    }
    if s.wants("postgres") {
        headlines.postgres = postgres::postgres_scenario(dir.path(), &s);
    }
    if s.wants("guards") {
        guards_scenario(dir.path(), &s);
    }
    if s.wants("limiter") {
        limiter_scenario(dir.path(), &s);
    }
    print_summary(&headlines, &s);
    println!(
        "\nThe whole benchmark took {:.0} s.",
        started.elapsed().as_secs_f64()
    );
}
