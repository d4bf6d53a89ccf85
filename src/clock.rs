//! The server's one clock. Everything that decides by the time — rate windows, the
//! authentication throttle, session idle expiry, idempotency leases, credential and
//! access-token expiry, the token endpoint's limiter, audit summaries and retention, and
//! the invoicing dates — reads it from the [`Clock`] the server was built with, never
//! from the operating system on its own.
//!
//! A running server uses [`Clock::System`]. Tests build it on a [`ManualClock`] they set
//! and advance, so a window edge or an expiry is reached exactly, without waiting.
//! Nothing shifts the clock of a running server: there is no global clock and no setting
//! for it. Measured durations (latency metrics, deadlines of waits, back-off) are not
//! readings of the time of day and stay on [`std::time::Instant`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};

/// Where "now" comes from. Cheap to clone (a manual clock is shared, not copied).
#[derive(Debug, Clone)]
pub enum Clock {
    /// The operating system's clocks.
    System,
    /// The operating system's clock corrected to a reference that several processes share
    /// (the database server's, on a PostgreSQL store), so that nodes whose own clocks are
    /// skewed still read one time: one rate window, one expiry.
    Shared(SharedClock),
    /// A clock that moves only when it is set or advanced.
    Manual(ManualClock),
}

/// The correction of a [`Clock::Shared`]: how far the reference is ahead of this
/// machine's clock, in milliseconds (negative when behind), re-measured while it runs.
#[derive(Debug, Clone, Default)]
pub struct SharedClock(Arc<AtomicI64>);

impl SharedClock {
    /// A correction of `offset_millis`.
    pub fn with_offset(offset_millis: i64) -> SharedClock {
        SharedClock(Arc::new(AtomicI64::new(offset_millis)))
    }

    /// The [`Clock`] that reads the system clock with this correction.
    pub fn clock(&self) -> Clock {
        Clock::Shared(self.clone())
    }

