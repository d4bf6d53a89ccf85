//! Calendar dates as the tools speak them: `YYYY-MM-DD`, proleptic Gregorian, no time
//! zone. "Today" is the UTC date of the server's [`Clock`].
//!
//! Conversions use the days-from-civil algorithm (H. Hinnant), in integers.

use std::fmt;

use crate::clock::Clock;

/// A valid calendar date between years 1000 and 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    year: i32,
    month: u8,
    day: u8,
}

impl Date {
    /// Parses exactly `YYYY-MM-DD` and checks the day exists (leap years included).
    pub fn parse(text: &str) -> Option<Date> {
        let b = text.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<i32> {
            let part = &b[range];
            part.iter().all(u8::is_ascii_digit).then(|| {
                part.iter()
                    .fold(0i32, |acc, &d| acc * 10 + i32::from(d - b'0'))
            })
        };
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        let month = u8::try_from(month).ok()?;
        let day = u8::try_from(day).ok()?;
        let valid = (1000..=9999).contains(&year)
            && (1..=12).contains(&month)
            && day >= 1
            && day <= days_in_month(year, month);
        valid.then_some(Date { year, month, day })
    }

    /// Today's date in UTC, by `clock`.
    pub fn today(clock: &Clock) -> Date {
        Date::from_days(clock.unix_secs().max(0) / 86_400)
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        crate::clock::days_from_civil(
            i64::from(self.year),
            i64::from(self.month),
            i64::from(self.day),
        )
    }

    /// The date `days` after 1970-01-01.
    pub fn from_days(days: i64) -> Date {
        let (year, month, day) = crate::clock::civil_from_days(days);
        Date {
            year: i32::try_from(year).unwrap_or(9999).clamp(1000, 9999),
            month: u8::try_from(month).unwrap_or(1),
            day: u8::try_from(day).unwrap_or(1),
        }
    }

    /// The date `n` days later (earlier when negative).
    pub fn add_days(self, n: i64) -> Date {
        Date::from_days(self.days() + n)
    }
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
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
    }

    #[test]
    fn today_turns_over_at_midnight_utc() {
        let clock = crate::clock::ManualClock::at_unix_secs(1_735_689_599); // 2024-12-31T23:59:59Z
        assert_eq!(Date::today(&clock.clock()).to_string(), "2024-12-31");
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(Date::today(&clock.clock()).to_string(), "2025-01-01");
    }
}
