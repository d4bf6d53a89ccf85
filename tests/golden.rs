//! Golden transcripts: what tollgate says on the wire, recorded once and replayed.
//!
//! Each scenario below drives the real binary (`tollgate stdio` processes and
//! `tollgate serve` on 127.0.0.1) through a fixed script and writes down every exchange:
//! the request as sent and, for stdio, every line the server wrote until the answer came;
//! for HTTP, the status, the response headers and the body. The transcripts live in
//! `tests/golden/<scenario>.jsonl` (JSON Lines: one line for a request, one line per
//! message or response that came back, each tagged with its step number). A test run
//! replays the script and fails, printing the first exchange that differs (request,
//! expected, actual), when the wire differs from the recording in any byte that is not
//! normalised (see [`Normaliser`]).
//!
//! Re-record (after a deliberate change on the wire, and then review the diff):
//!
//! ```text
//! TOLLGATE_GOLDEN=record cargo test --test tests golden::
//! ```
//!
//! What is compared: JSON bodies and stdio lines are recorded parsed, in the server's key
//! order, and each must be exactly the compact serialisation of what it parses to (so a
//! change of key order, spacing or escaping fails too); SSE streams event by event with
//! comments by length; HTTP response headers by name (lowercased, sorted: field order is not
//! significant in HTTP), without `Date`, `Content-Length`, `Transfer-Encoding`,
//! `Connection` and `Server`. Requests carry `Host`, `Content-Length` and
//! `Connection: close` besides the headers recorded.
//!
//! Rate windows: a per-minute window that rolls over mid-script would change counts. A
//! scenario that crossed a minute boundary (the test's clock before and after it; the
//! server reads the same clock) is run again, on fresh databases and processes (at most
//! three runs); the argon2-ceiling scenario does the same at one-second granularity, up to
//! six runs. Nothing sleeps to wait for a window.
//!
//! The `conformance` scenario needs the conformance fixtures (a build with the
//! `conformance-pack` feature, served with `--conformance-pack`): only a
//! tool that asks the client produces `missing_client_capability` and the client-answer
//! variant of `adapter_error`.
//!
//! Catalog entries (`tollgate errors --format json`, 51 of them) the transcripts do NOT
//! cover, and why:
//! - `server_busy` (503): needs every one of `http.max_connections` connections to be inside
//!   a handler at the moment another one connects, which cannot be arranged from outside
//!   without racing the listener.
//! - `timeout` (tool result): its only producer is a tool waiting for the client's answer
//!   to a server-to-client request, which gives up after 120 s, or when the call is
//!   cancelled, and a cancelled call's answer is never sent.
//! - `backend_unavailable` as a tool result (`isError`): needs the store to fail with a
//!   transient error (locked, full) after the guards' writes succeeded and before the
//!   tool's own write, which cannot be timed from outside. The JSON-RPC
//!   `backend_unavailable` of a guard's write (database locked) is covered, and so is
//!   `internal_error` (a statement failing inside a tool's write, via a trigger).
//! - `not_implemented`: nothing produces it yet (it is for backends, which do not exist
//!   yet).
//!
//! Also not covered: a panicking HTTP handler (`internal_error` with status 500), which
//! nothing a client sends reaches.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::util::{HttpResponse, HttpServer, READ_TIMEOUT, TestDb, http_request, modern_meta};

/// Where the transcripts live.
const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
/// The handshake revision most scenarios speak.
const HANDSHAKE: &str = "2025-11-25";
/// The stateless revision.
const MODERN: &str = "2026-07-28";
/// Protocol revisions look like dates and are never normalised.
const REVISIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];
/// Dates this close to today are derived from it (defaults, due dates) and normalised;
/// the dates the scripts send are years in the past.
const DATE_WINDOW_DAYS: i64 = 60;

// ---- Running a scenario -------------------------------------------------------------------

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs `script` into a fresh transcript and records or compares the result. A run that
/// crossed a minute boundary (or a window the script brackets itself, see
/// [`Transcript::crossed`]) is thrown away and the scenario run again, from scratch, at
/// most `runs` times in all.
fn run_scenario_with(name: &str, script: fn(&mut Transcript), runs: u32) {
    // The transcripts pin the wire bytes, which do not depend on the engine; their
    // scenarios set state up with SQLite's own SQL (triggers, `unixepoch()`).
    if crate::util::postgres_server().is_some() {
        eprintln!("not on PostgreSQL: the golden transcripts run on SQLite");
        return;
    }
    for _ in 0..runs {
        let mut t = Transcript::new();
        let started = now_secs();
        script(&mut t);
        let ended = now_secs();
        if started / 60 == ended / 60 && !t.crossed {
            return settle(name, &t.lines);
        }
    }
    panic!("scenario {name}: every run crossed a rate window boundary");
}

/// [`run_scenario_with`] with up to three runs: a run that crossed a minute boundary is
/// followed by one that starts just after it, which crosses none unless the machine is
/// so loaded that a scenario takes more than half a minute.
fn run_scenario(name: &str, script: fn(&mut Transcript)) {
    run_scenario_with(name, script, 3);
}

fn settle(name: &str, lines: &[String]) {
    let path = format!("{GOLDEN_DIR}/{name}.jsonl");
    let mut text = lines.join("\n");
    text.push('\n');
    if std::env::var("TOLLGATE_GOLDEN").as_deref() == Ok("record") {
        std::fs::create_dir_all(GOLDEN_DIR).expect("create tests/golden");
        std::fs::write(&path, text).expect("write the transcript");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{path}: {e}; record it with TOLLGATE_GOLDEN=record cargo test --test tests golden::"
        )
    });
    if expected == text {
        return;
    }
    let group = |text: &str| -> BTreeMap<u64, Vec<String>> {
        let mut steps: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for line in text.lines() {
            let step = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .unwrap_or(u64::MAX);
            steps.entry(step).or_default().push(line.to_owned());
        }
        steps
    };
    let (want, got) = (group(&expected), group(&text));
    let last = want.keys().chain(got.keys()).copied().max().unwrap_or(0);
    // With the OAuth front door on (`TOLLGATE_OAUTH_SERVER_ENABLED=true`, how CI replays
    // every transcript a second time), two things differ by design and nothing else may:
    // the authorization server's metadata describes the endpoints it then serves, and an
    // `initialize` on `/mcp` without a valid credential is refused (the credential's own
    // error: 401 and its challenge for a missing or invalid token) instead of opening an
    // anonymous session — so the steps that used that session differ too.
    let front_door = std::env::var("TOLLGATE_OAUTH_SERVER_ENABLED").as_deref() == Ok("true");
    let line = |lines: Option<&Vec<String>>, i: usize| {
        lines
            .and_then(|l| l.get(i))
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or(Value::Null)
    };
    let mut unopened: Vec<Value> = Vec::new();
    let changed_by_the_front_door =
        |w: Option<&Vec<String>>, g: Option<&Vec<String>>, unopened: &mut Vec<Value>| {
            if !front_door {
                return false;
            }
            let request = line(w, 0);
            if request["http"]["path"] == "/.well-known/oauth-authorization-server" {
                return true;
            }
            let (expected, actual) = (line(w, 1), line(g, 1));
            let opened = |response: &Value| !response["headers"]["mcp-session-id"].is_null();
            if request["http"]["body"]["method"] == "initialize"
                && opened(&expected)
                && !opened(&actual)
                && actual["body"]["error"].is_object()
            {
                unopened.push(expected["headers"]["mcp-session-id"].clone());
                return true;
            }
            request["http"]["headers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|h| h[0] == "Mcp-Session-Id" && unopened.contains(&h[1]))
        };
    // Sessions not opened shift the numbers of the later ones' placeholders.
    let same = |w: Option<&Vec<String>>, g: Option<&Vec<String>>| {
        if !front_door {
            return w == g;
        }
        let masked = |lines: Option<&Vec<String>>| {
            lines.map(|l| {
                l.iter()
                    .map(|line| without_session_numbers(line))
                    .collect::<Vec<_>>()
            })
        };
        masked(w) == masked(g)
    };
    let mut differs = false;
    for step in 0..=last {
        let (w, g) = (want.get(&step), got.get(&step));
        if !same(w, g) && changed_by_the_front_door(w, g, &mut unopened) {
            continue;
        }
        let w_differs = !same(w, g);
        differs |= w_differs;
        if w_differs {
            let show = |lines: Option<&Vec<String>>| {
                lines.map_or_else(|| "(nothing)".to_owned(), |l| l.join("\n"))
            };
            let request = w.or(g).and_then(|l| l.first()).cloned().unwrap_or_default();
            panic!(
                "{name}: step {step} differs from {path}\n--- request\n{request}\n--- expected\n{}\n--- actual\n{}\n\
                 (re-record with TOLLGATE_GOLDEN=record after a deliberate change)",
                show(w),
                show(g)
            );
        }
    }
    if differs || !front_door {
        panic!("{name}: the transcript differs from {path} outside any step");
    }
}