    /// The correction now, in milliseconds.
    pub fn offset_millis(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Replaces the correction (a new measurement).
    pub fn set_offset_millis(&self, offset_millis: i64) {
        self.0.store(offset_millis, Ordering::Relaxed);
    }
}

fn system_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The start of [`Clock::monotonic`] on the system clock.
static MONOTONIC_ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Clock {
    /// Unix seconds now (whole seconds, rounded down).
    pub fn unix_secs(&self) -> i64 {
        self.unix_millis().div_euclid(1000)
    }

    /// Unix milliseconds now.
    pub fn unix_millis(&self) -> i64 {
        match self {
            Clock::System => system_millis(),
            Clock::Shared(shared) => system_millis().saturating_add(shared.offset_millis()),
            Clock::Manual(manual) => manual.unix_millis(),
        }
    }

    /// Time elapsed since an arbitrary origin that never moves back on the system clock
    /// (setting the computer's clock does not change it): for idle expiries kept in
    /// memory. On a manual clock it is the time set, so both readings move together.
    pub fn monotonic(&self) -> Duration {
        match self {
            Clock::System | Clock::Shared(_) => MONOTONIC_ORIGIN.elapsed(),
            Clock::Manual(manual) => {
                Duration::from_millis(u64::try_from(manual.unix_millis()).unwrap_or(0))
            }
        }
    }
}

/// A settable clock, shared by every copy of the [`Clock`] made from it.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `secs` unix seconds.
    pub fn at_unix_secs(secs: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(secs.saturating_mul(1000))))
    }

    /// The [`Clock`] that reads this one.
    pub fn clock(&self) -> Clock {
        Clock::Manual(self.clone())
    }

    /// Unix milliseconds it stands at.
    pub fn unix_millis(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves it to `secs` unix seconds (backwards too).
    pub fn set_unix_secs(&self, secs: i64) {
        self.0.store(secs.saturating_mul(1000), Ordering::SeqCst);
    }

    /// Moves it to `millis` unix milliseconds (backwards too).
    pub fn set_unix_millis(&self, millis: i64) {
        self.0.store(millis, Ordering::SeqCst);
    }

    /// Moves it forward by `by`.
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for unix seconds (held to the years `chrono` can represent,
/// ±262 000).
pub fn format_time(secs: i64) -> String {
    let at = DateTime::from_timestamp(secs, 0).unwrap_or(if secs < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    });
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for unix milliseconds.
pub fn format_time_ms(ms: i64) -> String {
    let base = format_time(ms.div_euclid(1000));
    format!("{}.{:03}Z", base.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Unix seconds of a UTC time written `YYYY-MM-DDTHH:MM` (an HTML `datetime-local`
/// value, seconds optional) or `YYYY-MM-DD` (midnight); `None` when it is not one.
pub fn parse_utc_minute(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = text.split_once(['T', ' ']).unwrap_or((text, "00:00"));
    let number = |part: &str, range: std::ops::RangeInclusive<u32>| {
        let n: u32 = part.parse().ok()?;
        (part.bytes().all(|b| b.is_ascii_digit()) && range.contains(&n)).then_some(n)
    };
    let mut date_parts = date.split('-');
    let y = number(date_parts.next()?, 1970..=9999)?;
    let m = number(date_parts.next()?, 1..=12)?;
    let d = number(date_parts.next()?, 1..=31)?;
    let mut time_parts = time.split(':');
    let hh = number(time_parts.next()?, 0..=23)?;
    let mm = number(time_parts.next()?, 0..=59)?;
    let ss = time_parts.next().map_or(Some(0), |s| number(s, 0..=59))?;
    if date_parts.next().is_some() || time_parts.next().is_some() {
        return None;
    }
    // 31 February and the like are no date.
    let day = NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, m, d)?;
    Some(day.and_hms_opt(hh, mm, ss)?.and_utc().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_every_copy_sees_it() {
        let manual = ManualClock::at_unix_secs(1_800_000_000);
        let clock = manual.clock();
        let copy = clock.clone();
        assert_eq!(clock.unix_secs(), 1_800_000_000);
        assert_eq!(clock.unix_millis(), 1_800_000_000_000);
        manual.advance(Duration::from_millis(1_999));
        assert_eq!(copy.unix_secs(), 1_800_000_001);
        assert_eq!(copy.unix_millis(), 1_800_000_001_999);
        assert_eq!(copy.monotonic(), Duration::from_millis(1_800_000_001_999));
        manual.set_unix_secs(60);
        assert_eq!(clock.unix_secs(), 60);
        manual.set_unix_millis(-1);
        assert_eq!(clock.unix_secs(), -1);
        assert_eq!(clock.monotonic(), Duration::ZERO);
    }

    #[test]
    fn a_shared_clock_is_the_system_clock_moved_by_its_correction() {
        let shared = SharedClock::with_offset(3_600_000);
        let clock = shared.clock();
        let system = Clock::System.unix_secs();
        assert!((clock.unix_secs() - system - 3_600).abs() <= 1);
        shared.set_offset_millis(-60_000);
        assert!((clock.unix_secs() - system + 60).abs() <= 1);
        assert_eq!(shared.offset_millis(), -60_000);
    }

    #[test]
    fn the_system_clock_reads_the_time_of_day() {
        let clock = Clock::System;
        let secs = clock.unix_secs();
        // After 2020 and agreeing with the millisecond reading.
        assert!(secs > 1_577_836_800);
        assert!((clock.unix_millis() / 1000 - secs).abs() <= 1);
        let first = clock.monotonic();
        assert!(clock.monotonic() >= first);
    }

    #[test]
    fn utc_times_are_written_and_read_back() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(
            format_time_ms(1_709_210_096_789),
            "2024-02-29T12:34:56.789Z"
        );
        assert_eq!(parse_utc_minute("2024-02-29T12:34"), Some(1_709_210_040));
        assert_eq!(parse_utc_minute("2024-02-29T12:34:56"), Some(1_709_210_096));
        assert_eq!(parse_utc_minute("1970-01-01"), Some(0));
        assert_eq!(format_time(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_time_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_time(i64::MAX), "262142-12-31T23:59:59Z");
        for bad in [
            "",
            "2023-02-29T00:00",
            "2024-13-01",
            "2024-01-01T24:00",
            "x",
            "2024-1-1T1:1:1:1",
        ] {
            assert_eq!(parse_utc_minute(bad), None, "{bad}");
        }
    }
}
