//! The latency page: how long calls took over the last hour and the last day — the 50th,
//! 95th and 99th percentiles per tool and per backend — and the slowest calls of each
//! window, each linking to its row of the audit log.
//!
//! The durations are the audit rows' (`duration_us`, written for every call), read in one
//! bounded read ([`Store::timed_calls`](crate::store::Store::timed_calls): the single calls
//! of the day, newest first, at most [`ROWS`]); the percentiles are computed here, over
//! each group's sorted durations, by the nearest rank. Summary rows (many refusals, timed
//! by none) and the console's own changes are not calls and are left out. A call belongs
//! to the backend its row names (`backend`: the one the registry resolved its tool to when
//! it was called), or to the built-in tools.
//!
//! The page is the audit log's, read another way: it is behind the same sign-in (the
//! `admin` scope) as the audit page.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::names::Names;
use super::{Console, Operator, Response};
use crate::clock::{format_time, format_time_ms};
use crate::store::audit::AuditRow;

/// The most rows the page reads: past it, the figures cover the newest calls and say so.
const ROWS: u32 = 50_000;
/// Slowest calls listed per window.
const SLOWEST: usize = 10;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The durations of one group, in microseconds, as the page shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    pub calls: usize,
    pub p50: i64,
    pub p95: i64,
    pub p99: i64,
}

/// The `p`th percentile (0 < `p` ≤ 100) of `sorted` (ascending) by the nearest rank: the
/// smallest value that at least `p` in 100 of the values do not exceed. `None` when empty.
pub fn percentile(sorted: &[i64], p: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p.clamp(1, 100) * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// The percentiles of `durations` (in any order); `None` when there are none.
pub fn percentiles(mut durations: Vec<i64>) -> Option<Percentiles> {
    durations.sort_unstable();
    Some(Percentiles {
        calls: durations.len(),
        p50: percentile(&durations, 50)?,
        p95: percentile(&durations, 95)?,
        p99: percentile(&durations, 99)?,
    })
}

/// Microseconds as milliseconds, to at most two decimals (`0.25`, `12.5`, `1500`).
pub fn millis(us: i64) -> String {
    let text = format!("{:.2}", us as f64 / 1000.0);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The groups of `rows` by `key`, each with its percentiles, ordered by key.
fn by<'r>(
    rows: &[&'r AuditRow],
    key: impl Fn(&'r AuditRow) -> String,
) -> BTreeMap<String, Percentiles> {
    let mut groups: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in rows {
        groups.entry(key(row)).or_default().push(row.duration_us);
    }
    groups
        .into_iter()
        .filter_map(|(k, d)| percentiles(d).map(|p| (k, p)))
        .collect()
}

fn stats_json(p: Option<&Percentiles>) -> Value {
    match p {
        Some(p) => json!({
            "calls": p.calls, "p50": millis(p.p50), "p95": millis(p.p95), "p99": millis(p.p99),
            "p50_us": p.p50, "p95_us": p.p95, "p99_us": p.p99,
        }),
        None => Value::Null,
    }
}

/// One table (by tool or by backend): a line per group seen in the day, with its hour's
/// and its day's figures; `extra` adds fields of the group's own.
fn table(
    hour: &BTreeMap<String, Percentiles>,
    day: &BTreeMap<String, Percentiles>,
    extra: impl Fn(&str) -> Value,
) -> Vec<Value> {
    day.iter()
        .map(|(name, d)| {
            let mut line = json!({
                "name": name, "hour": stats_json(hour.get(name)), "day": stats_json(Some(d)),
            });
            if let (Value::Object(line), Value::Object(more)) = (&mut line, extra(name)) {
                line.extend(more);
            }
            line
        })
        .collect()
}

/// The slowest calls among `rows`, slowest first (the newer first among equals).
fn slowest<'r>(rows: &[&'r AuditRow]) -> Vec<&'r AuditRow> {
    let mut sorted = rows.to_vec();
    sorted.sort_by(|a, b| b.duration_us.cmp(&a.duration_us).then(b.id.cmp(&a.id)));
    sorted.truncate(SLOWEST);
    sorted
}

