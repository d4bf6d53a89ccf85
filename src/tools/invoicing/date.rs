//! Calendar dates as the tools speak them: `YYYY-MM-DD`, proleptic Gregorian, no time
//! zone, years 1000 to 9999. "Today" is the UTC date of the server's [`Clock`].
//!
//! The calendar is `chrono`'s [`NaiveDate`]; this type keeps the tools' narrower rules: the
//! exact text form (four-digit year, two-digit month and day, ASCII digits only) and the
//! range of years.

use std::fmt;

use chrono::{Datelike, NaiveDate};

use crate::clock::Clock;

/// A valid calendar date between years 1000 and 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(NaiveDate);

/// The years a [`Date`] may have: four digits.
const YEARS: std::ops::RangeInclusive<i32> = 1000..=9999;
/// The first day of [`YEARS`].
const FIRST: NaiveDate = NaiveDate::from_ymd_opt(1000, 1, 1).expect("a date");
/// The last day of [`YEARS`].
const LAST: NaiveDate = NaiveDate::from_ymd_opt(9999, 12, 31).expect("a date");

impl Date {
    /// Parses exactly `YYYY-MM-DD` and checks the day exists (leap years included).
    pub fn parse(text: &str) -> Option<Date> {
        let b = text.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<u32> {
            let part = &b[range];
            part.iter().all(u8::is_ascii_digit).then(|| {
                part.iter()
                    .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'))
            })
        };
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let year = i32::try_from(year).ok().filter(|y| YEARS.contains(y))?;
        NaiveDate::from_ymd_opt(year, month, day).map(Date)
    }

    /// Today's date in UTC, by `clock`.
    pub fn today(clock: &Clock) -> Date {
        Date::from_days(clock.unix_secs().max(0) / 86_400)
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        i64::from(self.0.to_epoch_days())
    }

    /// The date `days` after 1970-01-01; a day outside years 1000 to 9999 is held to the
    /// first or last day of that range.
    pub fn from_days(days: i64) -> Date {
        let first = i64::from(FIRST.to_epoch_days());
        let last = i64::from(LAST.to_epoch_days());
        let days = i32::try_from(days.clamp(first, last)).unwrap_or_default();
        Date(NaiveDate::from_epoch_days(days).unwrap_or(FIRST))
    }

    /// The date `n` days later (earlier when negative).
    pub fn add_days(self, n: i64) -> Date {
        Date::from_days(self.days().saturating_add(n))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        write!(f, "{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_real_dates() {
        assert_eq!(
            Date::parse("2024-02-29").map(|d| d.to_string()),
            Some("2024-02-29".into())
        );
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-00-10",
            "2024-04-31",
            "24-01-01",
            "2024/01/01",
            "2024-1-01",
            "",
            "２０24-01-01",
        ] {
            assert_eq!(Date::parse(bad), None, "{bad}");
        }
        assert_eq!(Date::parse("1900-02-29"), None);
        assert!(Date::parse("2000-02-29").is_some());
    }

    #[test]
    fn day_numbers_round_trip() {
        assert_eq!(Date::parse("1970-01-01").map(Date::days), Some(0));
        assert_eq!(Date::parse("2000-03-01").map(Date::days), Some(11_017));
        for days in [-200_000i64, -1, 0, 59, 10_957, 20_000, 2_000_000] {
            assert_eq!(Date::from_days(days).days(), days);
        }
        let d = Date::parse("2024-12-31").expect("date");
        assert_eq!(d.add_days(1).to_string(), "2025-01-01");
        assert_eq!(d.add_days(-366).to_string(), "2023-12-31");
        // Out of the four-digit years: held to their ends.
        assert_eq!(Date::from_days(-2_000_000).to_string(), "1000-01-01");
        assert_eq!(Date::from_days(i64::MAX).to_string(), "9999-12-31");
        assert_eq!(d.add_days(i64::MIN).to_string(), "1000-01-01");
    }

    #[test]
    fn today_turns_over_at_midnight_utc() {
        let clock = crate::clock::ManualClock::at_unix_secs(1_735_689_599); // 2024-12-31T23:59:59Z
        assert_eq!(Date::today(&clock.clock()).to_string(), "2024-12-31");
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(Date::today(&clock.clock()).to_string(), "2025-01-01");
    }
}
