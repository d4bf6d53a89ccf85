//! The `backend` scenario: a `tools/call` forwarded to an upstream MCP server, against the
//! same upstream called directly and against a peer gateway in front of it.
//!
//! The upstream is the official Rust SDK's server (rmcp 3.11, stateless Streamable HTTP,
//! JSON responses; [`serve`]) with one read-only tool, `echo`. Three paths to it, each run on
//! new processes, all pinned to CPU 0 (the load generator elsewhere):
//!
//! - **direct** — `tools/call echo` on the upstream, as the gate's own client sends it
//!   (revision 2025-11-25, no session, a progress token in `_meta`);
//! - **tollgate** — `tools/call up_echo` on `tollgate serve` whose configuration has one
//!   backend, `up` (`kind = "mcp"`, `url` the upstream's), with every guard on as in `http`
//!   (a key with the scope `up:read`, its limits raised so nothing is refused);
//! - **mcp-proxy** — `tools/call up/echo` on mcp-proxy 0.6.0 ([`mcp_proxy`]) when it is
//!   installed, each connection on a session of its own.
//!
//! In each run the paths are measured in turn (each run starting with another), with
//! `--connections` connections and then with one connection (no queueing: the latency a
//! caller sees). After the paths with `--connections`, the upstream is called directly once
//! more, paced to the calls/s tollgate forwarded in that run: how much an upstream spends on
//! a call depends on how busy it is kept, so this separates the gate's effect on the
//! upstream from the load level's. Printed: calls/s, p50, p99, errors; the CPU µs per call of the process in
//! front (the upstream's when direct, else the gateway's) and the upstream's CPU µs per
//! call during each gateway's load; then the goals as ratios beside their targets.

use super::serve::{ECHO, Own};
use super::*;

/// The gate's one backend: the prefix of its tools and of their scopes.
const BACKEND_NAME: &str = "up";
/// How long a gate may take to listen and report its backend `ready`.
const BACKEND_READY_WAIT: Duration = Duration::from_secs(30);
/// What every call asks the upstream to echo.
const ECHO_TEXT: &str = "The quick brown fox jumps over the lazy dog.";
/// The protocol revision the gate speaks to an upstream (the last one with `initialize`),
/// which the direct load speaks too.
const UPSTREAM_PROTOCOL: &str = "2025-11-25";

// The goals, as ratios (and the one-connection latency, in ms).
/// tollgate's CPU per forwarded call, to the upstream's per direct call: at most.
pub(super) const TARGET_GATE_TO_UPSTREAM_CPU: f64 = 2.5;
/// tollgate's CPU per forwarded call, to mcp-proxy's: at most.
pub(super) const TARGET_GATE_TO_PROXY_CPU: f64 = 1.0;
/// Calls/s through tollgate, to calls/s through mcp-proxy: at least.
pub(super) const TARGET_GATE_TO_PROXY_CALLS: f64 = 1.2;
/// The upstream's CPU per call through tollgate, to its CPU per direct call: at most.
pub(super) const TARGET_UPSTREAM_CPU: f64 = 1.10;
/// With one connection, the p50 tollgate adds over direct: at most (ms).
pub(super) const TARGET_ADDED_P50_MS: f64 = 0.3;

/// A gateway's medians: its load (CPU and peak RSS its own) and the upstream's CPU per
/// call meanwhile.
#[derive(Clone, Copy)]
pub(super) struct Gateway {
    pub(super) load: RunFigures,
    pub(super) upstream_us: Option<f64>,
}

/// The three paths with one connection.
#[derive(Clone, Copy)]
pub(super) struct OneConnection {
    pub(super) direct: RunFigures,
    pub(super) tollgate: RunFigures,
    pub(super) proxy: Option<RunFigures>,
}

/// The scenario's medians, for the summary.
#[derive(Clone, Copy)]
pub(super) struct ForwardingFigures {
    /// The upstream called directly (its CPU is the upstream's).
    pub(super) direct: RunFigures,
    /// The upstream called directly at the rate tollgate forwarded calls to it.
    pub(super) direct_at_gate_rate: RunFigures,
    pub(super) tollgate: Gateway,
    /// `None` when mcp-proxy was not measured.
    pub(super) proxy: Option<Gateway>,
    pub(super) one: OneConnection,
}

impl ForwardingFigures {
    /// tollgate's CPU per forwarded call over the upstream's per direct call.
    pub(super) fn gate_to_upstream_cpu(&self) -> Option<f64> {
        Some(self.tollgate.load.cpu_us? / self.direct.cpu_us?)
    }

