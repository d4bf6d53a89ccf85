//! The overview's charts: calls per time bucket, stacked by outcome, laid out as the
//! rectangles of a server-rendered SVG (the template draws them; nothing runs in the
//! browser).
//!
//! An outcome is `ok` (admitted and answered), a tool failure (the catalog's `Tool`
//! class: the call ran and failed), a guard's refusal — each of the most frequent codes
//! on its own, the rest together — or a fault (protocol, transport or server).

use std::collections::BTreeMap;

use serde::Serialize;

use super::i18n::Texts;
use crate::catalog::{Class, ErrorKind};

/// The drawing's width and height in SVG units (it scales to the page).
pub const WIDTH: i64 = 600;
pub const HEIGHT: i64 = 160;
/// Guard codes drawn each in a colour of their own; the rest share one.
const GUARD_COLOURS: usize = 6;

/// What an outcome is drawn as.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Series {
    Ok,
    Tool,
    Guard(String),
    OtherGuards,
    Fault,
}

/// The class of the catalog entry an audit outcome names (the first, for a shared code).
fn class_of(outcome: &str) -> Option<Class> {
    ErrorKind::with_code(outcome).next().map(|k| k.spec().class)
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

/// One chart, ready for the template.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Chart {
    pub id: &'static str,
    pub title: String,
    pub width: i64,
    pub height: i64,
    /// Every call in the window.
    pub total: i64,
    /// The tallest bar (the top of the scale).
    pub peak: i64,
    pub bars: Vec<Bar>,
    pub legend: Vec<Legend>,
}

/// The chart of `buckets` buckets of `bucket_ms` ending with the one holding `now_ms`,
/// from `counts` (`(bucket start, outcome, calls)`, as the store gives them).
pub fn chart(
    id: &'static str,
    title: String,
    texts: &Texts,
    counts: &[(i64, String, i64)],
    now_ms: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Chart {
    let last = now_ms.div_euclid(bucket_ms) * bucket_ms;
    let first = last - (buckets - 1) * bucket_ms;
    // The guard codes with the most calls get colours of their own.
    let mut guard_totals: BTreeMap<&str, i64> = BTreeMap::new();
    for (at, outcome, calls) in counts {
        if *at >= first && class_of(outcome) == Some(Class::Guard) {
            *guard_totals.entry(outcome).or_default() += calls;
        }
    }
    let mut ranked: Vec<(&str, i64)> = guard_totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let coloured: Vec<&str> = ranked.iter().take(GUARD_COLOURS).map(|(c, _)| *c).collect();
    let series_of = |outcome: &str| match class_of(outcome) {
        _ if outcome == "ok" => Series::Ok,
        Some(Class::Tool) => Series::Tool,
        Some(Class::Guard) if coloured.contains(&outcome) => Series::Guard(outcome.to_owned()),
        Some(Class::Guard) => Series::OtherGuards,
        _ => Series::Fault,
    };
    let mut per_bucket: BTreeMap<i64, BTreeMap<Series, i64>> = BTreeMap::new();
    let mut per_series: BTreeMap<Series, i64> = BTreeMap::new();
    for (at, outcome, calls) in counts
        .iter()
        .filter(|(at, _, _)| (first..=last).contains(at))
    {
        let series = series_of(outcome);
        *per_bucket
            .entry(*at)
            .or_default()
            .entry(series.clone())
            .or_default() += calls;
        *per_series.entry(series).or_default() += calls;
    }
    let class_name = |s: &Series| match s {
        Series::Ok => "ok".to_owned(),
        Series::Tool => "tool".to_owned(),
        Series::Guard(code) => {
            let rank = coloured.iter().position(|c| c == code).unwrap_or(0);
            format!("g{rank}")
        }
        Series::OtherGuards => "guard-other".to_owned(),
        Series::Fault => "fault".to_owned(),
    };
    let label = |s: &Series| match s {
        Series::Ok => texts.get("outcome_ok").to_owned(),
        Series::Tool => texts.get("outcome_tool").to_owned(),
        Series::Guard(code) => code.clone(),
        Series::OtherGuards => texts.get("outcome_other_guards").to_owned(),
        Series::Fault => texts.get("outcome_fault").to_owned(),
    };
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
                                class: class_name(series),
                                label: label(series),
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
            class: class_name(series),
            label: label(series),
            count: *count,
        })
        .collect();
    Chart {
        id,
        title,
        width: WIDTH,
        height: HEIGHT,
        total: per_series.values().sum(),
        peak,
        bars,
        legend,
    }
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

    fn counts() -> Vec<(i64, String, i64)> {
        vec![
            // Before the window: left out.
            (0, "ok".into(), 500),
            (58 * MINUTE, "ok".into(), 3),
            (58 * MINUTE, "rate_limited".into(), 1),
            (59 * MINUTE, "ok".into(), 6),
            (59 * MINUTE, "invoice_not_found".into(), 2),
            (59 * MINUTE, "insufficient_scope".into(), 4),
            (59 * MINUTE, "internal_error".into(), 1),
        ]
    }

    #[test]
    fn calls_are_stacked_by_outcome_and_scaled_to_the_tallest_bar() {
        let texts = super::super::i18n::texts(Locale::En);
        let now = 59 * MINUTE + 30_000;
        let c = chart("calls-hour", "t".into(), texts, &counts(), now, MINUTE, 3);
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
        assert_eq!(classes, [("ok", 6), ("tool", 2), ("g0", 4), ("fault", 1)]);
        // Stacked from the bottom up, the tallest bar filling the height.
        assert_eq!(last.segments[0].y + last.segments[0].height, HEIGHT as f64);
        let top = last.segments.last().expect("segments");
        assert!(top.y.abs() < 0.01, "{top:?}");
        let legend: Vec<(&str, &str, i64)> = c
            .legend
            .iter()
            .map(|l| (l.class.as_str(), l.label.as_str(), l.count))
            .collect();
        assert_eq!(
            legend,
            [
                ("ok", "admitted", 9),
                ("tool", "tool failure", 2),
                ("g0", "insufficient_scope", 4),
                ("g1", "rate_limited", 1),
                ("fault", "server or protocol fault", 1),
            ]
        );
    }

    #[test]
    fn past_six_guard_codes_the_rarest_share_one_colour() {
        let texts = super::super::i18n::texts(Locale::En);
        let codes = [
            "rate_limited",
            "insufficient_scope",
            "plan_upgrade_required",
            "plan_limit_exceeded",
            "idempotency_key_required",
            "idempotency_key_reused",
            "idempotency_key_in_use",
        ];
        let counts: Vec<(i64, String, i64)> = codes
            .iter()
            .enumerate()
            .map(|(i, c)| (0, (*c).to_owned(), 10 - i as i64))
            .collect();
        let c = chart("x", "t".into(), texts, &counts, 0, MINUTE, 1);
        let classes: Vec<&str> = c.legend.iter().map(|l| l.class.as_str()).collect();
        assert_eq!(classes, ["g4", "g5", "g1", "g3", "g2", "g0", "guard-other"]);
        assert_eq!(c.legend.last().map(|l| l.count), Some(4));
    }

    #[test]
    fn an_empty_window_draws_empty_bars() {
        let texts = super::super::i18n::texts(Locale::Es);
        let c = chart("x", "t".into(), texts, &[], 3_600_000, MINUTE, 60);
        assert_eq!((c.total, c.peak, c.bars.len()), (0, 0, 60));
        assert!(c.bars.iter().all(|b| b.segments.is_empty()));
    }
}
