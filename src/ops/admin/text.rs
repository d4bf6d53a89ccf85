//! Text the operator's commands read and print: durations (`30d`), times (UTC, ISO 8601)
//! and strings made safe for a terminal.

use std::time::Duration;

/// `text` with every character that is not printable — controls (newline, escape, …),
/// and the invisible format characters that reorder or hide text (bidi overrides,
/// zero-width marks) — written as a Rust-style escape (`\n`, `\u{1b}`), and `\` as `\\`.
pub fn escape_for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_invisible_format(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// Unicode format characters (category Cf) that change how a line reads without showing.
pub(super) fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// Parses `90s`, `15m`, `12h`, `30d`, `2w` (or `0`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let help = || {
        format!(
            "invalid duration {text:?}: write a number and a unit, e.g. 90s, 15m, 12h, 30d or 2w"
        )
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(help)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| help())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(help()),
    };
    number
        .checked_mul(unit_secs)
        .map(Duration::from_secs)
        .ok_or_else(help)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for unix seconds.
pub fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(super) fn format_time_ms(ms: i64) -> String {
    let base = format_time(ms.div_euclid(1000));
    format!("{}.{:03}Z", base.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "h", "10", "5y", "-1d", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn terminal_output_escapes_what_is_not_printable() {
        assert_eq!(
            escape_for_terminal("x\nFAKE ROW\u{1b}[5m"),
            "x\\nFAKE ROW\\u{1b}[5m"
        );
        assert_eq!(escape_for_terminal("a\\b\tc\r"), "a\\\\b\\tc\\r");
        assert_eq!(
            escape_for_terminal("abc\u{202e}gpj.exe"),
            "abc\\u{202e}gpj.exe"
        );
        assert_eq!(escape_for_terminal("crear_factura_ñ"), "crear_factura_ñ");
        assert_eq!(escape_for_terminal("\u{7f}\u{9b}"), "\\u{7f}\\u{9b}");
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(
            format_time_ms(1_709_210_096_789),
            "2024-02-29T12:34:56.789Z"
        );
    }
}