    /// tollgate's CPU per forwarded call over mcp-proxy's.
    pub(super) fn gate_to_proxy_cpu(&self) -> Option<f64> {
        Some(self.tollgate.load.cpu_us? / self.proxy?.load.cpu_us?)
    }

    /// Calls/s through tollgate over calls/s through mcp-proxy.
    pub(super) fn gate_to_proxy_calls(&self) -> Option<f64> {
        let proxy = self.proxy?.load.calls_per_sec;
        (proxy > 0.0).then(|| self.tollgate.load.calls_per_sec / proxy)
    }

    /// The upstream's CPU per call through tollgate over its CPU per direct call.
    pub(super) fn upstream_cpu(&self) -> Option<f64> {
        Some(self.tollgate.upstream_us? / self.direct.cpu_us?)
    }

    /// The upstream's CPU per call through tollgate over its CPU per direct call when
    /// called as often as tollgate called it.
    pub(super) fn upstream_cpu_at_gate_rate(&self) -> Option<f64> {
        Some(self.tollgate.upstream_us? / self.direct_at_gate_rate.cpu_us?)
    }

    /// With one connection, tollgate's p50 minus direct's, in ms.
    pub(super) fn added_p50_ms(&self) -> f64 {
        ms(self.one.tollgate.p50) - ms(self.one.direct.p50)
    }

    /// With one connection, mcp-proxy's p50 minus direct's, in ms.
    pub(super) fn proxy_added_p50_ms(&self) -> Option<f64> {
        Some(ms(self.one.proxy?.p50) - ms(self.one.direct.p50))
    }

    /// The goals: what, the measured ratio (or ms) as text, the target, met.
    pub(super) fn goals(&self) -> Vec<[String; 4]> {
        let clean = self.tollgate.load.errors == 0 && self.direct.errors == 0;
        let ratio = |r: Option<f64>| r.map_or_else(|| "–".to_owned(), |r| format!("×{r:.2}"));
        let mut goals = vec![
            [
                "forwarded to an rmcp upstream: tollgate's CPU per call / the upstream's per direct call".to_owned(),
                format!(
                    "{} ({} µs vs {} µs){}",
                    ratio(self.gate_to_upstream_cpu()),
                    us_or_dash(self.tollgate.load.cpu_us),
                    us_or_dash(self.direct.cpu_us),
                    errors_note(&self.tollgate.load)
                ),
                format!("≤ ×{TARGET_GATE_TO_UPSTREAM_CPU}"),
                met(clean
                    && self
                        .gate_to_upstream_cpu()
                        .is_some_and(|r| r <= TARGET_GATE_TO_UPSTREAM_CPU))
                .to_owned(),
            ],
            [
                "forwarded to an rmcp upstream: the upstream's CPU per call through tollgate / direct".to_owned(),
                format!(
                    "{} ({} µs vs {} µs); against direct calls at tollgate's rate ({} µs): {}",
                    ratio(self.upstream_cpu()),
                    us_or_dash(self.tollgate.upstream_us),
                    us_or_dash(self.direct.cpu_us),
                    us_or_dash(self.direct_at_gate_rate.cpu_us),
                    ratio(self.upstream_cpu_at_gate_rate())
                ),
                format!("≤ ×{TARGET_UPSTREAM_CPU:.2}"),
                met(clean && self.upstream_cpu().is_some_and(|r| r <= TARGET_UPSTREAM_CPU))
                    .to_owned(),
            ],
        ];
        match &self.proxy {
            Some(proxy) => {
                let clean = clean && proxy.load.errors == 0;
                goals.push([
                    "forwarded: tollgate's CPU per call / mcp-proxy's".to_owned(),
                    format!(
                        "{} ({} µs vs {} µs){}",
                        ratio(self.gate_to_proxy_cpu()),
                        us_or_dash(self.tollgate.load.cpu_us),
                        us_or_dash(proxy.load.cpu_us),
                        errors_note(&proxy.load)
                    ),
                    format!("≤ ×{TARGET_GATE_TO_PROXY_CPU:.1}"),
                    met(clean
                        && self
                            .gate_to_proxy_cpu()
                            .is_some_and(|r| r <= TARGET_GATE_TO_PROXY_CPU))
                    .to_owned(),
                ]);
                goals.push([
                    "forwarded: calls/s through tollgate / through mcp-proxy".to_owned(),
                    format!(
                        "{} ({} vs {} calls/s)",
                        ratio(self.gate_to_proxy_calls()),
                        thousands(self.tollgate.load.calls_per_sec),
                        thousands(proxy.load.calls_per_sec)
                    ),
                    format!("≥ ×{TARGET_GATE_TO_PROXY_CALLS:.1}"),
                    met(clean
                        && self
                            .gate_to_proxy_calls()
                            .is_some_and(|r| r >= TARGET_GATE_TO_PROXY_CALLS))
                    .to_owned(),
                ]);
            }
            None => {
                for (what, target) in [
                    (
                        "forwarded: tollgate's CPU per call / mcp-proxy's",
                        format!("≤ ×{TARGET_GATE_TO_PROXY_CPU:.1}"),
                    ),
                    (
                        "forwarded: calls/s through tollgate / through mcp-proxy",
                        format!("≥ ×{TARGET_GATE_TO_PROXY_CALLS:.1}"),
                    ),
                ] {
                    goals.push([
                        what.to_owned(),
                        "not measured (mcp-proxy skipped, see above)".to_owned(),
                        target,
                        "–".to_owned(),
                    ]);
                }
            }
        }
        let added = self.added_p50_ms();
        goals.push([
            "forwarded, one connection: p50 added by tollgate over direct".to_owned(),
            format!(
                "{added:+.3} ms ({:.3} vs {:.3} ms){}",
                ms(self.one.tollgate.p50),
                ms(self.one.direct.p50),
                self.proxy_added_p50_ms()
                    .map_or_else(String::new, |p| format!("; mcp-proxy adds {p:+.3} ms"))
            ),
            format!("≤ {TARGET_ADDED_P50_MS} ms"),
            met(self.one.tollgate.errors == 0 && added <= TARGET_ADDED_P50_MS).to_owned(),
        ]);
        goals
    }
}