/// `line` with every `<session#N>` placeholder as `<session>`.
fn without_session_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("<session#") {
        out.push_str(&rest[..at]);
        out.push_str("<session");
        rest = rest[at + "<session#".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

// ---- Normalisation ------------------------------------------------------------------------

/// Replaces what legitimately differs from run to run by stable placeholders, before a
/// transcript is recorded and before it is compared. A placeholder keeps identity: the
/// same value maps to the same placeholder within a transcript (`<cli#1>` is the first
/// client id seen, wherever it appears again), so a reference that changes is caught.
///
/// - Values the script names: tokens, key and OAuth client ids, secrets, listening
///   addresses (`<admin-token>`, `<addr#1>`, …), replaced wherever they occur in a string.
/// - Tokens it did not name (`tg_live_…`, `tg_test_…`, `tg_cs_…`, `tg_at_…`) → `<token#n>`;
///   bare 20-hex public ids → `<key-id#n>`; `client<20 hex>` → `<oauth-client#n>`.
/// - Generated ids `<prefix>_<uuid>` (`cli_`, `inv_`, `pay_`, `msg_`, …) → `<prefix#n>`,
///   bare UUIDs → `<uuid#n>`.
/// - `Mcp-Session-Id` values → `<session#n>`; `requestState` blobs → `<request-state#n>`.
/// - Dates within 60 days of today (UTC), protocol revisions excepted, → `<today>`, `<today+30>`, …; RFC 3339
///   timestamps → `<timestamp>`; unix-second fields (`created_at`, `expires_at`, …) →
///   `<unix-time>`.
/// - Rate-limit `reset` (body) and `X-RateLimit-Reset` → `<reset>`; `retry_after` of a
///   `rate_limited` error, the wait its hint names, and its `Retry-After` header →
///   `<seconds>`; the `t=` of a
///   `RateLimit` header → `t=<seconds>`.
struct Normaliser {
    named: Vec<(String, String)>,
    seen: HashMap<String, String>,
    counters: HashMap<String, usize>,
    today: i64,
}

impl Normaliser {
    fn new() -> Normaliser {
        Normaliser {
            named: Vec::new(),
            seen: HashMap::new(),
            counters: HashMap::new(),
            today: i64::try_from(now_secs() / 86_400).unwrap_or(0),
        }
    }

    /// Names a value the script knows (a token, an id): replaced by `<placeholder>`.
    fn name(&mut self, literal: &str, placeholder: &str) {
        if literal.is_empty() || self.named.iter().any(|(l, _)| l == literal) {
            return;
        }
        self.named
            .push((literal.to_owned(), format!("<{placeholder}>")));
        self.named
            .sort_by_key(|(literal, _)| std::cmp::Reverse(literal.len()));
    }

    /// The placeholder of a generated value of `kind`, numbered in order of appearance.
    fn placeholder(&mut self, kind: &str, value: &str) -> String {
        if let Some(p) = self.seen.get(value) {
            return p.clone();
        }
        let n = self.counters.entry(kind.to_owned()).or_insert(0);
        *n += 1;
        let p = format!("<{kind}#{n}>");
        self.seen.insert(value.to_owned(), p.clone());
        p
    }

    fn value(&mut self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.value(i)).collect()),
            Value::Object(map) => {
                let rate_limited = map.get("code") == Some(&json!("rate_limited"));
                let wait = map
                    .get("retry_after")
                    .and_then(Value::as_u64)
                    .filter(|_| rate_limited);
                let mut out = Map::with_capacity(map.len());
                for (key, item) in map {
                    let replaced = match (key.as_str(), item) {
                        ("reset", Value::Number(_)) => Some(json!("<reset>")),
                        ("retry_after", Value::Number(_)) if rate_limited => {
                            Some(json!("<seconds>"))
                        }
                        ("hint", Value::String(s)) if wait.is_some() => {
                            Some(Value::String(self.text(&mask_wait(s, wait.unwrap_or(0)))))
                        }
                        ("requestState", Value::String(s)) => {
                            Some(Value::String(self.placeholder("request-state", s)))
                        }
                        (
                            "created_at" | "expires_at" | "last_used_at" | "revoked_at"
                            | "issued_at" | "at",
                            Value::Number(_),
                        ) => Some(json!("<unix-time>")),
                        _ => None,
                    };
                    out.insert(self.text(key), replaced.unwrap_or_else(|| self.value(item)));
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    fn text(&mut self, s: &str) -> String {
        let mut out = s.to_owned();
        for (literal, placeholder) in &self.named {
            if out.contains(literal.as_str()) {
                out = out.replace(literal.as_str(), placeholder);
            }
        }
        let out = self.scan(&out);
        self.dates(&out)
    }

    /// Replaces generated tokens and ids, left to right.
    fn scan(&mut self, s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < bytes.len() {
            let boundary = i == 0 || !is_word(bytes[i - 1]);
            if boundary && let Some((len, kind)) = match_generated(&bytes[i..]) {
                let p = self.placeholder(&kind, &s[i..i + len]);
                out.push_str(&p);
                i += len;
                continue;
            }
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }

    /// Dates near today and RFC 3339 timestamps.
    fn dates(&self, s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < bytes.len() {
            let boundary = i == 0 || !bytes[i - 1].is_ascii_digit();
            if boundary && let Some(days) = parse_date(&bytes[i..]) {
                let after = bytes.get(i + 10).copied();
                if after == Some(b'T') && is_timestamp(&bytes[i..]) {
                    let len = timestamp_len(&bytes[i..]);
                    out.push_str("<timestamp>");
                    i += len;
                    continue;
                }
                let offset = days - self.today;
                let revision = REVISIONS.contains(&&s[i..i + 10]);
                if offset.abs() <= DATE_WINDOW_DAYS
                    && !revision
                    && !after.is_some_and(|b| b.is_ascii_digit())
                {
                    match offset {
                        0 => out.push_str("<today>"),
                        o if o > 0 => out.push_str(&format!("<today+{o}>")),
                        o => out.push_str(&format!("<today{o}>")),
                    }
                    i += 10;
                    continue;
                }
            }
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }

    /// A response header's value.
    fn header(&mut self, name: &str, value: &str, rate_limited: bool) -> String {
        match name {
            "x-ratelimit-reset" => "<reset>".to_owned(),
            "retry-after" if rate_limited => "<seconds>".to_owned(),
            "ratelimit" => {
                let mut out = String::new();
                let mut rest = value;
                while let Some(at) = rest.find("t=") {
                    out.push_str(&rest[..at + 2]);
                    let tail = &rest[at + 2..];
                    let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
                    out.push_str(if digits > 0 { "<seconds>" } else { "" });
                    rest = &tail[digits..];
                }
                out.push_str(rest);
                self.text(&out)
            }
            "mcp-session-id" => {
                let placeholder = self.placeholder("session", value);
                // Later requests send it back: replaced there too.
                self.name(value, placeholder.trim_matches(['<', '>']));
                placeholder
            }
            _ => self.text(value),
        }
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// The length of a UUID at the start of `b`, if one is there.
fn uuid_at(b: &[u8]) -> bool {
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => is_hex(c),
        })
        && b.get(36).is_none_or(|&c| !is_word(c))
}

/// A generated token or id at the start of `b`: its length and placeholder kind.
fn match_generated(b: &[u8]) -> Option<(usize, String)> {
    for prefix in ["tg_live_", "tg_test_", "tg_cs_", "tg_at_"] {
        if b.starts_with(prefix.as_bytes()) {
            let len = b.iter().take_while(|&&c| is_word(c)).count();
            return Some((len, "token".to_owned()));
        }
    }
    if let Some(underscore) = b.iter().take(6).position(|&c| c == b'_')
        && underscore >= 2
        && b[..underscore].iter().all(u8::is_ascii_lowercase)
        && uuid_at(&b[underscore + 1..])
    {
        let kind = String::from_utf8_lossy(&b[..underscore]).into_owned();
        return Some((underscore + 37, kind));
    }
    if uuid_at(b) {
        return Some((36, "uuid".to_owned()));
    }
    if b.starts_with(b"client")
        && b.len() >= 26
        && b[6..26].iter().all(|&c| is_hex(c))
        && b.get(26).is_none_or(|&c| !is_word(c))
    {
        return Some((26, "oauth-client".to_owned()));
    }
    if b.len() >= 20
        && b[..20].iter().all(|&c| is_hex(c))
        && b[..20].iter().any(u8::is_ascii_digit)
        && b[..20].iter().any(|c| c.is_ascii_lowercase())
        && b.get(20).is_none_or(|&c| !is_word(c))
    {
        return Some((20, "key-id".to_owned()));
    }
    None
}

/// Days since the epoch of a `YYYY-MM-DD` at the start of `b`.
fn parse_date(b: &[u8]) -> Option<i64> {
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = std::str::from_utf8(&b[r]).ok()?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn is_timestamp(b: &[u8]) -> bool {
    b.len() >= 19 && b[13] == b':' && b[16] == b':'
}

fn timestamp_len(b: &[u8]) -> usize {
    19 + b[19..]
        .iter()
        .take_while(|&&c| c.is_ascii_digit() || matches!(c, b'.' | b'Z' | b'+' | b':' | b'-'))
        .count()
}

// ---- The transcript -----------------------------------------------------------------------

/// The exchanges of one scenario, normalised, as the lines of its file.
struct Transcript {
    lines: Vec<String>,
    step: u64,
    norm: Normaliser,
    /// Set when a bracketed part of the script crossed its window boundary.
    crossed: bool,
}

impl Transcript {
    fn new() -> Transcript {
        Transcript {
            lines: Vec::new(),
            step: 0,
            norm: Normaliser::new(),
            crossed: false,
        }
    }

    fn push(&mut self, mut record: Map<String, Value>) {
        let mut line = Map::new();
        line.insert("step".into(), json!(self.step));
        line.append(&mut record);
        self.lines
            .push(serde_json::to_string(&Value::Object(line)).expect("serialize"));
    }

    /// Starts a new exchange: its label and the request as sent.
    fn request(&mut self, label: &str, key: &str, request: &Value) {
        self.step += 1;
        let request = squash(&self.norm.value(request));
        let mut record = Map::new();
        record.insert("label".into(), json!(label));
        record.insert(key.into(), request);
        self.push(record);
    }

    /// One stdio line written by the server.
    fn stdio_line(&mut self, line: &str) {
        let mut record = Map::new();
        match exact_json(line.as_bytes()) {
            Some(v) => record.insert("recv".into(), self.norm.value(&v)),
            None => record.insert("recv_text".into(), json!(self.norm.text(line))),
        };
        self.push(record);
    }

    /// One HTTP response.
    fn http_response(&mut self, response: &HttpResponse) {
        let body_json = exact_json(&response.body);
        let rate_limited = body_json
            .as_ref()
            .is_some_and(|b| b.pointer("/error/data/code") == Some(&json!("rate_limited")));
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in &response.headers {
            if matches!(
                name.as_str(),
                "date" | "content-length" | "transfer-encoding" | "connection" | "server"
            ) {
                continue;
            }
            let value = self.norm.header(name, value, rate_limited);
            headers.entry(name.clone()).or_default().push(value);
        }
        let headers: Map<String, Value> = headers
            .into_iter()
            .map(|(n, mut v)| {
                let value = if v.len() == 1 {
                    json!(v.remove(0))
                } else {
                    json!(v)
                };
                (n, value)
            })
            .collect();
        let mut record = Map::new();
        record.insert("status".into(), json!(response.status));
        record.insert("headers".into(), Value::Object(headers));
        let sse = response
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if response.body.is_empty() {
        } else if sse {
            record.insert("sse".into(), self.sse(&response.body));
        } else if let Some(body) = body_json {
            record.insert("body".into(), self.norm.value(&body));
        } else {
            let text = String::from_utf8_lossy(&response.body);
            record.insert("body_text".into(), json!(self.norm.text(&text)));
        }
        self.push(record);
    }

    /// The events of an SSE body: each `data` parsed, comments by length.
    fn sse(&mut self, body: &[u8]) -> Value {
        let text = String::from_utf8_lossy(body);
        let mut events = Vec::new();
        for event in text.split("\n\n").filter(|e| !e.is_empty()) {
            let mut fields = Vec::new();
            for line in event.lines() {
                if let Some(comment) = line.strip_prefix(':') {
                    fields.push(json!({ "comment_bytes": comment.len() }));
                } else if let Some(data) = line.strip_prefix("data: ") {
                    match exact_json(data.as_bytes()) {
                        Some(v) => fields.push(json!({ "data": self.norm.value(&v) })),
                        None => fields.push(json!({ "data_text": self.norm.text(data) })),
                    }
                } else {
                    fields.push(json!({ "line": self.norm.text(line) }));
                }
            }
            events.push(Value::Array(fields));
        }
        Value::Array(events)
    }

    /// Records a note (something the script did outside the wire, e.g. a CLI command).
    fn note(&mut self, what: &str) {
        self.step += 1;
        let mut record = Map::new();
        record.insert("note".into(), json!(self.norm.text(what)));
        self.push(record);
    }
}

/// A request as recorded: runs of one character longer than 32 (padding that makes a
/// body or a header too large) written as `<N×c>`, so the transcript stays readable.
fn squash(v: &Value) -> Value {
    match v {
        Value::String(s) => {
            let mut out = String::with_capacity(s.len().min(256));
            let chars: Vec<char> = s.chars().collect();
            let mut i = 0;
            while i < chars.len() {
                let run = chars[i..].iter().take_while(|&&c| c == chars[i]).count();
                if run > 32 {
                    out.push_str(&format!("<{run}×{}>", chars[i]));
                } else {
                    out.extend(&chars[i..i + run]);
                }
                i += run;
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(squash).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), squash(v))).collect())
        }
        other => other.clone(),
    }
}

/// `bytes` parsed as JSON, when they are exactly its compact serialisation.
fn exact_json(bytes: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let again = serde_json::to_vec(&value).ok()?;
    (again == bytes).then_some(value)
}

/// A request body as recorded: JSON when it is JSON, else its text.
fn body_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

// ---- stdio --------------------------------------------------------------------------------

/// A `tollgate stdio` process spoken to line by line, every line kept.
struct Stdio {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
    /// Requests carry the 2026-07-28 `_meta` (stateless), or rely on the handshake.
    modern: bool,
}

impl Stdio {
    fn start(db: &TestDb, token: Option<&str>, env: &[(&str, &str)], extra: &[&str]) -> Stdio {
        let mut args = vec!["stdio"];
        args.extend_from_slice(extra);
        let mut cmd = db.command(&args);
        if let Some(token) = token {
            cmd.env("TOLLGATE_TOKEN", token);
        }
        cmd.envs(env.iter().copied());
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("spawn tollgate stdio");
        let rx = crate::util::read_lines(child.stdout.take().expect("stdout"));
        Stdio {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            next_id: 0,
            modern: false,
        }
    }

    /// Writes `text` and a newline, then records every line until `responses` responses
    /// (messages without a `method`) arrived; gives the responses back, raw.
    fn exchange(
        &mut self,
        t: &mut Transcript,
        label: &str,
        text: &str,
        responses: usize,
    ) -> Vec<Value> {
        t.request(label, "send", &body_value(text.as_bytes()));
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{text}\n").as_bytes())
            .expect("write stdin");
        stdin.flush().expect("flush stdin");
        self.read_until(t, |got| got.len() >= responses)
    }

    /// Records lines until `done` says the responses so far are enough (checked before
    /// each read too, so `done(&[])` reads nothing).
    fn read_until(&mut self, t: &mut Transcript, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut got = Vec::new();
        while !done(&got) {
            let line = match self.lines.recv_timeout(READ_TIMEOUT) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!("no line from tollgate stdio in time"),
                Err(RecvTimeoutError::Disconnected) => panic!("tollgate stdio closed stdout"),
            };
            t.stdio_line(&line);
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if value.get("method").is_none() || value.is_array() {
                got.push(value);
            }
        }
        got
    }

    /// Records lines until a request from the server (a message with `method` and `id`).
    #[cfg(feature = "conformance-pack")]
    fn read_request(&mut self, t: &mut Transcript) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(READ_TIMEOUT)
                .expect("a request from tollgate stdio");
            t.stdio_line(&line);
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if value.get("method").is_some() && value.get("id").is_some() {
                return value;
            }
        }
    }

    /// A request with the next id; its raw response.
    fn request(
        &mut self,
        t: &mut Transcript,
        label: &str,
        method: &str,
        mut params: Value,
    ) -> Value {
        self.next_id += 1;
        if self.modern {
            crate::util::merge_modern_meta(&mut params);
        }
        let message =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.exchange(t, label, &message.to_string(), 1).remove(0)
    }

    fn notify(&mut self, t: &mut Transcript, label: &str, method: &str) {
        let message = json!({"jsonrpc": "2.0", "method": method});
        self.exchange(t, label, &message.to_string(), 0);
    }

    fn initialize(&mut self, t: &mut Transcript, version: &str, capabilities: Value) -> Value {
        let response = self.request(
            t,
            &format!("initialize at {version}"),
            "initialize",
            json!({"protocolVersion": version, "capabilities": capabilities,
                   "clientInfo": {"name": "golden", "version": "0"}}),
        );
        self.notify(t, "notifications/initialized", "notifications/initialized");
        response
    }

    /// Closes stdin and records whatever the server still writes before it exits.
    fn close(mut self, t: &mut Transcript) {
        t.request("EOF on stdin", "send", &json!(null));
        drop(self.stdin.take());
        loop {
            match self.lines.recv_timeout(READ_TIMEOUT) {
                Ok(line) => t.stdio_line(&line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("tollgate stdio did not exit on EOF"),
            }
        }
        let status = self.child.wait().expect("wait");
        let mut record = Map::new();
        record.insert("exit".into(), json!(status.code()));
        t.push(record);
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- HTTP ---------------------------------------------------------------------------------

/// An MCP client over HTTP: a token, a handshake session or the stateless era.
struct Http {
    addr: SocketAddr,
    token: Option<String>,
    session: Option<String>,
    /// The negotiated handshake version, sent as `MCP-Protocol-Version`.
    version: Option<String>,
    modern: bool,
    next_id: i64,
}

impl Http {
    fn new(server: &HttpServer, token: Option<&str>) -> Http {
        Http {
            addr: server.addr,
            token: token.map(str::to_owned),
            session: None,
            version: None,
            modern: false,
            next_id: 0,
        }
    }

    fn modern(server: &HttpServer, token: Option<&str>) -> Http {
        Http {
            modern: true,
            ..Http::new(server, token)
        }
    }

    /// The headers this client sends with a body for `message`.
    fn headers(&self, message: &Value) -> Vec<(String, String)> {
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
        ];
        if let Some(token) = &self.token {
            headers.push(("Authorization".into(), format!("Bearer {token}")));
        }
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id".into(), session.clone()));
        }
        if let Some(version) = &self.version {
            headers.push(("MCP-Protocol-Version".into(), version.clone()));
        }
        if self.modern {
            let method = message["method"].as_str().unwrap_or("");
            headers.push(("MCP-Protocol-Version".into(), MODERN.into()));
            headers.push(("Mcp-Method".into(), method.into()));
            let name = message["params"]["name"]
                .as_str()
                .or_else(|| message["params"]["uri"].as_str());
            if let (Some(name), true) = (
                name,
                matches!(method, "tools/call" | "prompts/get" | "resources/read"),
            ) {
                headers.push(("Mcp-Name".into(), name.into()));
            }
        }
        headers
    }

    /// A request with the next id; its raw response (the last SSE message when streamed).
    fn request(
        &mut self,
        t: &mut Transcript,
        label: &str,
        method: &str,
        mut params: Value,
    ) -> Value {
        self.next_id += 1;
        if self.modern {
            crate::util::merge_modern_meta(&mut params);
        }
        let message =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let headers = self.headers(&message);
        let response = self.post(t, label, &headers, &message);
        if method == "initialize"
            && let Some(sid) = response.header("mcp-session-id")
        {
            self.session = Some(sid.to_owned());
            self.version = params["protocolVersion"].as_str().map(str::to_owned);
        }
        last_message(&response)
    }

    /// POSTs `body` to `/mcp` with exactly `headers` and records the exchange.
    fn post(
        &self,
        t: &mut Transcript,
        label: &str,
        headers: &[(String, String)],
        body: &Value,
    ) -> HttpResponse {
        let bytes = match body {
            Value::String(raw) => raw.as_bytes().to_vec(),
            other => serde_json::to_vec(other).expect("serialize"),
        };
        send(t, self.addr, label, "POST", "/mcp", headers, &bytes)
    }
}

/// Sends one HTTP request and records the exchange.
fn send(
    t: &mut Transcript,
    addr: SocketAddr,
    label: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> HttpResponse {
    let recorded: Vec<Value> = headers.iter().map(|(n, v)| json!([n, v])).collect();
    let mut request = json!({"method": method, "path": path, "headers": recorded});
    if !body.is_empty() {
        request["body"] = body_value(body);
    }
    t.request(label, "http", &request);
    let borrowed: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let response = http_request(addr, method, path, &borrowed, body);
    t.http_response(&response);
    response
}

/// The JSON-RPC message of a response: its body, or the last event of a stream.
fn last_message(response: &HttpResponse) -> Value {
    if response
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream"))
    {
        return response.sse_messages().pop().unwrap_or(Value::Null);
    }
    serde_json::from_slice(&response.body).unwrap_or(Value::Null)
}

/// Writes raw bytes on a fresh connection and returns everything the server answers
/// until it closes the connection (for requests the harness's client cannot send).
fn raw_exchange(t: &mut Transcript, addr: SocketAddr, label: &str, wire: &[u8]) {
    t.request(label, "wire", &json!(String::from_utf8_lossy(wire)));
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("timeout");
    let _ = stream.write_all(wire);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    record_raw_answer(t, &answer);
}

/// Parses a raw HTTP/1.1 answer (one response) into the transcript.
fn record_raw_answer(t: &mut Transcript, answer: &[u8]) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let response = HttpResponse {
        status,
        headers,
        body: body.as_bytes().to_vec(),
    };
    t.http_response(&response);
}

fn h(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

// ---- The database and the CLI -------------------------------------------------------------

/// A key created with `tollgate key create`.
struct Key {
    id: String,
    token: String,
}

fn key(db: &TestDb, t: &mut Transcript, name: &str, scopes: &str, extra: &[&str]) -> Key {
    let mut args = vec![
        "key", "create", "--name", name, "--scopes", scopes, "--json",
    ];
    args.extend_from_slice(extra);
    let out = db.run_json(&args);
    let key = Key {
        id: out["id"].as_str().expect("id").to_owned(),
        token: out["token"].as_str().expect("token").to_owned(),
    };
    t.norm.name(&key.token, &format!("{name}-token"));
    t.norm.name(&key.id, &format!("{name}-key-id"));
    t.note(&format!(
        "tollgate key create --name {name} --scopes {scopes} {}",
        extra.join(" ")
    ));
    key
}

/// Runs a CLI command that must succeed, noted in the transcript.
fn cli(db: &TestDb, t: &mut Transcript, args: &[&str]) {
    let out = db.run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.note(&format!("tollgate {}", args.join(" ")));
}

/// A fresh database whose admin key is named in the normaliser.
fn database(t: &mut Transcript, extra: &[&str]) -> (TestDb, Key) {
    let db = TestDb::with_init_args(extra);
    let token = db.admin_key.clone().expect("admin key");
    let admin = Key {
        id: db.admin_key_id(),
        token,
    };
    t.norm.name(&admin.token, "admin-token");
    t.norm.name(&admin.id, "admin-key-id");
    (db, admin)
}

/// Lifts the admin key's per-minute limits so that a long script is never rate limited
/// by accident.
fn roomy_limits(db: &TestDb, t: &mut Transcript, key_id: &str) {
    for category in ["read", "write", "destructive", "send", "generate"] {
        cli(
            db,
            t,
            &[
                "limits",
                "set",
                "--credential",
                key_id,
                "--category",
                category,
                "--per-minute",
                "1000",
            ],
        );
    }
}

fn sql(db: &TestDb, t: &mut Transcript, statement: &str) {
    let conn = rusqlite::Connection::open(&db.path).expect("open the database");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    conn.execute_batch(statement).expect("run SQL");
    t.note(&format!("SQL: {statement}"));
}

fn start_http(db: &TestDb, t: &mut Transcript, extra: &[&str], env: &[(&str, &str)]) -> HttpServer {
    let server = HttpServer::start_with_env(db, extra, env);
    t.norm.name(&server.addr.to_string(), "addr");
    server
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} in {v}"))
}

// ---- The business script, over any client --------------------------------------------------

/// What a script needs of a client: requests by method.
trait Mcp {
    fn req(&mut self, t: &mut Transcript, label: &str, method: &str, params: Value) -> Value;

    fn call(&mut self, t: &mut Transcript, label: &str, name: &str, arguments: Value) -> Value {
        self.req(
            t,
            label,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        )
    }

    /// A call whose result must be a success; its `structuredContent`.
    fn ok(&mut self, t: &mut Transcript, label: &str, name: &str, arguments: Value) -> Value {
        let response = self.call(t, label, name, arguments);
        assert_eq!(
            response["result"]["isError"],
            json!(false),
            "{label}: {response}"
        );
        response["result"]["structuredContent"].clone()
    }
}

impl Mcp for Stdio {
    fn req(&mut self, t: &mut Transcript, label: &str, method: &str, params: Value) -> Value {
        self.request(t, label, method, params)
    }
}

impl Mcp for Http {
    fn req(&mut self, t: &mut Transcript, label: &str, method: &str, params: Value) -> Value {
        self.request(t, label, method, params)
    }
}

const MISSING_CLIENT: &str = "cli_01900000-0000-7000-8000-000000000000";
const MISSING_INVOICE: &str = "inv_01900000-0000-7000-8000-000000000000";

/// Discovery and read-only methods: lists, resources, prompts, completions.
fn discovery(c: &mut dyn Mcp, t: &mut Transcript) {
    c.req(t, "tools/list", "tools/list", json!({}));
    c.req(t, "resources/list", "resources/list", json!({}));
    c.req(
        t,
        "resources/templates/list",
        "resources/templates/list",
        json!({}),
    );
    for guide in [
        "full-invoice-tax-id",
        "issue-date-order",
        "issued-invoice-immutable",
        "legal-vat-rates",
        "no-double-void",
        "simplified-invoice-ceiling",
    ] {
        c.req(
            t,
            &format!("resources/read the {guide} guide"),
            "resources/read",
            json!({"uri": format!("tollgate://guardrails/{guide}")}),
        );
    }
    c.req(
        t,
        "resources/read unknown uri: resource_not_found",
        "resources/read",
        json!({"uri": "tollgate://guardrails/nope"}),
    );
    c.req(t, "prompts/list", "prompts/list", json!({}));
    c.req(
        t,
        "tools/list with a bad cursor: invalid_params",
        "tools/list",
        json!({"cursor": "!!"}),
    );
}

/// Prompts and completions, once business data exists.
fn prompts(c: &mut dyn Mcp, t: &mut Transcript) {
    c.req(
        t,
        "prompts/get chase_overdue_invoices",
        "prompts/get",
        json!({"name": "chase_overdue_invoices", "arguments": {"tone": "firm"}}),
    );
    c.req(
        t,
        "prompts/get issue_invoice_for_client",
        "prompts/get",
        json!({"name": "issue_invoice_for_client", "arguments": {"client": "Acme", "items": "2 h consulting", "send": "yes"}}),
    );
    c.req(
        t,
        "prompts/get register_client_by_tax_id",
        "prompts/get",
        json!({"name": "register_client_by_tax_id", "arguments": {"tax_id": "12345678Z"}}),
    );
    c.req(
        t,
        "prompts/get without a required argument: invalid_params",
        "prompts/get",
        json!({"name": "register_client_by_tax_id", "arguments": {}}),
    );
    c.req(
        t,
        "prompts/get unknown prompt: invalid_params",
        "prompts/get",
        json!({"name": "no_such_prompt"}),
    );
    c.req(
        t,
        "completion/complete a client name",
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "issue_invoice_for_client"},
               "argument": {"name": "client", "value": "Ac"}}),
    );
    c.req(
        t,
        "completion/complete a resource ref",
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "tollgate://guardrails/legal-vat-rates"},
               "argument": {"name": "x", "value": ""}}),
    );
    c.req(
        t,
        "completion/complete a bad ref: invalid_params",
        "completion/complete",
        json!({"ref": {"type": "ref/nothing"}, "argument": {"name": "x", "value": ""}}),
    );
}