/// `GET /console/latency`.
pub(super) fn latency(console: &Console, op: &Operator) -> Response {
    let texts = console.texts();
    let store = console.server.store();
    let now_ms = console.server.clock().unix_millis();
    let (day_since, hour_since) = (now_ms - DAY_MS, now_ms - HOUR_MS);
    let rows = match store.timed_calls(day_since, now_ms.saturating_add(1), ROWS) {
        Ok(rows) => rows,
        Err(e) => return console.store_failed(op, e),
    };
    let callers: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.credential_id.as_deref())
        .collect();
    let names = match Names::read(store, &callers) {
        Ok(names) => names,
        Err(e) => return console.store_failed(op, e),
    };
    let day: Vec<&AuditRow> = rows.iter().collect();
    let hour: Vec<&AuditRow> = rows.iter().filter(|r| r.at_ms >= hour_since).collect();
    let built_in = texts.get("built_in");
    let backend_of = |r: &AuditRow| r.backend.clone().unwrap_or_default();
    let tool_backends: BTreeMap<&str, &str> = rows
        .iter()
        .map(|r| (r.tool.as_str(), r.backend.as_deref().unwrap_or("")))
        .collect();
    // The audit filter takes whole minutes or seconds, as a `datetime-local` value (UTC).
    let since = |ms: i64| {
        format_time(ms.div_euclid(1000))
            .trim_end_matches('Z')
            .to_owned()
    };
    let tools = table(
        &by(&hour, |r| r.tool.clone()),
        &by(&day, |r| r.tool.clone()),
        |tool| {
            let backend = tool_backends.get(tool).copied().unwrap_or("");
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("tool", tool)
                .append_pair("since", &since(day_since))
                .finish();
            json!({
                "backend": if backend.is_empty() { built_in } else { backend },
                "audit": format!("/console/audit?{query}"),
            })
        },
    );
    let backends = table(
        &by(&hour, backend_of),
        &by(&day, backend_of),
        |backend| json!({"label": if backend.is_empty() { built_in } else { backend }}),
    );
    let slow = |rows: &[&AuditRow]| -> Vec<Value> {
        slowest(rows)
            .into_iter()
            .map(|r| {
                json!({
                    "id": r.id, "at": format_time_ms(r.at_ms), "tool": r.tool,
                    "outcome": r.outcome, "duration": millis(r.duration_us),
                    "duration_us": r.duration_us,
                    "who": names.credential_json(r.credential_id.as_deref()),
                })
            })
            .collect()
    };
    let capped = (rows.len() >= ROWS as usize).then(|| {
        let oldest = rows.last().map_or(now_ms, |r| r.at_ms);
        texts
            .get("latency_capped")
            .replace("{n}", &ROWS.to_string())
            .replace("{at}", &format_time_ms(oldest))
    });
    let page = console.render(
        "latency.html",
        "latency",
        Some(op),
        json!({
            "tools": tools, "backends": backends,
            "slowest": [
                {"id": "slowest-hour", "title": texts.get("slowest_hour"), "calls": slow(&hour)},
                {"id": "slowest-day", "title": texts.get("slowest_day"), "calls": slow(&day)},
            ],
            "capped": capped,
        }),
    );
    Response::html(200, page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_is_the_value_at_its_nearest_rank() {
        let hundred: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 50), Some(50));
        assert_eq!(percentile(&hundred, 95), Some(95));
        assert_eq!(percentile(&hundred, 99), Some(99));
        assert_eq!(percentile(&hundred, 100), Some(100));
        // Ten values: the 95th and 99th are the largest; the median the fifth.
        let ten: Vec<i64> = (1..=10).map(|n| n * 10).collect();
        assert_eq!(percentile(&ten, 50), Some(50));
        assert_eq!(percentile(&ten, 95), Some(100));
        assert_eq!(percentile(&ten, 99), Some(100));
        // One value is every percentile; none is none.
        assert_eq!(percentile(&[7], 50), Some(7));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn percentiles_sort_the_durations_first() {
        let p = percentiles(vec![900, 100, 500, 300, 700]).expect("some");
        assert_eq!(
            p,
            Percentiles {
                calls: 5,
                p50: 500,
                p95: 900,
                p99: 900
            }
        );
        assert_eq!(percentiles(Vec::new()), None);
    }

    #[test]
    fn durations_read_as_milliseconds() {
        assert_eq!(millis(250), "0.25");
        assert_eq!(millis(12_500), "12.5");
        assert_eq!(millis(1_500_000), "1500");
        assert_eq!(millis(0), "0");
    }

    fn row(id: i64, tool: &str, backend: Option<&str>, duration_us: i64) -> AuditRow {
        AuditRow {
            id,
            at_ms: id,
            request_id: "1".to_owned(),
            credential_id: None,
            client_id: None,
            tool: tool.to_owned(),
            outcome: "ok".to_owned(),
            entry: None,
            duration_us,
            transport: "http".to_owned(),
            calls: 1,
            source: None,
            backend: backend.map(str::to_owned),
            trace_id: None,
        }
    }

    #[test]
    fn calls_are_grouped_by_tool_and_by_backend_and_the_slowest_come_first() {
        let rows = [
            row(1, "shop_list", Some("shop"), 4_000),
            row(2, "shop_list", Some("shop"), 2_000),
            row(3, "shop_get", Some("shop"), 9_000),
            row(4, "search_clients", None, 1_000),
            row(5, "search_clients", None, 9_000),
        ];
        let all: Vec<&AuditRow> = rows.iter().collect();
        let tools = by(&all, |r| r.tool.clone());
        assert_eq!(tools.len(), 3);
        assert_eq!(tools["shop_list"].calls, 2);
        assert_eq!(tools["shop_list"].p50, 2_000);
        assert_eq!(tools["shop_list"].p99, 4_000);
        let backends = by(&all, |r| r.backend.clone().unwrap_or_default());
        assert_eq!(backends["shop"].calls, 3);
        assert_eq!(backends["shop"].p50, 4_000);
        assert_eq!(backends[""].calls, 2);
        let ids: Vec<i64> = slowest(&all).iter().map(|r| r.id).collect();
        // Equal durations: the newer call first.
        assert_eq!(ids, [5, 3, 1, 2, 4]);
    }
}
