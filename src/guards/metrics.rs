//! Observability of calls: the in-memory counters behind `GET /metrics` (Prometheus text
//! format 0.0.4) and the one log line each rejected or failed `tools/call` leaves.
//!
//! What is counted, per process, since it started:
//!
//! | metric | labels |
//! |---|---|
//! | `tollgate_tool_calls_total` | `tool` (a registry name, or `unknown`), `code` (`ok` or a catalog code) |
//! | `tollgate_data_reads_total` | `method` (`prompts/get`, `resources/read`, `completion/complete`), `code`: the reads of business data that pass the guard chain (prompts and completions that declare it, an upstream's resources and prompts) |
//! | `tollgate_guard_rejections_total` | `code`: every JSON-RPC error of the chain except the `-32603` server faults (tool calls and data reads) |
//! | `tollgate_rate_limited_total` | `bucket`: a category, `plan`, `client`, `auth`, or `other` |
//! | `tollgate_tool_call_duration_seconds` | a histogram with fixed buckets ([`LATENCY_BUCKETS_MICROS`]) |
//! | `mcp_server_operation_duration_seconds` | a histogram per `mcp_method_name`, `gen_ai_tool_name`, `error_type`, `network_transport` (OpenTelemetry's MCP convention) |
//! | `tollgate_spans_exported_total`, `tollgate_spans_dropped_total`, `tollgate_span_export_failures_total` | none: with traces exported |
//! | `tollgate_backend_call_duration_seconds` | `backend`: a histogram of forwarded calls, admission wait included |
//! | `tollgate_http_responses_total` | `status` |
//! | `tollgate_rate_charges_total`, `tollgate_rate_charge_transactions_total` | none: calls charged to the rate counters, and the transactions that did it (their ratio is how well group commit batches) |
//! | `tollgate_log_lines_dropped_total` | none: log lines dropped because stderr did not take them in time (the logging queue) |
//! | `tollgate_identity_verifications_total` | `issuer` (a configured `name`, or `-`), `outcome` (`accepted`, a refusal's reason, `unavailable`): with identity providers configured |
//! | `tollgate_backend_calls_total`, `tollgate_backend_failures_total`, `tollgate_backend_up` | `backend` (and `kind`): with backends configured |
//! | `tollgate_backend_tools_left_out` | `backend`, `reason`: tools a backend lists that are not offered |
//! | `tollgate_backend_descriptions_cut` | `backend`: offered tools whose description was cut |
//! | `tollgate_backend_list_changed_total`, `tollgate_backend_list_changed_coalesced_total`, `tollgate_backend_relists_total` | `backend`: an upstream's list-changed notifications, those folded into a read already due, and the reads |
//! | `tollgate_backend_in_flight`, `tollgate_backend_queued`, `tollgate_backend_circuit_open` | `backend`: calls forwarded now, calls waiting for a slot, and 1 while its circuit is not closed |
//! | `tollgate_backend_rejected_total` | `backend`, `reason` (`queue_full`, `queue_timeout`, `circuit_open`): calls not forwarded |
//! | `tollgate_backend_circuit_opened_total` | `backend`: times its circuit opened |
//!
//! plus `tollgate_build_info`, `tollgate_uptime_seconds`, `process_start_time_seconds` and,
//! where `/proc` is readable, `process_resident_memory_bytes`, `process_threads` and
//! `process_open_fds`.
//!
//! Cardinality is bounded by construction: every label value is a `&'static str` taken from
//! the registry, the catalog or a fixed list; a name a client made up is folded into
//! `unknown`. Counting is lock-light: a read lock and an atomic increment per counter, a
//! write lock only the first time a label set appears. Nothing here ever holds an argument
//! value, a token or a request id. The backends' families are rendered by `backends`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::catalog::{ErrorKind, McpError};
use crate::guards::outcome::Verdict;
use crate::guards::ratelimit::{CLIENT_BUCKET, ChargeCounters, ChargeCounts, PLAN_BUCKET};
use crate::tools::{Category, Registry, Resolution};