/// Every built-in tool's success path, and every tool error, guardrail and idempotency
/// rejection they have.
fn invoicing(c: &mut dyn Mcp, t: &mut Transcript) {
    let acme = c.ok(t, "create_client with tax id and e-mail", "create_client",
        json!({"name": "Acme, S.L.", "tax_id": "B12345674", "email": "ap@acme.example", "address": "Calle Mayor 1, Madrid"}));
    let acme = str_of(&acme, "/id").to_owned();
    let bennett = c.ok(
        t,
        "create_client without tax id or e-mail",
        "create_client",
        json!({"name": "Bennett"}),
    );
    let bennett = str_of(&bennett, "/id").to_owned();
    let idle = c.ok(
        t,
        "create_client to delete later",
        "create_client",
        json!({"name": "Idle Co", "tax_id": "12345678Z"}),
    );
    let idle = str_of(&idle, "/id").to_owned();
    c.call(
        t,
        "create_client with a bad tax id: invalid_format",
        "create_client",
        json!({"name": "Typo", "tax_id": "1234"}),
    );
    c.call(
        t,
        "create_client with a known tax id: tax_id_already_exists",
        "create_client",
        json!({"name": "Acme again", "tax_id": "ES-B12345674"}),
    );
    c.call(
        t,
        "create_client without a name: missing_required_field",
        "create_client",
        json!({"email": "x@example.com"}),
    );
    c.call(
        t,
        "create_client with an unknown argument: validation_error",
        "create_client",
        json!({"name": "X", "colour": "red"}),
    );
    c.ok(t, "get_client", "get_client", json!({"client_id": acme}));
    c.call(
        t,
        "get_client unknown: client_not_found",
        "get_client",
        json!({"client_id": MISSING_CLIENT}),
    );
    c.call(
        t,
        "get_client malformed id: invalid_format",
        "get_client",
        json!({"client_id": "lucia"}),
    );
    c.ok(
        t,
        "update_client",
        "update_client",
        json!({"client_id": idle, "address": "Plaza 2"}),
    );
    c.ok(
        t,
        "search_clients by text",
        "search_clients",
        json!({"query": "acme"}),
    );
    let page = c.ok(
        t,
        "search_clients first page",
        "search_clients",
        json!({"limit": 1}),
    );
    let cursor = page["next_cursor"].as_str().unwrap_or_default().to_owned();
    c.ok(
        t,
        "search_clients next page",
        "search_clients",
        json!({"limit": 1, "starting_after": cursor}),
    );

    let lines = json!([{"description": "Consulting", "quantity": 2, "unit_price_cents": 10000, "vat_rate": 21}]);
    let first = c.ok(
        t,
        "create_invoice (full) for acme",
        "create_invoice",
        json!({"client_id": acme, "lines": lines}),
    );
    let first = str_of(&first, "/id").to_owned();
    c.ok(t, "update_invoice of a draft", "update_invoice", json!({"invoice_id": first,
        "lines": [{"description": "Consulting", "quantity": 3, "unit_price_cents": 10000, "vat_rate": 21}]}));
    c.ok(
        t,
        "get_invoice",
        "get_invoice",
        json!({"invoice_id": first}),
    );
    c.call(
        t,
        "get_invoice unknown: invoice_not_found",
        "get_invoice",
        json!({"invoice_id": MISSING_INVOICE}),
    );
    c.call(
        t,
        "record_payment on a draft: invoice_not_issued",
        "record_payment",
        json!({"invoice_id": first, "amount_cents": 100, "idempotency_key": "pay-draft"}),
    );
    c.call(
        t,
        "issue_invoice without a key: idempotency_key_required",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01"}),
    );
    c.call(
        t,
        "issue_invoice with an empty key: idempotency_key_invalid",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01", "idempotency_key": ""}),
    );
    c.call(t, "issue_invoice with a 256-character key: idempotency_key_invalid", "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01", "idempotency_key": "k".repeat(256)}));
    c.call(
        t,
        "issue_invoice with a non-ASCII key: idempotency_key_invalid",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01", "idempotency_key": "clé"}),
    );
    c.ok(
        t,
        "issue_invoice",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01", "idempotency_key": "issue-1"}),
    );
    c.call(
        t,
        "issue_invoice again with its key: replayed",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-01", "idempotency_key": "issue-1"}),
    );
    c.call(
        t,
        "issue_invoice with the key and other arguments: idempotency_key_reused",
        "issue_invoice",
        json!({"invoice_id": first, "issue_date": "2024-03-02", "idempotency_key": "issue-1"}),
    );
    c.call(
        t,
        "update_invoice of an issued invoice: invoice_cannot_be_modified",
        "update_invoice",
        json!({"invoice_id": first, "notes": "late change"}),
    );
    c.call(
        t,
        "delete_invoice of an issued invoice: guardrail issued-invoice-immutable",
        "delete_invoice",
        json!({"invoice_id": first}),
    );
    c.ok(t, "record_payment", "record_payment",
        json!({"invoice_id": first, "amount_cents": 1000, "paid_on": "2024-03-05", "method": "card", "idempotency_key": "pay-1"}));
    c.call(
        t,
        "record_payment above the balance: payment_exceeds_balance",
        "record_payment",
        json!({"invoice_id": first, "amount_cents": 99_999_999, "idempotency_key": "pay-2"}),
    );
    c.ok(
        t,
        "record_payment dated today by default",
        "record_payment",
        json!({"invoice_id": first, "amount_cents": 500, "idempotency_key": "pay-3"}),
    );
    c.ok(
        t,
        "list_payments",
        "list_payments",
        json!({"invoice_id": first}),
    );
    c.ok(
        t,
        "send_invoice to the client's address",
        "send_invoice",
        json!({"invoice_id": first, "message": "Thanks!", "idempotency_key": "send-1"}),
    );
    c.call(
        t,
        "send_invoice to a bad address: invalid_format",
        "send_invoice",
        json!({"invoice_id": first, "to": "not-an-address", "idempotency_key": "send-2"}),
    );
    c.call(
        t,
        "delete_client with invoices: client_has_invoices",
        "delete_client",
        json!({"client_id": acme}),
    );
    let early = c.ok(
        t,
        "create_invoice for the date-order check",
        "create_invoice",
        json!({"client_id": acme, "lines": lines}),
    );
    c.call(t, "issue_invoice dated before the last of its series: guardrail issue-date-order", "issue_invoice",
        json!({"invoice_id": early["id"], "issue_date": "2024-02-01", "idempotency_key": "issue-early"}));

    let full_no_tax = c.ok(
        t,
        "create_invoice (full) for a client without tax id",
        "create_invoice",
        json!({"client_id": bennett, "lines": lines}),
    );
    c.call(t, "issue_invoice of a full invoice without tax id: guardrail full-invoice-tax-id", "issue_invoice",
        json!({"invoice_id": full_no_tax["id"], "issue_date": "2024-04-01", "idempotency_key": "issue-notax"}));
    c.call(t, "create_invoice with 7 % VAT: guardrail legal-vat-rates", "create_invoice",
        json!({"client_id": acme, "lines": [{"description": "X", "quantity": 1, "unit_price_cents": 100, "vat_rate": 7}]}));
    c.call(t, "update_invoice with 7 % VAT: guardrail legal-vat-rates", "update_invoice",
        json!({"invoice_id": full_no_tax["id"], "lines": [{"description": "X", "quantity": 1, "unit_price_cents": 100, "vat_rate": 7}]}));
    c.call(t, "create_invoice simplified above 400 EUR: guardrail simplified-invoice-ceiling", "create_invoice",
        json!({"client_id": bennett, "kind": "simplified", "lines": [{"description": "Big", "quantity": 1, "unit_price_cents": 40000, "vat_rate": 21}]}));
    let simple = c.ok(t, "create_invoice (simplified) for a client without e-mail", "create_invoice",
        json!({"client_id": bennett, "kind": "simplified", "lines": [{"description": "Small", "quantity": 1, "unit_price_cents": 1000, "vat_rate": 10}]}));
    c.ok(
        t,
        "issue_invoice dated today by default",
        "issue_invoice",
        json!({"invoice_id": simple["id"], "idempotency_key": "issue-today"}),
    );
    c.call(
        t,
        "send_invoice to a client without e-mail: recipient_has_no_email",
        "send_invoice",
        json!({"invoice_id": simple["id"], "idempotency_key": "send-3"}),
    );
    c.call(t, "send_invoice of a draft: invoice_not_issued", "send_invoice",
        json!({"invoice_id": full_no_tax["id"], "to": "x@example.com", "idempotency_key": "send-4"}));

    let voided = c.ok(
        t,
        "void_invoice",
        "void_invoice",
        json!({"invoice_id": first, "reason": "duplicate", "idempotency_key": "void-1"}),
    );
    c.call(
        t,
        "void_invoice again with its key: replayed",
        "void_invoice",
        json!({"invoice_id": first, "reason": "duplicate", "idempotency_key": "void-1"}),
    );
    c.call(
        t,
        "void_invoice again with a new key: guardrail no-double-void",
        "void_invoice",
        json!({"invoice_id": first, "reason": "duplicate", "idempotency_key": "void-2"}),
    );
    let rectifying = voided
        .pointer("/rectifying_invoice/id")
        .or_else(|| voided.pointer("/rectifying_invoice_id"))
        .cloned()
        .unwrap_or(Value::Null);
    c.call(
        t,
        "void_invoice of the rectifying invoice: guardrail no-double-void",
        "void_invoice",
        json!({"invoice_id": rectifying, "reason": "oops", "idempotency_key": "void-3"}),
    );
    c.call(
        t,
        "delete_invoice of a voided invoice: guardrail issued-invoice-immutable",
        "delete_invoice",
        json!({"invoice_id": first}),
    );
    c.call(
        t,
        "record_payment on a voided invoice: invoice_void",
        "record_payment",
        json!({"invoice_id": first, "amount_cents": 100, "idempotency_key": "pay-void"}),
    );
    c.call(
        t,
        "send_invoice of a voided invoice: invoice_void",
        "send_invoice",
        json!({"invoice_id": first, "idempotency_key": "send-void"}),
    );

    c.ok(
        t,
        "search_invoices issued",
        "search_invoices",
        json!({"status": "issued"}),
    );
    c.ok(
        t,
        "search_invoices overdue",
        "search_invoices",
        json!({"overdue": true}),
    );
    c.call(
        t,
        "search_invoices with a bad date: invalid_format",
        "search_invoices",
        json!({"date_from": "01/01/2024"}),
    );
    c.ok(
        t,
        "export_invoices",
        "export_invoices",
        json!({"from": "2024-01-01", "to": "2024-12-31"}),
    );
    c.req(t, "export_invoices with progress notifications", "tools/call",
        json!({"name": "export_invoices", "arguments": {"from": "2024-01-01", "to": "2024-12-31", "status": "void"},
               "_meta": {"progressToken": "export-1"}}));
    c.call(
        t,
        "export_invoices with to before from: validation_error",
        "export_invoices",
        json!({"from": "2024-12-31", "to": "2024-01-01"}),
    );

    let draft = c.ok(
        t,
        "create_invoice to delete",
        "create_invoice",
        json!({"client_id": idle, "lines": lines}),
    );
    c.ok(
        t,
        "delete_invoice of a draft",
        "delete_invoice",
        json!({"invoice_id": draft["id"]}),
    );
    c.ok(
        t,
        "delete_client without invoices",
        "delete_client",
        json!({"client_id": idle}),
    );
    c.call(
        t,
        "get_client deleted: client_not_found",
        "get_client",
        json!({"client_id": idle}),
    );

    c.call(
        t,
        "a retired tool: tool_retired",
        "list_invoices",
        json!({}),
    );
    c.call(
        t,
        "an unknown tool: unknown_tool",
        "no_such_tool",
        json!({}),
    );
    c.req(
        t,
        "tools/call without a name: invalid_params",
        "tools/call",
        json!({"arguments": {}}),
    );
    c.req(
        t,
        "tools/call with arguments not an object: invalid_params",
        "tools/call",
        json!({"name": "get_client", "arguments": [1]}),
    );
}