/// `tools/call` of `tool` with `arguments`, stateless (2026-07-28), as tollgate is called.
pub(super) fn tool_call_with(tool: &str, arguments: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments, "_meta": stateless_meta()}})
}

/// `tools/call echo` on the rmcp upstream, as the gate's client sends it (rmcp puts a
/// progress token on every request).
fn direct_call() -> Arc<Requests> {
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {UPSTREAM_PROTOCOL}\r\n"
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": ECHO, "arguments": {"text": ECHO_TEXT},
                                 "_meta": {"progressToken": 1}}});
    Arc::new(Requests::Fixed(with_body(&head, &body.to_string())))
}

/// The three routes to the upstream.
#[derive(Clone, Copy, PartialEq)]
enum Route {
    Direct,
    Tollgate,
    Proxy,
}

/// The upstream, the gate and (when installed) mcp-proxy, running.
struct Servers {
    upstream: HttpServer,
    gate: HttpServer,
    proxy: Option<HttpServer>,
    /// The gate's key (scope `up:read`), also mcp-proxy's bearer token.
    token: String,
    gate_db: PathBuf,
}

/// One route's figures over the runs, with `--connections` and with one connection.
struct Measured {
    many: Series,
    one: Series,
    /// The upstream's CPU µs per call during each run's load (gateways only).
    upstream_us: Vec<f64>,
}

impl Measured {
    fn new(label: &str, process: &'static str) -> Measured {
        Measured {
            many: Series::new(label).of(process),
            one: Series::new(format!("{label}, 1 conn.")).of(process),
            upstream_us: Vec::new(),
        }
    }

    fn gateway(&self) -> Gateway {
        Gateway {
            load: self.many.median(),
            upstream_us: (!self.upstream_us.is_empty())
                .then(|| median(self.upstream_us.iter().copied())),
        }
    }
}

