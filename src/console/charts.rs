//! The overview's charts: calls per time bucket, stacked by outcome, laid out as the
//! rectangles of a server-rendered SVG (the template draws them; nothing runs in the
//! browser).
//!
//! An outcome is `ok` (admitted and answered), a tool failure (the catalog's `Tool`
//! class: the call ran and failed), a guard's refusal — each code on its own — or a fault
//! (protocol, transport or server). The class is that of the catalog entry the audit rows
//! name, so a backend's own 429 is a tool failure and our own limit's 429 a refusal,
//! though both have the code `rate_limited`; rows that name no entry (written before rows
//! did) take the class of the first entry with their code. A code this build's catalog
//! does not know (written by a newer node sharing the database) is drawn on its own too.
//!
//! Colours are the outcome's, never its rank's, so a code looks the same on both charts
//! and on every load: the classes and every guard code of the catalog have a fixed colour
//! each, and any other code takes one of a small palette by a hash of its name (two such
//! codes may share a colour; the legend and each rectangle's title name them).
//! The colours themselves are in `static/console.css`, as `o-<colour>` classes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::i18n::Texts;
use crate::catalog::{Class, ErrorKind};
use crate::store::audit::OutcomeCalls;

/// The drawing's width and height in SVG units (it scales to the page).
pub const WIDTH: i64 = 600;
pub const HEIGHT: i64 = 160;
/// Every guard code of the catalog, each with a colour of its own (class `o-<code>`;
/// related codes in shades of one hue).
const WELL_KNOWN: &[&str] = &[
    "rate_limited",
    "insufficient_scope",
    "invalid_token",
    "invalid_token_type",
    "client_revoked",
    "user_blocked",
    "plan_upgrade_required",
    "plan_limit_exceeded",
    "idempotency_key_required",
    "idempotency_key_invalid",
    "idempotency_key_reused",
    "idempotency_key_in_use",
    "mcp_guardrail_violation",
    "policy_denied",
    "approval_required",
    "approval_denied",
    "approval_expired",
];
/// Colours any other code picks from (classes `o-p0` … `o-p5`).
const PALETTE: u32 = 6;

/// What an outcome is drawn as. Every guard code is a series of its own: with colours
/// that do not depend on the ranking there is no cut-off past which codes would have to
/// share an "other" colour, and the catalog bounds how many there are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Series {
    Ok,
    Tool,
    Code(String),
    Fault,
}

impl Series {
    /// The series of the calls of `outcome` whose rows name the catalog entry `entry`.
    fn of(outcome: &str, entry: Option<ErrorKind>) -> Series {
        match class_of(outcome, entry) {
            _ if outcome == "ok" => Series::Ok,
            Some(Class::Tool) => Series::Tool,
            Some(Class::Guard) | None => Series::Code(outcome.to_owned()),
            Some(_) => Series::Fault,
        }
    }

    /// The colour it is drawn in: the suffix of its CSS class.
    fn colour(&self) -> String {
        match self {
            Series::Ok => "ok".to_owned(),
            Series::Tool => "tool".to_owned(),
            Series::Fault => "fault".to_owned(),
            Series::Code(code) => outcome_colour(code),
        }
    }

    fn label(&self, texts: &Texts) -> String {
        match self {
            Series::Ok => texts.get("outcome_ok").to_owned(),
            Series::Tool => texts.get("outcome_tool").to_owned(),
            Series::Code(code) => code.clone(),
            Series::Fault => texts.get("outcome_fault").to_owned(),
        }
    }
}

/// The class of an outcome's catalog entry: the entry its rows name, or for rows that name
/// none the first entry with its code (the users page counts refusals by it too).
pub(super) fn class_of(outcome: &str, entry: Option<ErrorKind>) -> Option<Class> {
    entry
        .or_else(|| ErrorKind::with_code(outcome).next())
        .map(|k| k.spec().class)
}

