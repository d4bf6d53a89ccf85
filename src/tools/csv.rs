//! CSV as the exports write it (the invoicing pack's `export_invoices`, the console's audit
//! log): RFC 4180 quoting, and fields a spreadsheet would run as a formula defused.

/// The first characters that make a spreadsheet read a cell as a formula: `=`, `+`, `-`,
/// `@`, a tab or a carriage return, and their fullwidth forms (`＝` `＋` `－` `＠`), which
/// spreadsheets set to East Asian input read as the ASCII ones.
const FORMULA_STARTS: [char; 10] = [
    '=', '+', '-', '@', '\t', '\r', '\u{FF1D}', '\u{FF0B}', '\u{FF0D}', '\u{FF20}',
];

/// One CSV field: quoted when it holds a comma, a quote or a line break; prefixed with `'`
/// when it starts like a formula ([`FORMULA_STARTS`]; names, tool names and request ids
/// come from clients, and a spreadsheet would run such a field).
pub fn field(text: &str) -> String {
    let defused = if text.starts_with(FORMULA_STARTS) {
        format!("'{text}")
    } else {
        text.to_owned()
    };
    if defused.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", defused.replace('"', "\"\""))
    } else {
        defused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_and_defused() {
        assert_eq!(field("Acme SL"), "Acme SL");
        assert_eq!(field("Acme, S.L."), "\"Acme, S.L.\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(field("=1,2"), "\"'=1,2\"");
        assert_eq!(field("-1,2"), "\"'-1,2\"");
        assert_eq!(field("line\nbreak"), "\"line\nbreak\"");
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("＝HYPERLINK(1)"), "'＝HYPERLINK(1)");
        assert_eq!(field("＋1"), "'＋1");
        assert_eq!(field("－1"), "'－1");
        assert_eq!(field("＠SUM(A1)"), "'＠SUM(A1)");
        assert_eq!(field("a＝b"), "a＝b");
    }
}