pub(super) fn backend_scenario(dir: &Path, s: &Settings) -> Option<ForwardingFigures> {
    println!(
        "\n== backend: tools/call echo on an rmcp 3.11 upstream (stateless Streamable HTTP, \
         JSON responses) directly, forwarded by tollgate serve (backend `{BACKEND_NAME}`, all \
         guards) and by mcp-proxy 0.6.0; {} keep-alive connections, then 1; {}",
        s.connections,
        s.timing()
    );
    let mut proxy_bin = match mcp_proxy::find() {
        Ok(bin) => Some(bin),
        Err(why) => {
            println!("  mcp-proxy: skipped ({why})");
            None
        }
    };
    let one = Settings {
        connections: 1,
        ..s.clone()
    };
    let mut direct = Measured::new("direct: echo on the upstream", "upstream");
    // The upstream's CPU per call depends on how busy it is kept (a server woken for each
    // request spends more per request than one that finds several waiting): called
    // directly as often as tollgate called it, it shows what the gate itself asks of it.
    let mut paced = Series::new("direct: echo on the upstream, at tollgate's rate").of("upstream");
    let mut tollgate = Measured::new("tollgate: up_echo, all guards", "gate");
    let mut proxy = Measured::new("mcp-proxy: up/echo", "mcp-proxy");
    for run in 1..=s.runs {
        let servers = match start_servers(dir, run, &mut proxy_bin, s) {
            Ok(servers) => servers,
            Err(why) => {
                println!("  skipped: {why}");
                return None;
            }
        };
        let mut routes = vec![Route::Direct, Route::Tollgate];
        if servers.proxy.is_some() {
            routes.push(Route::Proxy);
        }
        // Each run starts with another route, so none always comes first.
        let turn = (run - 1) % routes.len();
        routes.rotate_left(turn);
        for (settings, single) in [(s, false), (&one, true)] {
            for &route in &routes {
                let measured = match route {
                    Route::Direct => &mut direct,
                    Route::Tollgate => &mut tollgate,
                    Route::Proxy => &mut proxy,
                };
                let series = if single {
                    &mut measured.one
                } else {
                    &mut measured.many
                };
                let upstream_us = measure(&servers, route, series, settings);
                if !single {
                    measured.upstream_us.extend(upstream_us);
                }
            }
            if !single && let Some(forwarded) = tollgate.many.runs.last() {
                let at_rate = Settings {
                    pace: Some(forwarded.calls_per_sec),
                    ..settings.clone()
                };
                measure(&servers, Route::Direct, &mut paced, &at_rate);
            }
        }
        stop(servers);
    }
    for measured in [&direct, &tollgate, &proxy] {
        measured.many.print_median();
    }
    paced.print_median();
    for measured in [&direct, &tollgate, &proxy] {
        measured.one.print_median();
    }
    let figures = ForwardingFigures {
        direct: direct.many.median(),
        direct_at_gate_rate: paced.median(),
        tollgate: tollgate.gateway(),
        proxy: (!proxy.many.runs.is_empty()).then(|| proxy.gateway()),
        one: OneConnection {
            direct: direct.one.median(),
            tollgate: tollgate.one.median(),
            proxy: (!proxy.one.runs.is_empty()).then(|| proxy.one.median()),
        },
    };
    for [what, measured, target, ok] in figures.goals() {
        println!("  {what}: {measured} (target {target}, met: {ok})");
    }
    Some(figures)
}

/// Starts the upstream, the gate and, when `proxy_bin` is some, mcp-proxy (which is
/// forgotten for the next runs when it does not start, saying why). `Err` when the gate does
/// not report its backend ready.
fn start_servers(
    dir: &Path,
    run: usize,
    proxy_bin: &mut Option<PathBuf>,
    s: &Settings,
) -> Result<Servers, String> {
    let upstream = serve::start(Own::Upstream, s);
    let url = format!("http://{}/mcp", upstream.addr);
    let gate_db = dir.join(format!("backend-gate-{run}.db"));
    prepare_database(&gate_db);
    let config = write_gate_config(dir, run, &url);
    let config = config.to_str().expect("a UTF-8 path");
    // A backend's scopes are known only with its configuration.
    let agent = create_key_with(
        &gate_db,
        "bench-agent",
        &format!("{BACKEND_NAME}:read"),
        &["--config", config],
    );
    let log = dir.join(format!("backend-gate-{run}.log"));
    let stderr = std::fs::File::create(&log).expect("create the gate's log");
    let mut gate = HttpServer::spawn(
        &gate_db,
        &["--config", config],
        None,
        s,
        Stdio::from(stderr),
    );
    wait_backend_ready(&mut gate, BACKEND_NAME, &log)?;
    let proxy = proxy_bin.as_ref().and_then(|bin| {
        let calls = proxy_calls(&agent.token);
        match mcp_proxy::start(bin, dir, run, (BACKEND_NAME, &url), &calls, s) {
            Ok(proxy) => Some(proxy),
            Err(why) => {
                println!("  mcp-proxy: skipped ({why})");
                None
            }
        }
    });
    if proxy.is_none() {
        *proxy_bin = None;
    }
    Ok(Servers {
        upstream,
        gate,
        proxy,
        token: agent.token,
        gate_db,
    })
}