/// The colour of a code drawn on its own: its fixed one, or `p<n>` by the FNV-1a hash of
/// its name (the same in every build and on every platform, unlike the standard hasher).
pub fn outcome_colour(code: &str) -> String {
    if WELL_KNOWN.contains(&code) {
        return code.to_owned();
    }
    let hash = code.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("p{}", hash % PALETTE)
}

/// One coloured part of a bar.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Segment {
    pub y: f64,
    pub height: f64,
    pub class: String,
    pub label: String,
    pub count: i64,
}

/// One time bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bar {
    pub x: f64,
    pub width: f64,
    /// The bucket's start, `HH:MM` UTC.
    pub label: String,
    pub total: i64,
    pub segments: Vec<Segment>,
}

/// A legend entry.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Legend {
    pub class: String,
    pub label: String,
    pub count: i64,
}

/// A tick of an axis: where it is along the axis (SVG units of the plot) and its label.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Tick {
    pub at: f64,
    pub label: String,
}

/// One chart, ready for the template.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Chart {
    pub id: &'static str,
    pub title: String,
    /// The plot's width and height (the bars'); the drawing adds the axes' margins.
    pub width: i64,
    pub height: i64,
    /// The margins around the plot: left (count labels), top, right, bottom (time labels).
    pub left: i64,
    pub top: i64,
    pub right: i64,
    pub bottom: i64,
    /// The time axis: ticks at round times (`HH:MM` UTC, with the date at midnight and at
    /// the first tick of a chart longer than a day's buckets of an hour).
    pub x_ticks: Vec<Tick>,
    /// The count axis: ticks at round counts from 0 to at most the peak.
    pub y_ticks: Vec<Tick>,
    /// The window's start and end (`YYYY-MM-DD HH:MM` UTC), for the drawing's description.
    pub from: String,
    pub to: String,
    /// Every call in the window.
    pub total: i64,
    /// The tallest bar (the top of the scale).
    pub peak: i64,
    pub bars: Vec<Bar>,
    pub legend: Vec<Legend>,
}