pub mod backends;
pub mod operations;

/// The `Content-Type` of the exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub use crate::telemetry::LATENCY_BUCKETS_MICROS;
use crate::telemetry::{Histogram, HistogramSnapshot};

/// The label of a tool name that is not in the registry.
pub const UNKNOWN_TOOL: &str = "unknown";

/// Rate buckets reported by name besides the categories; any other name is `other`.
const OTHER_BUCKETS: &[&str] = &[PLAN_BUCKET, CLIENT_BUCKET, "auth"];

/// Log lines dropped since the process started; the logging queue counts them here.
static LOG_LINES_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Counts log lines the logging queue could not take (a full queue, or stderr failing).
pub fn count_dropped_log_lines(lines: u64) {
    LOG_LINES_DROPPED.fetch_add(lines, Ordering::Relaxed);
}

/// How many log lines this process has dropped so far.
pub fn log_lines_dropped() -> u64 {
    LOG_LINES_DROPPED.load(Ordering::Relaxed)
}

/// The metrics of this process.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::new)
}

/// Counters keyed by a small, bounded set of label values.
struct CounterFamily<K> {
    counters: RwLock<HashMap<K, AtomicU64>>,
}

impl<K: Clone + Eq + Hash + Ord> CounterFamily<K> {
    fn new() -> Self {
        CounterFamily {
            counters: RwLock::new(HashMap::new()),
        }
    }