/// `tools/call up/echo` on mcp-proxy with the bearer `token`.
fn proxy_calls(token: &str) -> mcp_proxy::SessionCalls {
    mcp_proxy::SessionCalls::new(
        token,
        &format!("{BACKEND_NAME}/{ECHO}"),
        &json!({"text": ECHO_TEXT}),
    )
}

/// One load on `route` with `s`'s connections, recorded in `series`; a gateway's load also
/// prints the upstream's CPU per call meanwhile, and returns it.
fn measure(servers: &Servers, route: Route, series: &mut Series, s: &Settings) -> Option<f64> {
    let token = &servers.token;
    let upstream = servers.upstream.pid();
    let (figures, upstream_us) = match route {
        Route::Direct => (http_load(&servers.upstream, &direct_call(), s), None),
        Route::Tollgate => {
            let call = Requests::fixed(
                token,
                &tool_call_with(
                    &format!("{BACKEND_NAME}_{ECHO}"),
                    &json!({"text": ECHO_TEXT}),
                ),
            );
            let (figures, others) = http_load_watching(&servers.gate, &call, s, &[upstream]);
            super::print_group_commit(servers.gate.addr);
            (figures, others.first().copied().flatten())
        }
        Route::Proxy => {
            let proxy = servers.proxy.as_ref().expect("mcp-proxy is running");
            let call = Arc::new(Requests::Session(proxy_calls(token)));
            let (figures, others) = http_load_watching(proxy, &call, s, &[upstream]);
            (figures, others.first().copied().flatten())
        }
    };
    let figures = figures.summarise();
    series.record(figures);
    if route != Route::Direct {
        let both = upstream_us.zip(figures.cpu_us).map(|(u, g)| u + g);
        println!(
            "  {:<46} {:<9} upstream CPU {} µs/call   gateway + upstream {} µs/call",
            "",
            "",
            us_or_dash(upstream_us),
            us_or_dash(both)
        );
    }
    upstream_us
}

/// Stops mcp-proxy and the gate, then the upstream, and removes the gate's database.
fn stop(servers: Servers) {
    let Servers {
        upstream,
        gate,
        proxy,
        gate_db,
        ..
    } = servers;
    drop(proxy);
    drop(gate);
    drop(upstream);
    remove_database(&gate_db);
}

/// Writes the gate's configuration: one `kind = "mcp"` backend over Streamable HTTP to
/// `url`.
fn write_gate_config(dir: &Path, run: usize, url: &str) -> PathBuf {
    let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
    let config = format!(
        "[[backends]]\nname = {name}\nkind = \"mcp\"\nurl = {url}\ntimeout_ms = 30000\n",
        name = quoted(BACKEND_NAME),
        url = quoted(url),
    );
    let path = dir.join(format!("backend-gate-{run}.toml"));
    std::fs::write(&path, config).expect("write the gate's configuration");
    path
}

/// Polls the gate's `/healthz` until it reports `backend` ready; `Err` with what was seen
/// when the gate exits first (with the last line it logged, from `log`) or the wait ends.
pub(super) fn wait_backend_ready(
    gate: &mut HttpServer,
    backend: &str,
    log: &Path,
) -> Result<(), String> {
    let deadline = Instant::now() + BACKEND_READY_WAIT;
    let mut seen = String::from("the gate did not answer GET /healthz");
    while Instant::now() < deadline {
        if let Some(status) = gate.exited() {
            return Err(format!(
                "the gate exited at start ({status}): {}",
                last_line(log).unwrap_or_else(|| "it logged nothing".into())
            ));
        }
        if let Some(state) =
            http_get(gate.addr, "/healthz").and_then(|b| backend_state(&b, backend))
        {
            if state == "ready" {
                return Ok(());
            }
            seen = format!("the gate's /healthz reports backend `{backend}` {state}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{seen} after {} s, not ready",
        BACKEND_READY_WAIT.as_secs()
    ))
}

/// `backend`'s state in a `/healthz` body (with its reason when it has one).
fn backend_state(body: &str, backend: &str) -> Option<String> {
    let health: Value = serde_json::from_str(body).ok()?;
    let line = health["backends"]
        .as_array()?
        .iter()
        .find(|b| b["name"] == backend)?;
    let state = line["state"].as_str()?;
    Some(match line["reason"].as_str() {
        Some(reason) if state != "ready" => format!("{state} ({reason})"),
        _ => state.to_owned(),
    })
}

/// The last line of text in `path` that is not blank.
pub(super) fn last_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
}