/// The chart of `buckets` buckets of `bucket_ms` ending with the one holding `now_ms`,
/// from `counts` (as the store gives them).
pub fn chart(
    id: &'static str,
    title: String,
    texts: &Texts,
    counts: &[OutcomeCalls],
    now_ms: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Chart {
    let last = now_ms.div_euclid(bucket_ms) * bucket_ms;
    let first = last - (buckets - 1) * bucket_ms;
    let mut per_bucket: BTreeMap<i64, BTreeMap<Series, i64>> = BTreeMap::new();
    let mut per_series: BTreeMap<Series, i64> = BTreeMap::new();
    for count in counts
        .iter()
        .filter(|c| (first..=last).contains(&c.bucket_ms))
    {
        let series = Series::of(&count.outcome, count.entry);
        *per_bucket
            .entry(count.bucket_ms)
            .or_default()
            .entry(series.clone())
            .or_default() += count.calls;
        *per_series.entry(series).or_default() += count.calls;
    }
    let peak = per_bucket
        .values()
        .map(|m| m.values().sum::<i64>())
        .max()
        .unwrap_or(0);
    let width = WIDTH as f64 / buckets as f64;
    let scale = if peak > 0 {
        HEIGHT as f64 / peak as f64
    } else {
        0.0
    };
    let bars = (0..buckets)
        .map(|i| {
            let at = first + i * bucket_ms;
            let mut y = HEIGHT as f64;
            let mut total = 0;
            let segments = per_bucket
                .get(&at)
                .map(|m| {
                    m.iter()
                        .map(|(series, count)| {
                            let height = *count as f64 * scale;
                            y -= height;
                            total += count;
                            Segment {
                                y: round(y),
                                height: round(height),
                                class: series.colour(),
                                label: series.label(texts),
                                count: *count,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            Bar {
                x: round(i as f64 * width),
                width: round((width - 1.0).max(0.5)),
                label: hh_mm(at),
                total,
                segments,
            }
        })
        .collect();
    let legend = per_series
        .iter()
        .map(|(series, count)| Legend {
            class: series.colour(),
            label: series.label(texts),
            count: *count,
        })
        .collect();
    let end = first + buckets * bucket_ms;
    Chart {
        id,
        title,
        width: WIDTH,
        height: HEIGHT,
        left: MARGIN_LEFT,
        top: MARGIN_TOP,
        right: MARGIN_RIGHT,
        bottom: MARGIN_BOTTOM,
        x_ticks: time_ticks(first, end, bucket_ms),
        y_ticks: count_ticks(peak),
        from: day_minute(first),
        to: day_minute(end),
        total: per_series.values().sum(),
        peak,
        bars,
        legend,
    }
}

/// The margins around the plot, in SVG units: room for the count labels on the left and
/// the time labels below.
const MARGIN_LEFT: i64 = 48;
const MARGIN_TOP: i64 = 16;
const MARGIN_RIGHT: i64 = 24;
const MARGIN_BOTTOM: i64 = 24;
/// At most this many ticks on the time axis (and about as many on the count axis).
const MAX_TICKS: i64 = 6;
/// The intervals a time axis may step by, shortest first.
const TIME_STEPS_MS: &[i64] = &[
    60_000,
    2 * 60_000,
    5 * 60_000,
    10 * 60_000,
    15 * 60_000,
    30 * 60_000,
    3_600_000,
    2 * 3_600_000,
    3 * 3_600_000,
    6 * 3_600_000,
    12 * 3_600_000,
    24 * 3_600_000,
];

/// The ticks of a time axis from `first` up to `end` (unix milliseconds; the plot's left and
/// right edges, the right one left out), `bucket_ms` wide per bar: at every multiple of the shortest step in
/// [`TIME_STEPS_MS`] that gives at most [`MAX_TICKS`] of them. A tick at midnight, and the
/// first tick of a chart of hourly buckets, carries its date (`MM-DD HH:MM`).
pub fn time_ticks(first: i64, end: i64, bucket_ms: i64) -> Vec<Tick> {
    let span = (end - first).max(1);
    let step = TIME_STEPS_MS
        .iter()
        .copied()
        .find(|step| span / step <= MAX_TICKS)
        .unwrap_or(span.max(1));
    let per_ms = WIDTH as f64 / span as f64;
    let mut at = first.div_euclid(step) * step;
    if at < first {
        at += step;
    }
    let mut ticks = Vec::new();
    while at < end {
        let stamp = crate::clock::format_time(at.div_euclid(1000));
        let dated = stamp[11..16] == *"00:00" || (ticks.is_empty() && bucket_ms >= 3_600_000);
        let label = if dated {
            format!("{} {}", &stamp[5..10], &stamp[11..16])
        } else {
            stamp[11..16].to_owned()
        };
        ticks.push(Tick {
            at: round((at - first) as f64 * per_ms),
            label,
        });
        at += step;
    }
    ticks
}

/// The ticks of a count axis whose top is `peak`: 0 and every multiple of a round step (1,
/// 2 or 5 times a power of ten) up to the peak, about [`MAX_TICKS`] - 2 of them at most;
/// `at` is the height above the axis, in SVG units of the plot.
pub fn count_ticks(peak: i64) -> Vec<Tick> {
    let zero = Tick {
        at: 0.0,
        label: "0".to_owned(),
    };
    if peak <= 0 {
        return vec![zero];
    }
    let wanted = MAX_TICKS - 2;
    let mut power = 1_i64;
    let step = loop {
        if let Some(step) = [1, 2, 5]
            .iter()
            .map(|m| m * power)
            .find(|step| peak / step <= wanted)
        {
            break step;
        }
        power = power.saturating_mul(10);
    };
    let scale = HEIGHT as f64 / peak as f64;
    let mut ticks = vec![zero];
    let mut n = step;
    while n <= peak {
        ticks.push(Tick {
            at: round(n as f64 * scale),
            label: n.to_string(),
        });
        n += step;
    }
    ticks
}

/// `YYYY-MM-DD HH:MM` (UTC) of unix milliseconds.
fn day_minute(ms: i64) -> String {
    let stamp = crate::clock::format_time(ms.div_euclid(1000));
    format!("{} {}", &stamp[..10], &stamp[11..16])
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// `HH:MM` (UTC) of unix milliseconds.
fn hh_mm(ms: i64) -> String {
    // `YYYY-MM-DDTHH:MM:SSZ`
    crate::clock::format_time(ms.div_euclid(1000))[11..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Locale;

    const MINUTE: i64 = 60_000;

    /// The calls of `outcome` in the bucket at `at`, of rows that name `entry`.
    fn named(at: i64, outcome: &str, entry: Option<ErrorKind>, calls: i64) -> OutcomeCalls {
        OutcomeCalls {
            bucket_ms: at,
            outcome: outcome.to_owned(),
            entry,
            calls,
        }
    }

    /// The calls of `outcome` in the bucket at `at`, of rows that name no entry.
    /// A chart's legend as (class, label, count).
    fn legend(c: &Chart) -> Vec<(&str, &str, i64)> {
        c.legend
            .iter()
            .map(|l| (l.class.as_str(), l.label.as_str(), l.count))
            .collect()
    }

    fn of(at: i64, outcome: &str, calls: i64) -> OutcomeCalls {
        named(at, outcome, None, calls)
    }

    fn counts() -> Vec<OutcomeCalls> {
        vec![
            // Before the window: left out.
            of(0, "ok", 500),
            of(58 * MINUTE, "ok", 3),
            of(58 * MINUTE, "rate_limited", 1),
            of(59 * MINUTE, "ok", 6),
            of(59 * MINUTE, "invoice_not_found", 2),
            of(59 * MINUTE, "insufficient_scope", 4),
            of(59 * MINUTE, "internal_error", 1),
        ]
    }

    fn texts() -> &'static Texts {
        super::super::i18n::texts(Locale::En)
    }

    #[test]
    fn calls_are_stacked_by_outcome_and_scaled_to_the_tallest_bar() {
        let now = 59 * MINUTE + 30_000;
        let c = chart("calls-hour", "t".into(), texts(), &counts(), now, MINUTE, 3);
        assert_eq!(c.total, 17);
        assert_eq!(c.peak, 13);
        assert_eq!(c.bars.len(), 3);
        assert_eq!(c.bars[0].label, "00:57");
        assert!(c.bars[0].segments.is_empty());
        assert_eq!(c.bars[1].total, 4);
        let last = &c.bars[2];
        assert_eq!(last.total, 13);
        let classes: Vec<(&str, i64)> = last
            .segments
            .iter()
            .map(|s| (s.class.as_str(), s.count))
            .collect();
        assert_eq!(
            classes,
            [
                ("ok", 6),
                ("tool", 2),
                ("insufficient_scope", 4),
                ("fault", 1)
            ]
        );
        // Stacked from the bottom up, the tallest bar filling the height.
        assert_eq!(last.segments[0].y + last.segments[0].height, HEIGHT as f64);
        let top = last.segments.last().expect("segments");
        assert!(top.y.abs() < 0.01, "{top:?}");
        assert_eq!(
            legend(&c),
            [
                ("ok", "admitted", 9),
                ("tool", "tool failure", 2),
                ("insufficient_scope", "insufficient_scope", 4),
                ("rate_limited", "rate_limited", 1),
                ("fault", "server or protocol fault", 1),
            ]
        );
    }

    #[test]
    fn a_backends_own_429_is_a_tool_failure_and_our_limits_429_a_refusal() {
        let counts = [
            named(0, "rate_limited", Some(ErrorKind::BackendRateLimited), 5),
            named(0, "rate_limited", Some(ErrorKind::RateLimited), 2),
            named(
                0,
                "insufficient_scope",
                Some(ErrorKind::InsufficientScope),
                1,
            ),
            named(0, "adapter_error", Some(ErrorKind::UpstreamRpcError), 1),
            // A backend's storage outage is its tool's failure; the server's is a fault.
            named(
                0,
                "backend_unavailable",
                Some(ErrorKind::ToolBackendUnavailable),
                3,
            ),
            named(
                0,
                "backend_unavailable",
                Some(ErrorKind::BackendUnavailable),
                4,
            ),
            // A row written before rows named their entry: the first entry of its code.
            of(0, "rate_limited", 1),
        ];
        let c = chart("x", "t".into(), texts(), &counts, 0, MINUTE, 1);
        assert_eq!(
            legend(&c),
            [
                ("tool", "tool failure", 9),
                ("insufficient_scope", "insufficient_scope", 1),
                ("rate_limited", "rate_limited", 3),
                ("fault", "server or protocol fault", 4),
            ]
        );
        assert_eq!(c.total, 17);
        let segments: Vec<(&str, i64)> = c.bars[0]
            .segments
            .iter()
            .map(|s| (s.class.as_str(), s.count))
            .collect();
        assert_eq!(
            segments,
            [
                ("tool", 9),
                ("insufficient_scope", 1),
                ("rate_limited", 3),
                ("fault", 4)
            ]
        );
    }

    /// Every code's colour in a chart's legend, by code.
    fn colours(c: &Chart) -> BTreeMap<String, String> {
        c.legend
            .iter()
            .map(|l| (l.label.clone(), l.class.clone()))
            .collect()
    }

    #[test]
    fn a_code_keeps_its_colour_whatever_its_rank_and_on_both_charts() {
        let codes = [
            "rate_limited",
            "insufficient_scope",
            "plan_upgrade_required",
            "plan_limit_exceeded",
            "idempotency_key_required",
            "idempotency_key_reused",
            "idempotency_key_in_use",
            "a_code_of_a_newer_release",
        ];
        let ranked = |most_first: bool| -> Vec<OutcomeCalls> {
            codes
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let i = i as i64;
                    let calls = if most_first { 10 - i } else { 1 + i };
                    of(0, c, calls)
                })
                .collect()
        };
        let one = chart(
            "calls-hour",
            "t".into(),
            texts(),
            &ranked(true),
            0,
            MINUTE,
            60,
        );
        let other = chart(
            "calls-day",
            "t".into(),
            texts(),
            &ranked(false),
            0,
            60 * MINUTE,
            24,
        );
        // Each code on its own, none folded into an "other" entry however many there are.
        assert_eq!(one.legend.len(), codes.len());
        assert_eq!(colours(&one), colours(&other));
        for code in codes {
            assert_eq!(colours(&one)[code], outcome_colour(code), "{code}");
        }
        assert_eq!(outcome_colour("rate_limited"), "rate_limited");
        assert_eq!(
            outcome_colour("idempotency_key_reused"),
            "idempotency_key_reused"
        );
        // Legend and stack follow the outcomes' own order, not their counts.
        let order: Vec<&str> = one.legend.iter().map(|l| l.label.as_str()).collect();
        let other_order: Vec<&str> = other.legend.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(order, other_order);
    }

    #[test]
    fn a_code_outside_the_catalog_takes_a_palette_colour_by_the_hash_of_its_name() {
        // FNV-1a of the name, modulo the palette: fixed values, whatever the build.
        assert_eq!(outcome_colour("a_code_of_a_newer_release"), "p2");
        assert_eq!(outcome_colour("future_code"), "p4");
        assert_eq!(outcome_colour(""), "p1");
        for code in ["x", "quota_exhausted", "a_code_of_a_newer_release"] {
            assert_eq!(outcome_colour(code), outcome_colour(code));
            let slot: u32 = outcome_colour(code)[1..].parse().expect("p<n>");
            assert!(slot < PALETTE, "{code}");
        }
        let c = chart(
            "x",
            "t".into(),
            texts(),
            &[of(0, "future_code", 3)],
            0,
            MINUTE,
            1,
        );
        assert_eq!(c.legend[0].class, "p4");
        assert_eq!(c.legend[0].label, "future_code");
    }

    #[test]
    fn every_guard_code_of_the_catalog_has_a_colour_of_its_own() {
        for kind in ErrorKind::ALL {
            let spec = kind.spec();
            if spec.class == Class::Guard {
                assert!(WELL_KNOWN.contains(&spec.code), "{}", spec.code);
            }
        }
        let mut seen = WELL_KNOWN.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), WELL_KNOWN.len());
        // Every colour a chart can name has its rule in the stylesheet.
        let css = include_str!("static/console.css");
        let palette = (0..PALETTE).map(|n| format!("p{n}"));
        let fixed = ["ok", "tool", "fault"].map(String::from);
        let all = fixed
            .into_iter()
            .chain(WELL_KNOWN.iter().map(|c| (*c).to_owned()))
            .chain(palette);
        for colour in all {
            assert!(css.contains(&format!(".o-{colour} {{")), "{colour}");
        }
    }

    #[test]
    fn the_time_axis_has_a_tick_at_every_round_time_with_the_date_at_midnight() {
        // The last hour in minutes, from 10:01 to 11:01: a tick every 10 minutes.
        let first = 10 * 3_600_000 + MINUTE;
        let ticks = time_ticks(first, first + 60 * MINUTE, MINUTE);
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["10:10", "10:20", "10:30", "10:40", "10:50", "11:00"]
        );
        // 10:10 is 9 of the 60 minutes along the 600 units.
        assert_eq!(ticks[0].at, 90.0);
        assert_eq!(ticks[5].at, 590.0);
        // The last day in hours, from 13:00 one day to 13:00 the next: every 6 hours,
        // dated at the start and at midnight.
        let day = 86_400_000;
        let first = 20 * day + 13 * 3_600_000;
        let ticks = time_ticks(first, first + day, 3_600_000);
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["01-21 18:00", "01-22 00:00", "06:00", "12:00"],
            "{ticks:?}"
        );
        assert_eq!(ticks[0].at, 125.0);
        assert!(ticks.iter().all(|t| (0.0..=WIDTH as f64).contains(&t.at)));
        // A tick exactly on the left edge counts.
        let ticks = time_ticks(0, 3 * MINUTE, MINUTE);
        assert_eq!(ticks[0].at, 0.0);
        assert_eq!(ticks.len(), 3);
    }

    #[test]
    fn the_count_axis_steps_by_round_numbers_up_to_the_peak() {
        let labels =
            |peak| -> Vec<String> { count_ticks(peak).into_iter().map(|t| t.label).collect() };
        assert_eq!(labels(0), ["0"]);
        assert_eq!(labels(1), ["0", "1"]);
        assert_eq!(labels(3), ["0", "1", "2", "3"]);
        assert_eq!(labels(13), ["0", "5", "10"]);
        assert_eq!(labels(40), ["0", "10", "20", "30", "40"]);
        assert_eq!(labels(1234), ["0", "500", "1000"]);
        // The peak is at the top of the plot, 0 on the axis.
        let ticks = count_ticks(40);
        assert_eq!(ticks[0].at, 0.0);
        assert_eq!(ticks[4].at, HEIGHT as f64);
        assert_eq!(ticks[2].at, HEIGHT as f64 / 2.0);
    }

    #[test]
    fn a_chart_carries_both_axes_and_its_window() {
        let now = 59 * MINUTE + 30_000;
        let c = chart(
            "calls-hour",
            "t".into(),
            texts(),
            &counts(),
            now,
            MINUTE,
            60,
        );
        assert_eq!(
            c.x_ticks.first().map(|t| t.label.as_str()),
            Some("01-01 00:00")
        );
        assert_eq!(c.x_ticks.len(), 6);
        assert_eq!(c.y_ticks.last().map(|t| t.label.as_str()), Some("400"));
        assert_eq!(
            (c.from.as_str(), c.to.as_str()),
            ("1970-01-01 00:00", "1970-01-01 01:00")
        );
    }

    #[test]
    fn an_empty_window_draws_empty_bars() {
        let texts = super::super::i18n::texts(Locale::Es);
        let c = chart("x", "t".into(), texts, &[], 3_600_000, MINUTE, 60);
        assert_eq!((c.total, c.peak, c.bars.len()), (0, 0, 60));
        assert!(c.bars.iter().all(|b| b.segments.is_empty()));
    }
}