    fn inc(&self, key: K) {
        {
            let counters = self.counters.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(counter) = counters.get(&key) {
                counter.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut counters = self
            .counters
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        counters
            .entry(key)
            .or_insert_with(|| AtomicU64::new(0))
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every (labels, value), sorted by labels so the page is stable.
    fn snapshot(&self) -> Vec<(K, u64)> {
        let counters = self.counters.read().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<(K, u64)> = counters
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect();
        all.sort_by(|(a, _), (b, _)| a.cmp(b));
        all
    }
}

/// The counters of one process. [`global`] is the one the server uses.
pub struct Metrics {
    started: Instant,
    started_unix: f64,
    tool_calls: CounterFamily<(Cow<'static, str>, &'static str)>,
    data_reads: CounterFamily<(&'static str, &'static str)>,
    guard_rejections: CounterFamily<&'static str>,
    rate_limited: CounterFamily<&'static str>,
    http_responses: CounterFamily<u16>,
    latency: Histogram,
    operations: operations::Operations,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty counters; uptime starts now.
    pub fn new() -> Metrics {
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Metrics {
            started: Instant::now(),
            started_unix,
            tool_calls: CounterFamily::new(),
            data_reads: CounterFamily::new(),
            guard_rejections: CounterFamily::new(),
            rate_limited: CounterFamily::new(),
            http_responses: CounterFamily::new(),
            latency: Histogram::default(),
            operations: operations::Operations::default(),
        }
    }

    /// Records one finished `tools/call` (the guard chain calls this next to the audit
    /// row) and logs one line: `info` for a rejection or a failure, with its catalog code,
    /// `debug` for a success. `name` is the tool name as sent; only registry names become
    /// labels.
    pub fn observe_tool_call(
        &self,
        registry: &Registry,
        name: &str,
        verdict: Verdict<'_>,
        elapsed: Duration,
    ) {
        let label = match registry.resolve(name) {
            Resolution::Tool(tool) => &tool.spec().name,
            Resolution::Retired(_) | Resolution::Held(_) | Resolution::Unknown => {
                &Cow::Borrowed(UNKNOWN_TOOL)
            }
        };
        let code = verdict.code();
        self.tool_calls.inc((label.clone(), code));
        let tool: &str = label;
        self.latency.observe(elapsed);
        let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        match (verdict, verdict.refusal()) {
            (_, Some(err)) => {
                self.count_rejection(err, code);
                tracing::info!(tool, code, elapsed_us, "tool call rejected");
            }
            (Verdict::Ok, None) => tracing::debug!(tool, elapsed_us, "tool call finished"),
            _ => tracing::info!(tool, code, elapsed_us, "tool call failed"),
        }
    }

    /// Records one finished prompt or completion that read business data through the
    /// guard chain ([`crate::guards::Guards::read_data`]) and logs one line, like
    /// [`Metrics::observe_tool_call`]. `name` is its audit name (`prompts/get <prompt>`,
    /// built from registry names only); its method becomes the label.
    pub fn observe_data_read(&self, name: &str, verdict: Verdict<'_>, elapsed: Duration) {
        let method = match name.split(' ').next() {
            Some("prompts/get") => "prompts/get",
            Some("resources/read") => "resources/read",
            Some("completion/complete") => "completion/complete",
            _ => UNKNOWN_TOOL,
        };
        let code = verdict.code();
        self.data_reads.inc((method, code));
        let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        match (verdict, verdict.refusal()) {
            (_, Some(err)) => {
                self.count_rejection(err, code);
                tracing::info!(read = name, code, elapsed_us, "data read rejected");
            }
            (Verdict::Ok, None) => tracing::debug!(read = name, elapsed_us, "data read finished"),
            _ => tracing::info!(read = name, code, elapsed_us, "data read failed"),
        }
    }

    /// Counts a guard rejection, and its bucket when it is a rate limit.
    fn count_rejection(&self, err: &McpError, code: &'static str) {
        self.guard_rejections.inc(code);
        if err.kind() == ErrorKind::RateLimited {
            self.rate_limited.inc(bucket_label(err));
        }
    }

    /// Counts one answered MCP request in `mcp_server_operation_duration_seconds`.
    pub fn observe_operation(&self, operation: operations::Operation, elapsed: Duration) {
        self.operations.observe(operation, elapsed);
    }

    /// Counts one HTTP response by status.
    pub fn record_http_status(&self, status: u16) {
        self.http_responses.inc(status);
    }

    /// The exposition page (Prometheus text format 0.0.4).
    pub fn render(&self) -> String {
        let mut page = String::with_capacity(4096);
        self.render_info(&mut page);
        self.render_calls(&mut page);
        self.render_latency(&mut page);
        self.operations.render(&mut page);
        render_spans(&mut page);
        self.render_http(&mut page);
        render_process(&mut page);
        page
    }

    fn render_info(&self, page: &mut String) {
        header(
            page,
            "tollgate_build_info",
            "gauge",
            "The running version (always 1).",
        );
        sample(
            page,
            "tollgate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))],
            1,
        );
        header(
            page,
            "tollgate_uptime_seconds",
            "gauge",
            "Seconds since this process started serving.",
        );
        let _ = writeln!(
            page,
            "tollgate_uptime_seconds {}",
            self.started.elapsed().as_secs_f64()
        );
        header(
            page,
            "process_start_time_seconds",
            "gauge",
            "When this process started serving, unix seconds.",
        );
        let _ = writeln!(page, "process_start_time_seconds {}", self.started_unix);
        let name = "tollgate_log_lines_dropped_total";
        header(
            page,
            name,
            "counter",
            "Log lines dropped because stderr did not take them in time (logging never blocks a call).",
        );
        sample(page, name, &[], log_lines_dropped());
    }

    fn render_calls(&self, page: &mut String) {
        let name = "tollgate_tool_calls_total";
        header(
            page,
            name,
            "counter",
            "tools/call requests by tool and outcome code (ok or a catalog code).",
        );
        for ((tool, code), value) in self.tool_calls.snapshot() {
            sample(page, name, &[("tool", &tool), ("code", code)], value);
        }
        let name = "tollgate_data_reads_total";
        header(
            page,
            name,
            "counter",
            "Prompts and completions that read business data, by method and outcome code.",
        );
        for ((method, code), value) in self.data_reads.snapshot() {
            sample(page, name, &[("method", method), ("code", code)], value);
        }
        let name = "tollgate_guard_rejections_total";
        header(
            page,
            name,
            "counter",
            "Requests the guard chain refused (tool calls and data reads), by catalog code.",
        );
        for (code, value) in self.guard_rejections.snapshot() {
            sample(page, name, &[("code", code)], value);
        }
        let name = "tollgate_rate_limited_total";
        header(
            page,
            name,
            "counter",
            "Requests refused by a rate bucket (tool calls and data reads), by bucket.",
        );
        for (bucket, value) in self.rate_limited.snapshot() {
            sample(page, name, &[("bucket", bucket)], value);
        }
        render_charges(page, ChargeCounters::process().counts());
    }

    fn render_latency(&self, page: &mut String) {
        let name = "tollgate_tool_call_duration_seconds";
        header(
            page,
            name,
            "histogram",
            "Time to answer a tools/call, guards included.",
        );
        histogram(page, name, &[], &self.latency.snapshot());
    }

    fn render_http(&self, page: &mut String) {
        let name = "tollgate_http_responses_total";
        header(page, name, "counter", "HTTP responses sent, by status.");
        for (status, value) in self.http_responses.snapshot() {
            sample(page, name, &[("status", &status.to_string())], value);
        }
    }
}

/// The rate limiter's group-commit figures (the process's: the limiters count them in
/// [`ChargeCounters::process`]): calls charged, and the transactions that charged them.
fn render_charges(page: &mut String, counts: ChargeCounts) {
    let name = "tollgate_rate_charges_total";
    header(
        page,
        name,
        "counter",
        "Calls charged to the rate counters (refused ones included).",
    );
    sample(page, name, &[], counts.charges);
    let name = "tollgate_rate_charge_transactions_total";
    header(
        page,
        name,
        "counter",
        "SQLite transactions that charged them (group commit puts several calls in one).",
    );
    sample(page, name, &[], counts.transactions);
}

/// The `bucket` of a `rate_limited` error: a category, one of [`OTHER_BUCKETS`], or `other`.
fn bucket_label(err: &McpError) -> &'static str {
    let bucket = err
        .fields()
        .get("bucket")
        .and_then(Value::as_str)
        .unwrap_or("");
    Category::ALL
        .iter()
        .map(|c| c.as_str())
        .chain(OTHER_BUCKETS.iter().copied())
        .find(|known| *known == bucket)
        .unwrap_or("other")
}

/// Microseconds as decimal seconds, without float noise (`2500` → `0.0025`).
fn seconds(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let frac = micros % 1_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// The span exporter's families, when spans are exported.
fn render_spans(page: &mut String) {
    if !crate::telemetry::configured() {
        return;
    }
    let counts = crate::telemetry::span_counts();
    for (name, help, value) in [
        (
            "tollgate_spans_exported_total",
            "Spans the collector took.",
            counts.exported,
        ),
        (
            "tollgate_spans_dropped_total",
            "Spans dropped: the export queue was full, or the collector refused them or did not answer in time (export never blocks a call).",
            counts.dropped,
        ),
        (
            "tollgate_span_export_failures_total",
            "Exports that failed.",
            counts.failed_exports,
        ),
    ] {
        header(page, name, "counter", help);
        sample(page, name, &[], value);
    }
}

/// Appends the identity providers' family to `page`: tokens verified (not served from the
/// verified-token cache) by issuer and outcome. Nothing without providers. Users are not
/// labels (their number is the company's, not bounded by construction): each user's calls
/// are on the console's users page and in the audit log.
pub fn render_identity(page: &mut String, identity: Option<&crate::identity::Identity>) {
    let Some(identity) = identity else {
        return;
    };
    let name = "tollgate_identity_verifications_total";
    header(
        page,
        name,
        "counter",
        "Identity-provider tokens verified (cache misses), by issuer and outcome: accepted, a refusal's reason, or unavailable.",
    );
    for (issuer, outcome, count) in identity.outcome_counts() {
        sample(
            page,
            name,
            &[("issuer", &issuer), ("outcome", outcome)],
            count,
        );
    }
}

/// Appends the samples of one histogram of family `name` with `labels` (its header is
/// the caller's): cumulative buckets, the sum in seconds, and the count.
pub fn histogram(
    page: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    snapshot: &HistogramSnapshot,
) {
    let bucket = format!("{name}_bucket");
    let bounds = LATENCY_BUCKETS_MICROS
        .iter()
        .map(|bound| seconds(*bound))
        .chain(std::iter::once("+Inf".to_owned()));
    let mut cumulative = 0;
    for (le, count) in bounds.zip(&snapshot.buckets) {
        cumulative += count;
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        sample(page, &bucket, &with_le, cumulative);
    }
    let sum = seconds(snapshot.sum_micros);
    page.push_str(name);
    page.push_str("_sum");
    write_labels(page, labels);
    let _ = writeln!(page, " {sum}");
    // The count is the +Inf bucket, so the page stays self-consistent under races.
    sample(page, &format!("{name}_count"), labels, cumulative);
}

/// Appends the `# HELP` and `# TYPE` lines of family `name`.
pub fn header(page: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(page, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(page, "# TYPE {name} {kind}");
}

/// Appends one sample of family `name` with `labels` (values escaped).
pub fn sample(page: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    page.push_str(name);
    write_labels(page, labels);
    let _ = writeln!(page, " {value}");
}

/// Appends `{label="value",…}` (values escaped), or nothing without labels.
fn write_labels(page: &mut String, labels: &[(&str, &str)]) {
    if labels.is_empty() {
        return;
    }
    page.push('{');
    for (i, (label, value)) in labels.iter().enumerate() {
        if i > 0 {
            page.push(',');
        }
        let _ = write!(page, "{label}=\"{}\"", escape_label_value(value));
    }
    page.push('}');
}

/// A label value as the text format wants it: `\`, `"` and newline escaped.
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A `# HELP` text: `\` and newline escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Process gauges read from `/proc` (Linux); each is left out when unreadable.
fn render_process(page: &mut String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    if let Some(kib) = field("VmRSS:") {
        header(
            page,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
        );
        let _ = writeln!(page, "process_resident_memory_bytes {}", kib * 1024);
    }
    if let Some(threads) = field("Threads:") {
        header(
            page,
            "process_threads",
            "gauge",
            "Operating-system threads of the process.",
        );
        let _ = writeln!(page, "process_threads {threads}");
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        header(page, "process_open_fds", "gauge", "Open file descriptors.");
        let _ = writeln!(page, "process_open_fds {}", fds.count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_starting(page: &str, prefix: &str) -> Vec<String> {
        page.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// Every line is a comment or `name{labels} value`, and every family has HELP and TYPE.
    fn assert_well_formed(page: &str) {
        assert!(page.ends_with('\n'), "the page ends with a newline");
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                assert!(
                    rest.starts_with("HELP ") || rest.starts_with("TYPE "),
                    "{line}"
                );
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
            assert!(value.parse::<f64>().is_ok(), "value of {line}");
            let name = series.split('{').next().unwrap_or("");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "metric name in {line}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|_| name.contains("duration")))
                .unwrap_or(name);
            assert!(
                page.contains(&format!("# TYPE {family} ")),
                "TYPE of {family}"
            );
            assert!(
                page.contains(&format!("# HELP {family} ")),
                "HELP of {family}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label_value("plain_name"), "plain_name");
        let mut page = String::new();
        sample(&mut page, "m", &[("x", "q\"\n\\")], 3);
        assert_eq!(page, "m{x=\"q\\\"\\n\\\\\"} 3\n");
    }

    #[test]
    fn seconds_render_without_float_noise() {
        assert_eq!(seconds(500), "0.0005");
        assert_eq!(seconds(2_500), "0.0025");
        assert_eq!(seconds(1_000_000), "1");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(0), "0");
    }

    #[test]
    fn data_reads_count_by_method_and_their_rejections_with_the_guards() {
        let m = Metrics::new();
        let elapsed = Duration::from_micros(40);
        m.observe_data_read("prompts/get chase_overdue_invoices", Verdict::Ok, elapsed);
        let scope = McpError::new(ErrorKind::InsufficientScope);
        m.observe_data_read(
            "completion/complete issue_invoice_for_client.client",
            Verdict::Rejected(&scope),
            elapsed,
        );
        let limited = McpError::new(ErrorKind::RateLimited).with("bucket", "read");
        m.observe_data_read(
            "prompts/get chase_overdue_invoices",
            Verdict::Rejected(&limited),
            elapsed,
        );
        m.observe_data_read("made-up", Verdict::Ok, elapsed);
        let page = m.render();
        assert_well_formed(&page);
        assert_eq!(
            lines_starting(&page, "tollgate_data_reads_total{"),
            vec![
                "tollgate_data_reads_total{method=\"completion/complete\",code=\"insufficient_scope\"} 1",
                "tollgate_data_reads_total{method=\"prompts/get\",code=\"ok\"} 1",
                "tollgate_data_reads_total{method=\"prompts/get\",code=\"rate_limited\"} 1",
                "tollgate_data_reads_total{method=\"unknown\",code=\"ok\"} 1",
            ]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_guard_rejections_total{"),
            vec![
                "tollgate_guard_rejections_total{code=\"insufficient_scope\"} 1",
                "tollgate_guard_rejections_total{code=\"rate_limited\"} 1",
            ]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_rate_limited_total{"),
            vec!["tollgate_rate_limited_total{bucket=\"read\"} 1"]
        );
    }

    #[test]
    fn counters_group_by_labels_and_render_sorted() {
        let m = Metrics::new();
        m.tool_calls.inc(("issue_invoice".into(), "ok"));
        m.tool_calls.inc(("create_client".into(), "ok"));
        m.tool_calls.inc(("issue_invoice".into(), "ok"));
        m.guard_rejections.inc("rate_limited");
        m.rate_limited.inc("write");
        m.http_responses.inc(200);
        m.http_responses.inc(404);
        let page = m.render();
        assert_well_formed(&page);
        assert_eq!(
            lines_starting(&page, "tollgate_tool_calls_total{"),
            vec![
                "tollgate_tool_calls_total{tool=\"create_client\",code=\"ok\"} 1",
                "tollgate_tool_calls_total{tool=\"issue_invoice\",code=\"ok\"} 2",
            ]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_guard_rejections_total{"),
            vec!["tollgate_guard_rejections_total{code=\"rate_limited\"} 1"]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_rate_limited_total{"),
            vec!["tollgate_rate_limited_total{bucket=\"write\"} 1"]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_http_responses_total{"),
            vec![
                "tollgate_http_responses_total{status=\"200\"} 1",
                "tollgate_http_responses_total{status=\"404\"} 1",
            ]
        );
        assert!(
            page.contains("# TYPE tollgate_tool_calls_total counter\n"),
            "{page}"
        );
        assert!(page.contains(&format!(
            "tollgate_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
    }

    #[test]
    fn charge_counts_render_as_two_counters() {
        let mut page = String::new();
        let counts = ChargeCounts {
            charges: 6,
            transactions: 2,
        };
        render_charges(&mut page, counts);
        assert_well_formed(&page);
        assert_eq!(
            lines_starting(&page, "tollgate_rate_charge"),
            vec![
                "tollgate_rate_charges_total 6",
                "tollgate_rate_charge_transactions_total 2",
            ]
        );
    }

    #[test]
    fn the_histogram_is_cumulative_with_fixed_buckets() {
        let m = Metrics::new();
        m.latency.observe(Duration::from_micros(400));
        m.latency.observe(Duration::from_micros(500));
        m.latency.observe(Duration::from_millis(3));
        m.latency.observe(Duration::from_secs(30));
        let page = m.render();
        assert_well_formed(&page);
        let buckets = lines_starting(&page, "tollgate_tool_call_duration_seconds_bucket");
        assert_eq!(buckets.len(), LATENCY_BUCKETS_MICROS.len() + 1);
        assert_eq!(
            buckets[0],
            "tollgate_tool_call_duration_seconds_bucket{le=\"0.0005\"} 2"
        );
        assert_eq!(
            buckets[1],
            "tollgate_tool_call_duration_seconds_bucket{le=\"0.001\"} 2"
        );
        assert_eq!(
            buckets[3],
            "tollgate_tool_call_duration_seconds_bucket{le=\"0.005\"} 3"
        );
        assert_eq!(
            buckets[13],
            "tollgate_tool_call_duration_seconds_bucket{le=\"10\"} 3"
        );
        assert_eq!(
            buckets[14],
            "tollgate_tool_call_duration_seconds_bucket{le=\"+Inf\"} 4"
        );
        assert!(
            page.contains("\ntollgate_tool_call_duration_seconds_sum 30.0039\n"),
            "{page}"
        );
        assert!(
            page.contains("\ntollgate_tool_call_duration_seconds_count 4\n"),
            "{page}"
        );
        assert!(page.contains("# TYPE tollgate_tool_call_duration_seconds histogram\n"));
    }

    #[test]
    fn rejections_and_buckets_fold_into_bounded_labels() {
        let limited = McpError::rate_limited("write", 60, 0, 1);
        assert_eq!(bucket_label(&limited), "write");
        let odd = McpError::rate_limited("per-tenant-xyz", 60, 0, 1);
        assert_eq!(bucket_label(&odd), "other");
        assert_eq!(
            bucket_label(&McpError::new(ErrorKind::RateLimited)),
            "other"
        );
    }

    #[test]
    fn observed_calls_label_registry_tools_and_fold_made_up_names() {
        let registry = Registry::new(
            crate::tools::invoicing::tools(),
            &[],
            Vec::new(),
            Vec::new(),
        )
        .expect("schemas compile");
        let m = Metrics::new();
        let tick = Duration::from_millis(2);
        m.observe_tool_call(&registry, "get_client", Verdict::Ok, tick);
        let unknown = McpError::unknown_tool("x");
        m.observe_tool_call(
            &registry,
            "no\"such\ntool",
            Verdict::Rejected(&unknown),
            tick,
        );
        let limited = McpError::rate_limited("read", 1, 0, 1);
        m.observe_tool_call(&registry, "get_client", Verdict::Rejected(&limited), tick);
        let fault = McpError::internal();
        m.observe_tool_call(&registry, "get_client", Verdict::Rejected(&fault), tick);
        let page = m.render();
        assert_well_formed(&page);
        assert_eq!(
            lines_starting(&page, "tollgate_tool_calls_total{"),
            vec![
                "tollgate_tool_calls_total{tool=\"get_client\",code=\"internal_error\"} 1",
                "tollgate_tool_calls_total{tool=\"get_client\",code=\"ok\"} 1",
                "tollgate_tool_calls_total{tool=\"get_client\",code=\"rate_limited\"} 1",
                "tollgate_tool_calls_total{tool=\"unknown\",code=\"unknown_tool\"} 1",
            ]
        );
        // A server fault is not a guard rejection.
        assert_eq!(
            lines_starting(&page, "tollgate_guard_rejections_total{"),
            vec![
                "tollgate_guard_rejections_total{code=\"rate_limited\"} 1",
                "tollgate_guard_rejections_total{code=\"unknown_tool\"} 1",
            ]
        );
        assert_eq!(
            lines_starting(&page, "tollgate_rate_limited_total{"),
            vec!["tollgate_rate_limited_total{bucket=\"read\"} 1"]
        );
        assert!(
            page.contains("\ntollgate_tool_call_duration_seconds_count 4\n"),
            "{page}"
        );
        assert!(page.contains("tollgate_tool_call_duration_seconds_bucket{le=\"0.0025\"} 4\n"));
    }

    #[test]
    fn an_empty_page_is_still_well_formed() {
        let page = Metrics::new().render();
        assert_well_formed(&page);
        assert!(page.contains("\ntollgate_tool_call_duration_seconds_count 0\n"));
        assert!(page.contains("# TYPE tollgate_tool_calls_total counter\n"));
    }
}
