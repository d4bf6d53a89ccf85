//! Text the operator's commands read and print: durations (`30d`), times (UTC, ISO 8601,
//! from [`crate::clock`]) and strings made safe for a terminal.

pub use crate::clock::{format_time, format_time_ms};

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
}
