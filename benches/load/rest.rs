//! The `rest` scenario: a call forwarded to a REST backend against a local guarded call, on
//! one `tollgate serve --conformance-pack` whose configuration has one `kind = "openapi"`
//! backend, `shop`: the bench's own REST server ([`serve`], `GET /items/{id}` answering a
//! small JSON object; pinned to CPU 0 beside the gate) described by an OpenAPI 3.1 document
//! written to the temporary directory. Its operation `getItem` is the tool `shop_get_item`
//! (a GET: category `read`, scope `shop:read`).
//!
//! Each run starts the REST server and the gate on a fresh database, waits (at most 30 s)
//! for the gate's `/healthz` to report the backend `ready`, then measures, in an order that
//! alternates from run to run, `tools/call test_simple_text` (local, every guard on, as in
//! `http`) and `tools/call shop_get_item` (the same guards, then the REST call), both with
//! the admin key. Prints both, the REST server's CPU per forwarded call, and the gate's CPU
//! per forwarded call as a ratio to its CPU per local call (target ≤ 2.5).

use super::forwarding::{tool_call_with, wait_backend_ready};
use super::serve::{GET_ITEM, Own};
use super::*;

/// The backend's name: the prefix of its tool and of the tool's scope.
const BACKEND_NAME: &str = "shop";
/// The forwarded call's CPU per call may be this many times the local call's at most.
pub(super) const TARGET_REST_CPU_RATIO: f64 = 2.5;

/// The medians of the local and the forwarded call (CPU and peak RSS the gate's), and the
/// REST server's CPU per forwarded call.
pub(super) struct RestFigures {
    pub(super) local: RunFigures,
    pub(super) forwarded: RunFigures,
    pub(super) backend_us: Option<f64>,
}

impl RestFigures {
    /// The gate's CPU per forwarded call over its CPU per local call.
    pub(super) fn cpu_ratio(&self) -> Option<f64> {
        Some(self.forwarded.cpu_us? / self.local.cpu_us?)
    }

    /// The goal: what, the measured ratio as text, the target, met.
    pub(super) fn goal(&self) -> [String; 4] {
        let ratio = self.cpu_ratio();
        [
            "REST backend: the gate's CPU per forwarded call / per local guarded call".to_owned(),
            format!(
                "{} ({} µs vs {} µs; {} vs {} calls/s){}",
                ratio.map_or_else(|| "–".to_owned(), |r| format!("×{r:.2}")),
                us_or_dash(self.forwarded.cpu_us),
                us_or_dash(self.local.cpu_us),
                thousands(self.forwarded.calls_per_sec),
                thousands(self.local.calls_per_sec),
                errors_note(&self.forwarded)
            ),
            format!("≤ ×{TARGET_REST_CPU_RATIO}"),
            met(self.forwarded.errors == 0
                && self.local.errors == 0
                && ratio.is_some_and(|r| r <= TARGET_REST_CPU_RATIO))
            .to_owned(),
        ]
    }
}

/// The operation's tool name: the backend's prefix and the `operationId` in snake case.
fn tool_name() -> String {
    let mut snake = String::new();
    for c in GET_ITEM.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    format!("{BACKEND_NAME}_{snake}")
}

/// Writes the backend's OpenAPI document and the gate's configuration naming it; returns
/// the configuration's path.
fn write_config(dir: &Path, run: usize, rest: SocketAddr) -> PathBuf {
    let document = dir.join(format!("rest-{run}.openapi.json"));
    std::fs::write(&document, serve::rest_document(rest).to_string())
        .expect("write the OpenAPI document");
    let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
    let config = format!(
        "[[backends]]\nname = {name}\nkind = \"openapi\"\nspec = {spec}\nbase_url = {base}\n\
         timeout_ms = 30000\n",
        name = quoted(BACKEND_NAME),
        spec = quoted(&document.to_string_lossy()),
        base = quoted(&format!("http://{rest}")),
    );
    let path = dir.join(format!("rest-gate-{run}.toml"));
    std::fs::write(&path, config).expect("write the gate's configuration");
    path
}

pub(super) fn rest_scenario(dir: &Path, s: &Settings) -> Option<RestFigures> {
    let tool = tool_name();
    println!(
        "\n== rest: tools/call {tool} forwarded to a REST backend (kind = \"openapi\", the \
         bench's own server) against the local tools/call test_simple_text, on one tollgate \
         serve --conformance-pack, all guards, {} keep-alive connections; {}",
        s.connections,
        s.timing()
    );
    let mut local = Series::new("local: test_simple_text, all guards").of("gate");
    let mut forwarded = Series::new(format!("forwarded: {tool}, all guards")).of("gate");
    let mut backend_us = Vec::new();
    for run in 1..=s.runs {
        let rest = serve::start(Own::Rest, s);
        let db = dir.join(format!("rest-{run}.db"));
        let admin = prepare_database(&db);
        let config = write_config(dir, run, rest.addr);
        let config = config.to_str().expect("a UTF-8 path");
        let log = dir.join(format!("rest-gate-{run}.log"));
        let stderr = std::fs::File::create(&log).expect("create the gate's log");
        let mut gate = HttpServer::spawn(
            &db,
            &["--conformance-pack", "--config", config],
            None,
            s,
            Stdio::from(stderr),
        );
        if let Err(why) = wait_backend_ready(&mut gate, BACKEND_NAME, &log) {
            println!("  skipped: {why}");
            return None;
        }
        let on_local = Requests::fixed(&admin.token, &guarded_call());
        let on_rest = Requests::fixed(
            &admin.token,
            &tool_call_with(&tool, &json!({"id": "A-1001"})),
        );
        // Odd runs start with the local call, even runs with the forwarded one.
        for forward in [run % 2 == 0, run % 2 == 1] {
            if !forward {
                local.record(http_load(&gate, &on_local, s).summarise());
                continue;
            }
            let (figures, others) = http_load_watching(&gate, &on_rest, s, &[rest.pid()]);
            forwarded.record(figures.summarise());
            let us = others.first().copied().flatten();
            println!(
                "  {:<46} {:<9} REST server CPU {} µs/call",
                "",
                "",
                us_or_dash(us)
            );
            backend_us.extend(us);
        }
        drop(gate);
        drop(rest);
        remove_database(&db);
    }
    local.print_median();
    forwarded.print_median();
    let figures = RestFigures {
        local: local.median(),
        forwarded: forwarded.median(),
        backend_us: (!backend_us.is_empty()).then(|| median(backend_us.into_iter())),
    };
    let [what, measured, target, ok] = figures.goal();
    println!(
        "  {what}: {measured} (target {target}, met: {ok}); the REST server {} µs/call",
        us_or_dash(figures.backend_us)
    );
    Some(figures)
}