// ---- Scenarios ----------------------------------------------------------------------------

/// stdio on the handshake era: the whole business script, discovery, protocol errors, and
/// stateless 2026-07-28 requests on the same process.
fn stdio_handshake(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    roomy_limits(&db, t, &admin.id);
    let mut s = Stdio::start(
        &db,
        Some(&admin.token),
        &[("TOLLGATE_STDIO_MAX_LINE_BYTES", "2048")],
        &[],
    );
    s.request(
        t,
        "tools/list before initialize: invalid_params (no session)",
        "tools/list",
        json!({}),
    );
    s.initialize(t, HANDSHAKE, json!({}));
    s.request(t, "initialize twice: invalid_request", "initialize",
        json!({"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    s.request(t, "ping", "ping", json!({}));
    s.request(
        t,
        "logging/setLevel",
        "logging/setLevel",
        json!({"level": "debug"}),
    );
    s.request(
        t,
        "logging/setLevel to a bad level: invalid_params",
        "logging/setLevel",
        json!({"level": "loud"}),
    );
    s.request(
        t,
        "resources/subscribe",
        "resources/subscribe",
        json!({"uri": "tollgate://guardrails/legal-vat-rates"}),
    );
    s.request(
        t,
        "resources/subscribe unknown: resource_not_found",
        "resources/subscribe",
        json!({"uri": "tollgate://nope"}),
    );
    s.request(
        t,
        "resources/unsubscribe",
        "resources/unsubscribe",
        json!({"uri": "tollgate://guardrails/legal-vat-rates"}),
    );
    discovery(&mut s, t);
    invoicing(&mut s, t);
    prompts(&mut s, t);
    idempotency_in_use(&db, &mut s, t);

    s.request(
        t,
        "an unknown method: method_not_found",
        "no/such/method",
        json!({}),
    );
    s.exchange(t, "not JSON: parse_error", "{not json", 1);
    s.exchange(
        t,
        "JSON but not JSON-RPC: invalid_request",
        r#"{"jsonrpc":"1.0","id":90,"method":"ping"}"#,
        1,
    );
    s.exchange(
        t,
        "a request without a method: invalid_request",
        r#"{"jsonrpc":"2.0","id":91}"#,
        1,
    );
    s.exchange(
        t,
        "a batch on 2025-11-25: invalid_request",
        r#"[{"jsonrpc":"2.0","id":92,"method":"ping"}]"#,
        1,
    );
    s.exchange(
        t,
        "a line over the 2048-byte cap: invalid_request",
        &format!(
            r#"{{"jsonrpc":"2.0","id":93,"method":"ping","params":{{"pad":"{}"}}}}"#,
            "x".repeat(3000)
        ),
        1,
    );
    s.exchange(
        t,
        "a notification of an unknown method",
        r#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#,
        0,
    );
    s.exchange(
        t,
        "a response to nothing",
        r#"{"jsonrpc":"2.0","id":"nobody","result":{}}"#,
        0,
    );
    s.exchange(t, "three pipelined calls in one write",
        &[json!({"jsonrpc":"2.0","id":94,"method":"tools/call","params":{"name":"search_clients","arguments":{}}}),
          json!({"jsonrpc":"2.0","id":95,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}),
          json!({"jsonrpc":"2.0","id":96,"method":"ping"})]
            .iter().map(Value::to_string).collect::<Vec<_>>().join("\n"), 3);

    s.modern = true;
    s.request(
        t,
        "server/discover (2026-07-28) on the same process",
        "server/discover",
        json!({}),
    );
    s.request(t, "tools/list (2026-07-28)", "tools/list", json!({}));
    s.request(
        t,
        "tools/call search_clients (2026-07-28)",
        "tools/call",
        json!({"name": "search_clients", "arguments": {"query": "acme"}}),
    );
    s.request(t, "ping on 2026-07-28: method_not_found", "ping", json!({}));
    s.modern = false;
    s.request(t, "an unsupported 2026-era version: -32022", "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}));
    s.request(
        t,
        "2026-07-28 without clientCapabilities: invalid_params",
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}),
    );
    s.request(
        t,
        "a protocol version that is not a string: invalid_params",
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": 2026}}),
    );
    s.close(t);
}

/// Marks a completed idempotency record as still running elsewhere (as a process killed
/// mid-call leaves it, lease unexpired): the retry is `idempotency_key_in_use`.
fn idempotency_in_use(db: &TestDb, c: &mut dyn Mcp, t: &mut Transcript) {
    let client = c.ok(
        t,
        "create_client with an idempotency key in _meta",
        "create_client",
        json!({"name": "Held Co"}),
    );
    let _ = client;
    let args = json!({"name": "Keyed Co"});
    c.req(t, "create_client with the key in _meta", "tools/call",
        json!({"name": "create_client", "arguments": args, "_meta": {"dev.tollgate/idempotencyKey": "held-1"}}));
    sql(
        db,
        t,
        "UPDATE idempotency_keys SET state = 'in_flight', owner = 'another-process', result = NULL, \
               expires_at = unixepoch() + 3600 WHERE key = 'held-1'",
    );
    c.req(t, "the same call while the key is held: idempotency_key_in_use", "tools/call",
        json!({"name": "create_client", "arguments": args, "_meta": {"dev.tollgate/idempotencyKey": "held-1"}}));
    c.req(t, "an idempotency key in _meta that is not a string: idempotency_key_invalid", "tools/call",
        json!({"name": "create_client", "arguments": args, "_meta": {"dev.tollgate/idempotencyKey": 7}}));
}

/// stdio on every handshake revision: batches on 2025-03-26 only, version negotiation.
fn stdio_revisions(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    for version in ["2024-11-05", "2025-06-18", "1999-01-01"] {
        let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
        s.initialize(t, version, json!({}));
        s.request(
            t,
            &format!("tools/list after initialize at {version}"),
            "tools/list",
            json!({}),
        );
        s.exchange(
            t,
            &format!("a batch at {version}: invalid_request"),
            r#"[{"jsonrpc":"2.0","id":50,"method":"ping"}]"#,
            1,
        );
        s.close(t);
    }
    let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
    s.initialize(t, "2025-03-26", json!({}));
    s.exchange(t, "a batch at 2025-03-26: answered as a batch",
        r#"[{"jsonrpc":"2.0","id":10,"method":"ping"},{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"search_clients","arguments":{}}},{"jsonrpc":"2.0","method":"notifications/progress","params":{}},{"jsonrpc":"2.0","id":12,"method":"initialize","params":{}},{"jsonrpc":"2.0","id":13,"method":"nope"},{"id":14}]"#, 1);
    s.exchange(
        t,
        "a batch of notifications only: no answer",
        r#"[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}]"#,
        0,
    );
    s.exchange(t, "an empty batch: invalid_request", "[]", 1);
    s.request(t, "ping after the batches", "ping", json!({}));
    s.close(t);

    let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
    s.modern = true;
    s.request(
        t,
        "server/discover without a handshake",
        "server/discover",
        json!({}),
    );
    s.request(t, "initialize with 2026-07-28 _meta: method_not_found", "initialize",
        json!({"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    s.request(
        t,
        "resources/read (2026-07-28)",
        "resources/read",
        json!({"uri": "tollgate://guardrails/no-double-void"}),
    );
    s.request(t, "prompts/list (2026-07-28)", "prompts/list", json!({}));
    s.request(
        t,
        "tools/call create_client (2026-07-28)",
        "tools/call",
        json!({"name": "create_client", "arguments": {"name": "Modern Co"}}),
    );
    s.request(
        t,
        "tools/call with logLevel (2026-07-28)",
        "tools/call",
        json!({"name": "export_invoices", "arguments": {"from": "2024-01-01", "to": "2024-01-31"},
               "_meta": {"io.modelcontextprotocol/logLevel": "debug", "progressToken": 1}}),
    );
    s.modern = false;
    s.request(
        t,
        "a handshake method without a handshake: invalid_params",
        "prompts/list",
        json!({}),
    );
    s.close(t);

    // Hints in the other locale.
    let mut s = Stdio::start(&db, Some(&admin.token), &[("TOLLGATE_LOCALE", "es")], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    s.call(t, "locale es: unknown_tool", "no_such_tool", json!({}));
    s.call(
        t,
        "locale es: client_not_found",
        "get_client",
        json!({"client_id": MISSING_CLIENT}),
    );
    s.call(
        t,
        "locale es: missing_required_field",
        "create_client",
        json!({}),
    );
    s.exchange(t, "locale es: parse_error", "{", 1);
    s.close(t);
}

/// Tokens over stdio: each variant of `invalid_token`, the other credential refusals,
/// scopes, plans, rate buckets and test mode.
fn stdio_guards(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    let reader = key(&db, t, "reader", "invoices:read,clients:read", &[]);
    let expired = key(&db, t, "expired", "*", &[]);
    sql(
        &db,
        t,
        &format!(
            "UPDATE credentials SET expires_at = unixepoch() - 60 WHERE public_id = '{}'",
            expired.id
        ),
    );
    let revoked = key(&db, t, "revoked", "*", &[]);
    cli(&db, t, &["key", "revoke", &revoked.id]);
    let rotated = key(&db, t, "rotated", "*", &[]);
    let out = db.run_json(&["key", "rotate", &rotated.id, "--grace", "0", "--json"]);
    t.norm
        .name(out["token"].as_str().unwrap_or("?"), "rotated-new-token");
    t.note("tollgate key rotate <rotated> --grace 0");
    let client = db.run_json(&[
        "client", "create", "--name", "agent", "--scopes", "*", "--json",
    ]);
    let client_id = str_of(&client, "/client_id").to_owned();
    let client_secret = str_of(&client, "/client_secret").to_owned();
    t.norm.name(&client_id, "oauth-client-id");
    t.norm.name(&client_secret, "oauth-client-secret");
    t.note("tollgate client create --name agent --scopes *");
    let bound = key(&db, t, "bound", "*", &["--client", &client_id]);
    cli(&db, t, &["client", "revoke", &client_id]);
    let test_key = key(&db, t, "test", "*", &["--test"]);
    let limited = key(&db, t, "limited", "*", &[]);
    cli(
        &db,
        t,
        &[
            "limits",
            "set",
            "--credential",
            &limited.id,
            "--category",
            "read",
            "--per-minute",
            "2",
        ],
    );
    cli(&db, t, &["plan", "exclude", "pro", "send_invoice"]);

    let wrong_secret = format!("tg_live_{}_{}", admin.id, "A".repeat(43));
    let unknown_id = format!("tg_live_{}_{}", "0123456789abcdef0123", "A".repeat(43));
    let variants: Vec<(&str, Option<String>)> = vec![
        ("no token: invalid_token (missing)", None),
        (
            "a malformed token: invalid_token",
            Some("not-a-token".to_owned()),
        ),
        ("an unknown public id: invalid_token", Some(unknown_id)),
        ("a wrong secret: invalid_token", Some(wrong_secret)),
        ("an expired key: invalid_token", Some(expired.token.clone())),
        ("a revoked key: invalid_token", Some(revoked.token.clone())),
        (
            "a rotated key's old secret after grace 0: invalid_token",
            Some(rotated.token.clone()),
        ),
        (
            "a key of a revoked OAuth client: client_revoked",
            Some(bound.token.clone()),
        ),
        (
            "a test key while the company is live: invalid_token_type",
            Some(test_key.token.clone()),
        ),
        (
            "a client secret as a token: invalid_token_type",
            Some(client_secret.clone()),
        ),
    ];
    for (label, token) in &variants {
        let mut s = Stdio::start(&db, token.as_deref(), &[], &[]);
        s.initialize(t, HANDSHAKE, json!({}));
        s.request(
            t,
            &format!("tools/list with {label}"),
            "tools/list",
            json!({}),
        );
        s.call(
            t,
            &format!("tools/call with {label}"),
            "search_clients",
            json!({}),
        );
        s.close(t);
    }

    let mut s = Stdio::start(&db, Some(&reader.token), &[], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    s.request(t, "tools/list of a read-only key", "tools/list", json!({}));
    s.call(
        t,
        "a write tool with a read-only key: insufficient_scope",
        "create_client",
        json!({"name": "X"}),
    );
    s.call(
        t,
        "a read tool with a read-only key",
        "search_clients",
        json!({}),
    );
    s.request(
        t,
        "prompts/list of a read-only key",
        "prompts/list",
        json!({}),
    );
    s.close(t);

    let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    s.call(
        t,
        "a tool excluded from the plan: plan_upgrade_required",
        "send_invoice",
        json!({"invoice_id": MISSING_INVOICE, "idempotency_key": "x"}),
    );
    s.close(t);

    let mut s = Stdio::start(&db, Some(&limited.token), &[], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    for n in 1..=3 {
        s.call(
            t,
            &format!("read call {n} of 2 per minute"),
            "search_clients",
            json!({}),
        );
    }
    s.request(
        t,
        "prompts/get that reads data, over the read limit: rate_limited",
        "prompts/get",
        json!({"name": "chase_overdue_invoices"}),
    );
    s.close(t);

    // The per-source failure throttle: ten failures a minute, then `auth`.
    let mut s = Stdio::start(
        &db,
        Some("tg_live_0123456789abcdef0123_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        &[],
        &[],
    );
    s.initialize(t, HANDSHAKE, json!({}));
    for n in 1..=11 {
        s.request(
            t,
            &format!("failed authentication {n}"),
            "tools/list",
            json!({}),
        );
    }
    s.close(t);

    // Test mode: test keys work on the sandbox, every result names its book.
    cli(&db, t, &["company", "set", "--mode", "test"]);
    cli(&db, t, &["sandbox", "reset", "--empty"]);
    for (who, token) in [("test key", &test_key.token), ("live key", &admin.token)] {
        let mut s = Stdio::start(&db, Some(token), &[], &[]);
        s.initialize(t, HANDSHAKE, json!({}));
        s.call(
            t,
            &format!("create_client with the {who} in test mode"),
            "create_client",
            json!({"name": format!("Sandbox {who}"), "tax_id": "B12345674"}),
        );
        s.call(
            t,
            &format!("search_clients with the {who} in test mode"),
            "search_clients",
            json!({}),
        );
        s.call(
            t,
            &format!("an isError result with the {who}: client_not_found"),
            "get_client",
            json!({"client_id": MISSING_CLIENT}),
        );
        s.close(t);
    }
}

/// Plan-wide refusals on a database of their own: the active-keys allowance and the
/// hourly plan bucket.
fn stdio_plans(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    for n in 1..=3 {
        key(&db, t, &format!("extra{n}"), "*", &[]);
    }
    cli(&db, t, &["plan", "set", "free"]);
    let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    s.call(
        t,
        "over the free plan's active keys: plan_limit_exceeded",
        "search_clients",
        json!({}),
    );
    s.close(t);
    cli(&db, t, &["plan", "set", "starter"]);
    cli(
        &db,
        t,
        &["limits", "set", "--plan", "starter", "--per-hour", "2"],
    );
    let mut s = Stdio::start(&db, Some(&admin.token), &[], &[]);
    s.initialize(t, HANDSHAKE, json!({}));
    for n in 1..=3 {
        s.call(
            t,
            &format!("call {n} of 2 per hour for the plan"),
            "search_clients",
            json!({}),
        );
    }
    s.close(t);
}

/// Faults of the store, provoked from outside, over stdio and over HTTP in both status
/// modes: a write lock held past the busy timeout (a guard's write: JSON-RPC
/// `backend_unavailable`), and a statement that fails inside a tool's write
/// (`internal_error`).
fn faults(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    let busy = ("TOLLGATE_STORE_BUSY_TIMEOUT_MS", "200");
    let compatible = start_http(&db, t, &[], &[busy]);
    let semantic = start_http(
        &db,
        t,
        &[],
        &[busy, ("TOLLGATE_HTTP_ERROR_STATUS", "semantic")],
    );
    let mut stdio = Stdio::start(&db, Some(&admin.token), &[busy], &[]);
    stdio.initialize(t, HANDSHAKE, json!({}));
    let mut clients: Vec<(&str, Box<dyn Mcp>)> = vec![
        ("stdio", Box::new(stdio)),
        (
            "HTTP compatible",
            Box::new(Http::modern(&compatible, Some(&admin.token))),
        ),
        (
            "HTTP semantic",
            Box::new(Http::modern(&semantic, Some(&admin.token))),
        ),
    ];
    for (via, c) in &mut clients {
        c.call(
            t,
            &format!("create_client before the lock ({via})"),
            "create_client",
            json!({"name": format!("Before {via}")}),
        );
    }
    let lock = rusqlite::Connection::open(&db.path).expect("open");
    lock.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    t.note("another connection holds BEGIN EXCLUSIVE");
    for (via, c) in &mut clients {
        c.call(
            t,
            &format!("create_client while the database is locked: backend_unavailable ({via})"),
            "create_client",
            json!({"name": "During"}),
        );
    }
    lock.execute_batch("COMMIT").expect("unlock");
    t.note("the lock is released");
    sql(
        &db,
        t,
        "CREATE TRIGGER golden_fault BEFORE INSERT ON clients \
                 BEGIN SELECT RAISE(ABORT, 'golden fault'); END",
    );
    for (via, c) in &mut clients {
        c.call(
            t,
            &format!("create_client whose insert fails: internal_error ({via})"),
            "create_client",
            json!({"name": "Faulty"}),
        );
        c.call(
            t,
            &format!("search_clients still works ({via})"),
            "search_clients",
            json!({}),
        );
    }
}

/// HTTP on the handshake era, compatible status mode: sessions, the transport's own
/// refusals, batches, SSE, OAuth metadata and the token endpoint.
fn http_handshake(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    roomy_limits(&db, t, &admin.id);
    let server = start_http(&db, t, &[], &[("TOLLGATE_HTTP_MAX_BODY_BYTES", "4096")]);
    let addr = server.addr;
    let get = |t: &mut Transcript, label: &str, path: &str, headers: &[(String, String)]| {
        send(t, addr, label, "GET", path, headers, b"")
    };
    get(t, "GET /healthz", "/healthz", &[]);
    get(
        t,
        "GET /.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/mcp",
        &[],
    );
    get(
        t,
        "GET /.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server",
        &[],
    );
    get(
        t,
        "GET /.well-known/unknown: path_not_found",
        "/.well-known/unknown",
        &[],
    );
    get(t, "GET /nothing: path_not_found", "/nothing", &[]);
    get(t, "GET /mcp: http_method_not_allowed", "/mcp", &[]);
    get(
        t,
        "GET /metrics when not enabled: path_not_found",
        "/metrics",
        &[],
    );
    send(
        t,
        addr,
        "PUT /mcp: http_method_not_allowed",
        "PUT",
        "/mcp",
        &[h("Content-Type", "application/json")],
        b"{}",
    );
    send(
        t,
        addr,
        "DELETE /mcp without a session: http_method_not_allowed",
        "DELETE",
        "/mcp",
        &[],
        b"",
    );
    get(
        t,
        "GET /mcp from a foreign Origin: origin_not_allowed",
        "/mcp",
        &[h("Origin", "http://evil.example")],
    );

    let mut c = Http::new(&server, Some(&admin.token));
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    c.post(
        t,
        "POST from a foreign Origin: origin_not_allowed",
        &[
            h("Content-Type", "application/json"),
            h("Origin", "http://evil.example"),
        ],
        &ping,
    );
    c.post(
        t,
        "POST with a foreign Host: origin_not_allowed",
        &[
            h("Content-Type", "application/json"),
            h("Host", "evil.example"),
        ],
        &ping,
    );
    c.post(
        t,
        "POST text/plain: unsupported_media_type",
        &[h("Content-Type", "text/plain")],
        &ping,
    );
    c.post(
        t,
        "POST without Content-Type: unsupported_media_type",
        &[],
        &ping,
    );
    c.post(
        t,
        "POST accepting only text/html: not_acceptable",
        &[
            h("Content-Type", "application/json"),
            h("Accept", "text/html"),
        ],
        &ping,
    );
    c.post(
        t,
        "POST over the 4096-byte body cap: payload_too_large",
        &[h("Content-Type", "application/json")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(5000)}}),
    );
    c.post(
        t,
        "POST not JSON: parse_error",
        &[h("Content-Type", "application/json")],
        &json!("{not json"),
    );
    c.post(
        t,
        "POST not JSON-RPC: invalid_request",
        &[h("Content-Type", "application/json")],
        &json!({"jsonrpc": "1.0", "id": 3, "method": "ping"}),
    );
    c.post(
        t,
        "POST a request without a session or _meta: invalid_params",
        &[
            h("Content-Type", "application/json"),
            h("Authorization", &format!("Bearer {}", admin.token)),
        ],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    );
    c.post(
        t,
        "POST ping without a session",
        &[h("Content-Type", "application/json")],
        &ping,
    );
    c.post(
        t,
        "POST a batch without a session: invalid_request",
        &[h("Content-Type", "application/json")],
        &json!([ping]),
    );
    c.post(
        t,
        "POST a notification without a session: 202",
        &[h("Content-Type", "application/json")],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    c.post(
        t,
        "POST with an unknown session: session_not_found",
        &[
            h("Content-Type", "application/json"),
            h("Mcp-Session-Id", "no-such-session"),
        ],
        &ping,
    );

    c.request(t, "initialize at 2025-11-25", "initialize",
        json!({"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = c.headers(&initialized);
    c.post(t, "notifications/initialized: 202", &headers, &initialized);
    c.request(t, "ping in the session", "ping", json!({}));
    discovery(&mut c, t);
    c.call(
        t,
        "create_client in the session",
        "create_client",
        json!({"name": "Acme, S.L.", "tax_id": "B12345674", "email": "ap@acme.example"}),
    );
    c.call(
        t,
        "search_clients in the session",
        "search_clients",
        json!({}),
    );
    prompts(&mut c, t);
    c.call(
        t,
        "an unknown tool: unknown_tool (200)",
        "no_such_tool",
        json!({}),
    );
    c.call(
        t,
        "create_client without a name: missing_required_field",
        "create_client",
        json!({}),
    );
    c.request(
        t,
        "an unknown method: method_not_found (200 on the handshake era)",
        "no/such",
        json!({}),
    );
    c.req(t, "export_invoices with a progressToken: an SSE stream", "tools/call",
        json!({"name": "export_invoices", "arguments": {"from": "2024-01-01", "to": "2024-12-31"}, "_meta": {"progressToken": "p1"}}));
    let headers_with = |c: &Http, name: &str, value: &str| {
        let mut headers = c.headers(&ping);
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push(h(name, value));
        headers
    };
    c.post(t, "an Idempotency-Key header that is empty: idempotency_key_invalid",
        &headers_with(&c, "Idempotency-Key", ""),
        &json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "create_client", "arguments": {"name": "Header Co"}}}));
    c.post(t, "create_client with an Idempotency-Key header",
        &headers_with(&c, "Idempotency-Key", "hdr-1"),
        &json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "create_client", "arguments": {"name": "Header Co"}}}));
    c.post(t, "the same call with the same header: replayed",
        &headers_with(&c, "Idempotency-Key", "\"hdr-1\""),
        &json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {"name": "create_client", "arguments": {"name": "Header Co"}}}));
    c.post(
        t,
        "MCP-Protocol-Version unknown: unsupported_protocol_version",
        &headers_with(&c, "MCP-Protocol-Version", "1999-01-01"),
        &ping,
    );
    c.post(
        t,
        "MCP-Protocol-Version other than negotiated: unsupported_protocol_version",
        &headers_with(&c, "MCP-Protocol-Version", "2025-06-18"),
        &ping,
    );
    c.post(
        t,
        "a batch on 2025-11-25: invalid_request",
        &c.headers(&ping),
        &json!([ping]),
    );
    c.post(
        t,
        "a JSON-RPC response to nothing: 202",
        &c.headers(&ping),
        &json!({"jsonrpc": "2.0", "id": "nobody", "result": {}}),
    );
    c.post(t, "initialize inside a session", &c.headers(&ping),
        &json!({"jsonrpc": "2.0", "id": 30, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}}));
    let other = key(&db, t, "other", "*", &[]);
    c.post(
        t,
        "the session with another key: session_not_found",
        &headers_with(&c, "Authorization", &format!("Bearer {}", other.token)),
        &ping,
    );
    c.post(
        t,
        "the session with a bad token: session_not_found",
        &headers_with(&c, "Authorization", "Bearer nonsense"),
        &ping,
    );
    let sid = c.session.clone().unwrap_or_default();
    send(
        t,
        addr,
        "DELETE the session",
        "DELETE",
        "/mcp",
        &[
            h("Mcp-Session-Id", &sid),
            h("Authorization", &format!("Bearer {}", admin.token)),
        ],
        b"",
    );
    send(
        t,
        addr,
        "DELETE it again: session_not_found",
        "DELETE",
        "/mcp",
        &[
            h("Mcp-Session-Id", &sid),
            h("Authorization", &format!("Bearer {}", admin.token)),
        ],
        b"",
    );
    c.request(
        t,
        "ping in the deleted session: session_not_found",
        "ping",
        json!({}),
    );

    let mut b = Http::new(&server, Some(&admin.token));
    b.request(t, "initialize at 2025-03-26", "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    b.post(t, "a batch at 2025-03-26", &b.headers(&ping),
        &json!([ping, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_clients", "arguments": {}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}}, {"id": 4}]));
    b.post(
        t,
        "a batch of notifications only: 202",
        &b.headers(&ping),
        &json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
    );

    let mut old = Http::new(&server, Some(&admin.token));
    old.request(t, "initialize at 2024-11-05", "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    old.request(
        t,
        "tools/call at 2024-11-05",
        "tools/call",
        json!({"name": "search_clients", "arguments": {"query": "acme"}}),
    );

    let mut anon = Http::new(&server, None);
    anon.request(t, "initialize without a token", "initialize",
        json!({"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
    anon.request(
        t,
        "tools/list in an anonymous session: invalid_token (401)",
        "tools/list",
        json!({}),
    );

    oauth(&db, t, addr);

    raw_exchange(
        t,
        addr,
        "a header line over 16 KiB: headers_too_large",
        format!(
            "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(17 * 1024)
        )
        .as_bytes(),
    );
    raw_exchange(
        t,
        addr,
        "a malformed request line: invalid_request",
        format!("NONSENSE\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    raw_exchange(t, addr, "Content-Length and Transfer-Encoding together: invalid_request",
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n").as_bytes());
}

/// The OAuth token endpoint: a client_credentials token, used, and refusals.
fn oauth(db: &TestDb, t: &mut Transcript, addr: SocketAddr) {
    let client = db.run_json(&[
        "client",
        "create",
        "--name",
        "agent",
        "--scopes",
        "invoices:read,clients:read",
        "--json",
    ]);
    let client_id = str_of(&client, "/client_id").to_owned();
    let secret = str_of(&client, "/client_secret").to_owned();
    t.norm.name(&client_id, "oauth-client-id");
    t.norm.name(&secret, "oauth-client-secret");
    t.note("tollgate client create --name agent --scopes invoices:read,clients:read");
    let form = |body: &str| body.as_bytes().to_vec();
    let ct = h("Content-Type", "application/x-www-form-urlencoded");
    let granted = send(
        t,
        addr,
        "POST /oauth/token client_credentials",
        "POST",
        "/oauth/token",
        std::slice::from_ref(&ct),
        &form(&format!(
            "grant_type=client_credentials&client_id={client_id}&client_secret={secret}&scope=clients:read"
        )),
    );
    send(
        t,
        addr,
        "POST /oauth/token with a wrong secret",
        "POST",
        "/oauth/token",
        std::slice::from_ref(&ct),
        &form(&format!(
            "grant_type=client_credentials&client_id={client_id}&client_secret=tg_cs_wrong"
        )),
    );
    send(
        t,
        addr,
        "POST /oauth/token with an unsupported grant",
        "POST",
        "/oauth/token",
        std::slice::from_ref(&ct),
        &form("grant_type=password&username=a&password=b"),
    );
    send(
        t,
        addr,
        "POST /oauth/token asking for a scope the client lacks",
        "POST",
        "/oauth/token",
        &[ct],
        &form(&format!(
            "grant_type=client_credentials&client_id={client_id}&client_secret={secret}&scope=invoices:write"
        )),
    );
    let token = granted
        .json()
        .get("access_token")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    t.norm.name(&token, "access-token");
    let mut c = Http::modern_client(addr, &token);
    c.request(
        t,
        "tools/call with the access token (2026-07-28)",
        "tools/call",
        json!({"name": "search_clients", "arguments": {}}),
    );
    c.request(
        t,
        "a write tool with the access token: insufficient_scope",
        "tools/call",
        json!({"name": "create_client", "arguments": {"name": "X"}}),
    );
}

impl Http {
    fn modern_client(addr: SocketAddr, token: &str) -> Http {
        Http {
            addr,
            token: Some(token.to_owned()),
            session: None,
            version: None,
            modern: true,
            next_id: 0,
        }
    }
}

/// HTTP on the stateless 2026-07-28 era: the whole business script, and its header rules.
fn http_modern(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    roomy_limits(&db, t, &admin.id);
    let server = start_http(&db, t, &[], &[]);
    let mut c = Http::modern(&server, Some(&admin.token));
    c.request(t, "server/discover", "server/discover", json!({}));
    discovery(&mut c, t);
    invoicing(&mut c, t);
    prompts(&mut c, t);
    c.request(
        t,
        "ping on 2026-07-28: method_not_found (404)",
        "ping",
        json!({}),
    );
    c.request(
        t,
        "an unknown method: method_not_found (404)",
        "no/such",
        json!({}),
    );
    let call = json!({"jsonrpc": "2.0", "id": 100, "method": "tools/call",
        "params": {"name": "search_clients", "arguments": {}, "_meta": modern_meta()}});
    let base = c.headers(&call);
    let with = |name: &str, value: Option<&str>| {
        let mut headers = base.clone();
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(value) = value {
            headers.push(h(name, value));
        }
        headers
    };
    c.post(
        t,
        "Mcp-Method differs from the body: header_mismatch",
        &with("Mcp-Method", Some("tools/list")),
        &call,
    );
    c.post(
        t,
        "Mcp-Name differs from the body: header_mismatch",
        &with("Mcp-Name", Some("get_client")),
        &call,
    );
    c.post(
        t,
        "Mcp-Name missing: header_mismatch",
        &with("Mcp-Name", None),
        &call,
    );
    c.post(
        t,
        "MCP-Protocol-Version differs from _meta: header_mismatch",
        &with("MCP-Protocol-Version", Some("2025-11-25")),
        &call,
    );
    c.post(
        t,
        "Mcp-Name in base64 form",
        &with("Mcp-Name", Some("=?base64?c2VhcmNoX2NsaWVudHM=?=")),
        &call,
    );
    c.post(
        t,
        "a call with Accept: application/json only",
        &with("Accept", Some("application/json")),
        &call,
    );
    let unsupported = json!({"jsonrpc": "2.0", "id": 101, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut headers = c.headers(&unsupported);
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("MCP-Protocol-Version"));
    headers.push(h("MCP-Protocol-Version", "2099-01-01"));
    c.post(
        t,
        "an unsupported 2026-era version: -32022 (400)",
        &headers,
        &unsupported,
    );
    let no_caps = json!({"jsonrpc": "2.0", "id": 102, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}});
    c.post(
        t,
        "2026-07-28 without clientCapabilities: invalid_params (400)",
        &c.headers(&no_caps),
        &no_caps,
    );
    c.post(
        t,
        "a batch on 2026-07-28: invalid_request",
        &base,
        &json!([call]),
    );
    c.token = None;
    c.request(t, "no token: invalid_token (401)", "tools/list", json!({}));
    c.request(
        t,
        "server/discover without a token",
        "server/discover",
        json!({}),
    );

    // Development mode: requests without a token run as the configured credential.
    let dev = start_http(
        &db,
        t,
        &[],
        &[("TOLLGATE_DEV_UNAUTHENTICATED_CREDENTIAL", &admin.id)],
    );
    let mut d = Http::modern(&dev, None);
    d.request(
        t,
        "development mode: tools/call without a token",
        "tools/call",
        json!({"name": "search_clients", "arguments": {}}),
    );
    d.token = Some("not-a-token".to_owned());
    d.request(
        t,
        "development mode: a bad token is still refused",
        "tools/call",
        json!({"name": "search_clients", "arguments": {}}),
    );
}

/// Credential refusals, scopes and rate buckets over HTTP, in the status mode `mode`.
fn http_guards_in(t: &mut Transcript, mode: &str) {
    let (db, admin) = database(t, &[]);
    let reader = key(&db, t, "reader", "invoices:read,clients:read", &[]);
    let revoked = key(&db, t, "revoked", "*", &[]);
    cli(&db, t, &["key", "revoke", &revoked.id]);
    let client = db.run_json(&[
        "client", "create", "--name", "agent", "--scopes", "*", "--json",
    ]);
    let client_id = str_of(&client, "/client_id").to_owned();
    let client_secret = str_of(&client, "/client_secret").to_owned();
    t.norm.name(&client_id, "oauth-client-id");
    t.norm.name(&client_secret, "oauth-client-secret");
    t.note("tollgate client create --name agent --scopes *");
    let bound = key(&db, t, "bound", "*", &["--client", &client_id]);
    let client2 = db.run_json(&[
        "client", "create", "--name", "busy", "--scopes", "*", "--json",
    ]);
    let client2_id = str_of(&client2, "/client_id").to_owned();
    t.norm.name(&client2_id, "busy-client-id");
    t.norm
        .name(str_of(&client2, "/client_secret"), "busy-client-secret");
    t.note("tollgate client create --name busy --scopes *");
    let busy = key(&db, t, "busy", "*", &["--client", &client2_id]);
    cli(
        &db,
        t,
        &[
            "limits",
            "set",
            "--client",
            &client2_id,
            "--per-minute",
            "1",
        ],
    );
    cli(&db, t, &["client", "revoke", &client_id]);
    let test_key = key(&db, t, "test", "*", &["--test"]);
    let limited = key(&db, t, "limited", "*", &[]);
    cli(
        &db,
        t,
        &[
            "limits",
            "set",
            "--credential",
            &limited.id,
            "--category",
            "write",
            "--per-minute",
            "1",
        ],
    );
    cli(&db, t, &["plan", "exclude", "pro", "void_invoice"]);
    let env = [("TOLLGATE_HTTP_ERROR_STATUS", mode)];
    let variants: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        ("a malformed token", Some("not-a-token".to_owned())),
        (
            "a wrong secret",
            Some(format!("tg_live_{}_{}", admin.id, "A".repeat(43))),
        ),
        ("a revoked key", Some(revoked.token.clone())),
        ("a key of a revoked client", Some(bound.token.clone())),
        ("a test key while live", Some(test_key.token.clone())),
        ("a client secret", Some(client_secret.clone())),
        ("a read-only key", Some(reader.token.clone())),
    ];
    // A server of its own per variant: its failures would otherwise add up in the
    // per-source throttle (ten a minute from 127.0.0.1) and turn into `auth` refusals.
    for (label, token) in &variants {
        let server = start_http(&db, t, &[], &env);
        for modern in [false, true] {
            let mut c = if modern {
                Http::modern(&server, token.as_deref())
            } else {
                let mut c = Http::new(&server, token.as_deref());
                c.request(t, &format!("initialize with {label}"), "initialize",
                    json!({"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "golden", "version": "0"}}));
                c
            };
            let era = if modern { MODERN } else { HANDSHAKE };
            c.request(
                t,
                &format!("create_client with {label} ({era})"),
                "tools/call",
                json!({"name": "create_client", "arguments": {"name": "X"}}),
            );
        }
    }
    let server = start_http(&db, t, &[], &env);
    let mut c = Http::modern(&server, Some(&admin.token));
    c.request(t, "a tool excluded from the plan: plan_upgrade_required", "tools/call",
        json!({"name": "void_invoice", "arguments": {"invoice_id": MISSING_INVOICE, "reason": "x", "idempotency_key": "k"}}));
    c.request(
        t,
        "delete_invoice of a missing invoice: invoice_not_found",
        "tools/call",
        json!({"name": "delete_invoice", "arguments": {"invoice_id": MISSING_INVOICE}}),
    );
    let mut l = Http::modern(&server, Some(&limited.token));
    for n in 1..=2 {
        l.request(
            t,
            &format!("write call {n} of 1 per minute"),
            "tools/call",
            json!({"name": "create_client", "arguments": {"name": format!("Limited {n}")}}),
        );
    }
    let mut b = Http::modern(&server, Some(&busy.token));
    for n in 1..=2 {
        b.request(
            t,
            &format!("call {n} of 1 per minute for the OAuth client"),
            "tools/call",
            json!({"name": "search_clients", "arguments": {}}),
        );
    }

    // Test mode: the test key works on the sandbox, and results name their book.
    cli(&db, t, &["company", "set", "--mode", "test"]);
    cli(&db, t, &["sandbox", "reset", "--empty"]);
    let server = start_http(&db, t, &[], &env);
    for (who, token) in [("test key", &test_key.token), ("live key", &admin.token)] {
        let mut c = Http::modern(&server, Some(token));
        c.request(
            t,
            &format!("create_client with the {who} in test mode"),
            "tools/call",
            json!({"name": "create_client", "arguments": {"name": format!("Sandbox {who}")}}),
        );
        c.request(
            t,
            &format!("a guard refusal with the {who} in test mode: unknown_tool"),
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        );
    }
}

fn http_guards(t: &mut Transcript) {
    http_guards_in(t, "compatible");
}

fn http_guards_semantic(t: &mut Transcript) {
    http_guards_in(t, "semantic");
}

/// The per-source failure throttle over HTTP: ten failures a minute, then `auth` with its
/// headers, whatever the token.
fn http_auth_throttle(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    let server = start_http(&db, t, &[], &[]);
    let mut c = Http::modern(
        &server,
        Some("tg_live_0123456789abcdef0123_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    );
    for n in 1..=11 {
        c.request(
            t,
            &format!("failed authentication {n}"),
            "tools/list",
            json!({}),
        );
    }
    c.token = Some(admin.token.clone());
    c.request(
        t,
        "a valid new token from the throttled source: rate_limited",
        "tools/list",
        json!({}),
    );
}

/// The server-wide argon2 ceiling at one verification a second: the second new token in
/// the same second is refused.
fn http_auth_ceiling(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    let other = key(&db, t, "other", "*", &[]);
    let server = start_http(&db, t, &[], &[("TOLLGATE_AUTH_ARGON2_PER_SECOND", "1")]);
    let started = now_secs();
    Http::modern(&server, Some(&admin.token)).request(
        t,
        "a new token: verified",
        "tools/list",
        json!({}),
    );
    Http::modern(&server, Some(&other.token)).request(
        t,
        "another new token in the same second: rate_limited (ceiling)",
        "tools/list",
        json!({}),
    );
    // Both verifications must fall in one second of the server's clock (the same clock).
    t.crossed = now_secs() != started;
}

/// The listener's deadlines: a head or a body that does not arrive in time.
fn http_listener(t: &mut Transcript) {
    let (db, _admin) = database(t, &[]);
    let server = start_http(
        &db,
        t,
        &[],
        &[
            ("TOLLGATE_HTTP_HEAD_TIMEOUT_MS", "300"),
            ("TOLLGATE_HTTP_BODY_TIMEOUT_MS", "300"),
        ],
    );
    let addr = server.addr;
    partial(
        t,
        addr,
        "a request head that never ends: request_timeout",
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    );
    partial(t, addr, "a body shorter than its Content-Length: request_timeout",
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"").as_bytes());
}

/// Sends the start of a request and keeps the connection open; records what the server
/// answers when its deadline passes (the test blocks on the read, it does not sleep).
fn partial(t: &mut Transcript, addr: SocketAddr, label: &str, wire: &[u8]) {
    t.request(label, "wire", &json!(String::from_utf8_lossy(wire)));
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("timeout");
    stream.write_all(wire).expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    record_raw_answer(t, &answer);
}

/// The conformance fixtures (`--conformance-pack`): the entries only a tool that asks the
/// client can produce (a missing client capability, the client's own error).
#[cfg(feature = "conformance-pack")]
fn conformance(t: &mut Transcript) {
    let (db, admin) = database(t, &[]);
    let mut s = Stdio::start(&db, Some(&admin.token), &[], &["--conformance-pack"]);
    s.initialize(t, HANDSHAKE, json!({"elicitation": {}}));
    s.call(
        t,
        "a tool whose backend fails: adapter_error",
        "test_error_handling",
        json!({}),
    );
    s.call(t, "test_simple_text", "test_simple_text", json!({}));
    for (n, answer) in [
        (500, json!({"error": {"code": -1, "message": "declined"}})),
        (
            501,
            json!({"result": {"action": "accept", "content": {"username": "ada"}}}),
        ),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "Who?"}}});
        s.exchange(
            t,
            "test_elicitation: the server asks the client",
            &call.to_string(),
            0,
        );
        let asked = s.read_request(t);
        let mut reply = json!({"jsonrpc": "2.0", "id": asked["id"]});
        reply
            .as_object_mut()
            .expect("object")
            .extend(answer.as_object().expect("object").clone());
        s.exchange(
            t,
            "the client answers the elicitation",
            &reply.to_string(),
            1,
        );
    }
    s.close(t);

    let mut s = Stdio::start(&db, Some(&admin.token), &[], &["--conformance-pack"]);
    s.initialize(t, HANDSHAKE, json!({}));
    s.call(
        t,
        "elicitation without the client capability: missing_client_capability",
        "test_elicitation",
        json!({"message": "Who?"}),
    );
    s.modern = true;
    s.call(
        t,
        "test_missing_capability (2026-07-28): missing_client_capability",
        "test_missing_capability",
        json!({}),
    );
    s.call(
        t,
        "an input_required result with a request state (2026-07-28)",
        "test_input_required_result_request_state",
        json!({}),
    );
    s.close(t);

    let server = start_http(&db, t, &["--conformance-pack"], &[]);
    let mut c = Http::modern(&server, Some(&admin.token));
    c.call(
        t,
        "test_missing_capability over HTTP: missing_client_capability",
        "test_missing_capability",
        json!({}),
    );
    c.call(
        t,
        "a tool whose backend fails over HTTP: adapter_error",
        "test_error_handling",
        json!({}),
    );
    c.call(
        t,
        "a tool with logging and progress over HTTP",
        "test_tool_with_progress",
        json!({}),
    );
}

// ---- The tests ----------------------------------------------------------------------------

#[test]
fn stdio_handshake_transcript() {
    run_scenario("stdio_handshake", stdio_handshake);
}

#[test]
fn stdio_revisions_transcript() {
    run_scenario("stdio_revisions", stdio_revisions);
}

#[test]
fn stdio_guards_transcript() {
    run_scenario("stdio_guards", stdio_guards);
}

#[test]
fn stdio_plans_transcript() {
    run_scenario("stdio_plans", stdio_plans);
}

#[test]
fn faults_transcript() {
    run_scenario("faults", faults);
}

#[test]
fn http_handshake_transcript() {
    run_scenario("http_handshake", http_handshake);
}

#[test]
fn http_modern_transcript() {
    run_scenario("http_modern", http_modern);
}

#[test]
fn http_guards_transcript() {
    run_scenario("http_guards_compatible", http_guards);
}

#[test]
fn http_guards_semantic_transcript() {
    run_scenario("http_guards_semantic", http_guards_semantic);
}

#[test]
fn http_auth_throttle_transcript() {
    run_scenario("http_auth_throttle", http_auth_throttle);
}

#[test]
fn http_auth_ceiling_transcript() {
    run_scenario_with("http_auth_ceiling", http_auth_ceiling, 6);
}

#[test]
fn http_listener_transcript() {
    run_scenario("http_listener", http_listener);
}

#[cfg(feature = "conformance-pack")]
#[test]
fn conformance_transcript() {
    run_scenario("conformance", conformance);
}

/// The hint of a `rate_limited` error says how many seconds to wait, like its
/// `retry_after`: that count and its unit → `<seconds>`.
fn mask_wait(hint: &str, seconds: u64) -> String {
    // The unit follows the count ("1 second", "2 seconds"), so it is masked with it.
    [
        ("wait", "seconds"),
        ("wait", "second"),
        ("espere", "segundos"),
        ("espere", "segundo"),
    ]
    .iter()
    .fold(hint.to_owned(), |hint, (verb, unit)| {
        hint.replace(
            &format!("{verb} {seconds} {unit}"),
            &format!("{verb} <seconds>"),
        )
    })
}
