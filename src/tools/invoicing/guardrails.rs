//! The fiscal guardrails: declarative rules checked on a tool's arguments and the current
//! state **before** the tool runs (the guardrails step of the chain), each with a guide the
//! model can read.
//!
//! A violation is `-32008 mcp_guardrail_violation` carrying `rule_id`, `subcode` and
//! `guardrail_uri` (`tollgate://guardrails/<rule_id>`, served as markdown by
//! [`super::resources`](mod@super::resources)). The checks that depend on state are run again inside the tool's
//! write transaction, so two concurrent calls cannot both slip past one.
//!
//! Guardrails see arguments before schema validation: a field they cannot read (missing,
//! mistyped) lets the rule pass and leaves the report to validation.

use serde_json::{Map, Value};

use super::args::integer;
use super::date::Date;
use super::model::{Client, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, LinePricing, Totals};
use crate::catalog::{ErrorKind, McpError, Suggestion};
use crate::clock::Clock;
use crate::store::Store;
use crate::store::invoicing as db;
use crate::store::store_failure;
use crate::tools::Book;

/// The URI prefix of every guardrail guide.
pub const URI_PREFIX: &str = "tollgate://guardrails/";

/// The legal VAT rates (whole percent) per company country. Spain: general 21 %, reduced
/// 10 %, super-reduced 4 %, and 0 % for exempt or zero-rated supplies (Ley 37/1992, arts.
/// 90–91). Countries with fractional rates are not listed: rates are whole percentages.
pub const LEGAL_VAT_RATES: &[(&str, &[i64])] = &[
    ("ES", &[21, 10, 4, 0]),
    ("PT", &[23, 13, 6, 0]),
    ("DE", &[19, 7, 0]),
    ("IT", &[22, 10, 5, 4, 0]),
    ("NL", &[21, 9, 0]),
    ("BE", &[21, 12, 6, 0]),
    ("AT", &[20, 13, 10, 0]),
];

/// Ceiling of a simplified invoice, VAT included: 400 € (RD 1619/2012, art. 4.1). The
/// 3 000 € ceiling of some retail sectors (art. 4.2) is not modelled.
pub const SIMPLIFIED_INVOICE_CEILING_CENTS: i64 = 40_000;

/// One guardrail: its id (also the last segment of its URI) and its guide.
#[derive(Debug)]
pub struct Rule {
    /// Stable id, sent as `rule_id`.
    pub id: &'static str,
    /// Human title.
    pub title: &'static str,
    /// One-line summary (the resource description).
    pub summary: &'static str,
    /// The markdown guide served at the rule's URI.
    pub guide: &'static str,
}

impl Rule {
    /// `tollgate://guardrails/<id>`.
    pub fn uri(&self) -> String {
        format!("{URI_PREFIX}{}", self.id)
    }

    /// A violation of this rule.
    pub fn violation(&self, subcode: &'static str) -> McpError {
        McpError::new(ErrorKind::GuardrailViolation)
            .with("rule_id", self.id)
            .with("subcode", subcode)
            .with("guardrail_uri", self.uri())
    }
}

/// An issued invoice is never deleted.
pub const ISSUED_INVOICE_IMMUTABLE: Rule = Rule {
    id: "issued-invoice-immutable",
    title: "An issued invoice is never deleted",
    summary: "Issued, paid and voided invoices are part of the legal record: void or rectify them, never delete them.",
    guide: include_str!("guides/issued-invoice-immutable.md"),
};

/// A voided or rectifying invoice is not voided again.
pub const NO_DOUBLE_VOID: Rule = Rule {
    id: "no-double-void",
    title: "A voided or rectifying invoice is not voided again",
    summary: "Only an issued (or paid) ordinary invoice can be voided, and only once.",
    guide: include_str!("guides/no-double-void.md"),
};

/// VAT rates come from the legal set of the company's country.
pub const LEGAL_VAT_RATES_RULE: Rule = Rule {
    id: "legal-vat-rates",
    title: "VAT rates only from the legal set",
    summary: "Every line's vat_rate must be one of the legal rates of the company's country (Spain: 21, 10, 4, 0).",
    guide: include_str!("guides/legal-vat-rates.md"),
};

/// Issue dates never go backwards within a series.
pub const ISSUE_DATE_ORDER: Rule = Rule {
    id: "issue-date-order",
    title: "Issue dates never go backwards within a series",
    summary: "An invoice cannot be issued with a date earlier than the last invoice issued in its series.",
    guide: include_str!("guides/issue-date-order.md"),
};

/// A full invoice needs the client's tax id.
pub const FULL_INVOICE_TAX_ID: Rule = Rule {
    id: "full-invoice-tax-id",
    title: "A full invoice needs the client's tax id",
    summary: "A full (complete) invoice can only be issued to a client with a valid NIF, NIE or CIF.",
    guide: include_str!("guides/full-invoice-tax-id.md"),
};

/// A simplified invoice stays under its legal ceiling.
pub const SIMPLIFIED_INVOICE_CEILING: Rule = Rule {
    id: "simplified-invoice-ceiling",
    title: "A simplified invoice stays under its legal ceiling",
    summary: "A simplified invoice may not exceed 400.00 EUR, VAT included.",
    guide: include_str!("guides/simplified-invoice-ceiling.md"),
};

/// Every guardrail, in the order the guides are listed.
pub const RULES: [&Rule; 6] = [
    &FULL_INVOICE_TAX_ID,
    &ISSUE_DATE_ORDER,
    &ISSUED_INVOICE_IMMUTABLE,
    &LEGAL_VAT_RATES_RULE,
    &NO_DOUBLE_VOID,
    &SIMPLIFIED_INVOICE_CEILING,
];

/// The violation that the guardrails of `tool` report most often, with the fields a real
/// occurrence has (a VAT rate outside the Spanish set, a full invoice to a client without
/// a tax id, an issued invoice deleted or voided twice): what a rehearsed
/// `mcp_guardrail_violation` of that tool answers. `None` for a tool without guardrails.
pub fn example_violation(tool: &str) -> Option<McpError> {
    const INVOICE: &str = "inv_01a2b3c4-0000-7000-8000-000000000001";
    let example = match tool {
        "create_invoice" | "update_invoice" => check_vat_rate("ES", 0, 7).err()?,
        "issue_invoice" => FULL_INVOICE_TAX_ID
            .violation("client_tax_id_missing")
            .detail("client_id", "cli_01a2b3c4-0000-7000-8000-000000000001")
            .suggest(Suggestion::AddTaxIdOrSimplify),
        "delete_invoice" => ISSUED_INVOICE_IMMUTABLE
            .violation("invoice_issued")
            .param("invoice_id")
            .detail("invoice_id", INVOICE)
            .detail("status", InvoiceStatus::Issued.as_str())
            .suggest(Suggestion::VoidInstead),
        "void_invoice" => NO_DOUBLE_VOID
            .violation("invoice_already_void")
            .param("invoice_id")
            .detail("invoice_id", INVOICE)
            .detail("status", InvoiceStatus::Void.as_str())
            .detail("kind", InvoiceKind::Full.as_str()),
        _ => return None,
    };
    Some(example)
}

/// The legal VAT rates of `country`, if it is known.
pub fn allowed_vat_rates(country: &str) -> Option<&'static [i64]> {
    LEGAL_VAT_RATES
        .iter()
        .find(|(c, _)| *c == country)
        .map(|(_, rates)| *rates)
}

// ---- Pure checks (on values; used before the tool and again inside its transaction) -------

/// Line `index` (0-based) has a legal VAT rate for `country`.
pub fn check_vat_rate(country: &str, index: usize, rate: i64) -> Result<(), McpError> {
    let Some(allowed) = allowed_vat_rates(country) else {
        return Err(LEGAL_VAT_RATES_RULE
            .violation("country_without_vat_table")
            .detail("country", country));
    };
    if allowed.contains(&rate) {
        return Ok(());
    }
    Err(LEGAL_VAT_RATES_RULE
        .violation("vat_rate_not_allowed")
        .param(format!("lines.{index}.vat_rate"))
        .detail("vat_rate", rate)
        .detail("allowed_rates", allowed)
        .detail("country", country))
}

/// A simplified invoice's amount, VAT included, is within the ceiling.
pub fn check_simplified_ceiling(kind: InvoiceKind, totals: &Totals) -> Result<(), McpError> {
    let with_vat = totals.subtotal_cents.saturating_add(totals.vat_cents);
    if kind != InvoiceKind::Simplified || with_vat <= SIMPLIFIED_INVOICE_CEILING_CENTS {
        return Ok(());
    }
    Err(SIMPLIFIED_INVOICE_CEILING
        .violation("total_above_ceiling")
        .param("lines")
        .detail("total_with_vat_cents", with_vat)
        .detail("ceiling_cents", SIMPLIFIED_INVOICE_CEILING_CENTS)
        .suggest(Suggestion::IssueFullInvoice))
}

/// `issue_date` is not before the last issue date of `series`.
pub fn check_issue_date_order(
    series: &str,
    issue_date: &str,
    last_issue_date: Option<&str>,
) -> Result<(), McpError> {
    match last_issue_date {
        Some(last) if issue_date < last => Err(ISSUE_DATE_ORDER
            .violation("issue_date_before_last_in_series")
            .param("issue_date")
            .detail("series", series)
            .detail("issue_date", issue_date)
            .detail("last_issue_date", last)),
        _ => Ok(()),
    }
}

/// A full invoice's client has a tax id.
pub fn check_recipient_tax_id(kind: InvoiceKind, client: &Client) -> Result<(), McpError> {
    if kind != InvoiceKind::Full || client.tax_id.is_some() {
        return Ok(());
    }
    Err(FULL_INVOICE_TAX_ID
        .violation("client_tax_id_missing")
        .detail("client_id", client.id.as_str())
        .suggest(Suggestion::AddTaxIdOrSimplify))
}

/// Only drafts may be deleted.
pub fn check_deletable(invoice: &Invoice) -> Result<(), McpError> {
    let subcode = match invoice.status {
        InvoiceStatus::Draft => return Ok(()),
        InvoiceStatus::Issued => "invoice_issued",
        InvoiceStatus::Paid => "invoice_paid",
        InvoiceStatus::Void => "invoice_void",
    };
    Err(ISSUED_INVOICE_IMMUTABLE
        .violation(subcode)
        .param("invoice_id")
        .detail("invoice_id", invoice.id.as_str())
        .detail("status", invoice.status.as_str())
        .suggest(Suggestion::VoidInstead))
}

/// Neither a voided invoice nor a rectifying one is voided.
pub fn check_voidable(invoice: &Invoice) -> Result<(), McpError> {
    let subcode = if invoice.status == InvoiceStatus::Void {
        "invoice_already_void"
    } else if invoice.kind == InvoiceKind::Rectifying {
        "rectifying_invoice"
    } else {
        return Ok(());
    };
    Err(NO_DOUBLE_VOID
        .violation(subcode)
        .param("invoice_id")
        .detail("invoice_id", invoice.id.as_str())
        .detail("status", invoice.status.as_str())
        .detail("kind", invoice.kind.as_str()))
}

/// The checks of issuing `invoice` to `client` on `issue_date`, given its series' last date.
pub fn check_issue(
    invoice: &Invoice,
    client: &Client,
    issue_date: &str,
    last_issue_date: Option<&str>,
) -> Result<(), McpError> {
    check_recipient_tax_id(invoice.kind, client)?;
    check_simplified_ceiling(invoice.kind, &invoice.totals)?;
    check_issue_date_order(&invoice.series, issue_date, last_issue_date)
}

// ---- Reading arguments leniently (they are not validated yet) ------------------------------

fn lenient_pricing(line: &Value) -> Option<LinePricing> {
    Some(LinePricing {
        quantity: integer(line.get("quantity"))?,
        unit_price_cents: integer(line.get("unit_price_cents"))?,
        discount_percent: integer(line.get("discount_percent")).unwrap_or(0),
        vat_rate: integer(line.get("vat_rate"))?,
        withholding_rate: integer(line.get("withholding_rate")).unwrap_or(0),
    })
}

/// Totals of the `lines` argument, when every line is readable and within range.
fn lenient_totals(lines: &[Value]) -> Option<Totals> {
    let amounts: Option<Vec<_>> = lines
        .iter()
        .map(|l| lenient_pricing(l)?.amounts().ok())
        .collect();
    Totals::sum(&amounts?).ok()
}

fn check_vat_rates_of(country: &str, lines: &[Value]) -> Result<(), McpError> {
    for (index, line) in lines.iter().enumerate() {
        if let Some(rate) = integer(line.get("vat_rate")) {
            check_vat_rate(country, index, rate)?;
        }
    }
    Ok(())
}

fn lines_arg(args: &Map<String, Value>) -> Option<&Vec<Value>> {
    args.get("lines").and_then(Value::as_array)
}

fn kind_arg(args: &Map<String, Value>) -> Option<InvoiceKind> {
    args.get("kind")
        .and_then(Value::as_str)
        .and_then(InvoiceKind::parse)
}

fn invoice_arg(args: &Map<String, Value>) -> Option<InvoiceId> {
    args.get("invoice_id")
        .and_then(Value::as_str)
        .and_then(InvoiceId::parse)
}

fn read<T>(
    store: &Store,
    f: impl FnOnce(&crate::store::Conn<'_>) -> db::DbResult<T>,
) -> Result<T, McpError> {
    store.with_conn(f).map_err(|e| store_failure(e, false))
}

// ---- The guardrails of each tool (Tool::guardrails) -----------------------------------------

/// `create_invoice`: legal VAT rates; a simplified draft within the ceiling.
pub fn create_invoice(
    store: &Store,
    _book: Book,
    args: &Map<String, Value>,
    _clock: &Clock,
) -> Result<(), McpError> {
    let Some(lines) = lines_arg(args) else {
        return Ok(());
    };
    let country = read(store, db::company_country)?;
    check_vat_rates_of(&country, lines)?;
    match (kind_arg(args), lenient_totals(lines)) {
        (Some(kind), Some(totals)) => check_simplified_ceiling(kind, &totals),
        _ => Ok(()),
    }
}

/// `update_invoice`: legal VAT rates of new lines; the ceiling on the merged draft.
pub fn update_invoice(
    store: &Store,
    book: Book,
    args: &Map<String, Value>,
    _clock: &Clock,
) -> Result<(), McpError> {
    if let Some(lines) = lines_arg(args) {
        let country = read(store, db::company_country)?;
        check_vat_rates_of(&country, lines)?;
    }
    let Some(id) = invoice_arg(args) else {
        return Ok(());
    };
    let Some(current) = read(store, |c| db::invoice(c, book.as_str(), &id))? else {
        return Ok(());
    };
    if current.status != InvoiceStatus::Draft {
        return Ok(());
    }
    let kind = match args.get("kind") {
        None => current.kind,
        Some(value) => match value.as_str().and_then(InvoiceKind::parse) {
            Some(kind) => kind,
            None => return Ok(()),
        },
    };
    let totals = match lines_arg(args) {
        None => Some(current.totals),
        Some(lines) => lenient_totals(lines),
    };
    totals.map_or(Ok(()), |t| check_simplified_ceiling(kind, &t))
}

/// `issue_invoice`: tax id of a full invoice's client, simplified ceiling, date order.
pub fn issue_invoice(
    store: &Store,
    book: Book,
    args: &Map<String, Value>,
    clock: &Clock,
) -> Result<(), McpError> {
    let Some(id) = invoice_arg(args) else {
        return Ok(());
    };
    let requested = args.get("issue_date").and_then(Value::as_str);
    if requested.is_some_and(|d| Date::parse(d).is_none()) {
        return Ok(());
    }
    read(store, |conn| {
        let Some(invoice) = db::invoice(conn, book.as_str(), &id)? else {
            return Ok(Ok(()));
        };
        if invoice.status != InvoiceStatus::Draft {
            return Ok(Ok(()));
        }
        let Some(client) = db::client(conn, book.as_str(), &invoice.client_id)? else {
            return Ok(Ok(()));
        };
        let date = issue_date_for(&invoice, requested, clock);
        let last = db::series_last_issue_date(conn, book.as_str(), &invoice.series)?;
        Ok(check_issue(&invoice, &client, &date, last.as_deref()))
    })?
}

/// The date an invoice is issued with: the argument, else the draft's planned date, else
/// today by `clock`.
pub fn issue_date_for(invoice: &Invoice, requested: Option<&str>, clock: &Clock) -> String {
    requested
        .map(str::to_owned)
        .or_else(|| invoice.issue_date.clone())
        .unwrap_or_else(|| Date::today(clock).to_string())
}

/// `delete_invoice`: only drafts.
pub fn delete_invoice(
    store: &Store,
    book: Book,
    args: &Map<String, Value>,
    _clock: &Clock,
) -> Result<(), McpError> {
    let Some(id) = invoice_arg(args) else {
        return Ok(());
    };
    match read(store, |c| db::invoice(c, book.as_str(), &id))? {
        Some(invoice) => check_deletable(&invoice),
        None => Ok(()),
    }
}

/// `void_invoice`: not a voided or a rectifying invoice.
pub fn void_invoice(
    store: &Store,
    book: Book,
    args: &Map<String, Value>,
    _clock: &Clock,
) -> Result<(), McpError> {
    let Some(id) = invoice_arg(args) else {
        return Ok(());
    };
    match read(store, |c| db::invoice(c, book.as_str(), &id))? {
        Some(invoice) => check_voidable(&invoice),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn spain_has_the_four_legal_rates() {
        assert_eq!(allowed_vat_rates("ES"), Some(&[21, 10, 4, 0][..]));
        assert!(check_vat_rate("ES", 0, 21).is_ok());
        let err = check_vat_rate("ES", 2, 7).expect_err("7 % is not Spanish VAT");
        assert_eq!(err.kind(), ErrorKind::GuardrailViolation);
        let f = err.fields();
        assert_eq!(f["rule_id"], "legal-vat-rates");
        assert_eq!(f["subcode"], "vat_rate_not_allowed");
        assert_eq!(f["guardrail_uri"], "tollgate://guardrails/legal-vat-rates");
        assert_eq!(f["param"], "lines.2.vat_rate");
        assert_eq!(f["details"]["allowed_rates"], json!([21, 10, 4, 0]));
    }

    #[test]
    fn ceiling_is_inclusive_and_counts_vat() {
        let at = Totals {
            subtotal_cents: 33_058,
            vat_cents: 6_942,
            ..Totals::default()
        };
        assert!(check_simplified_ceiling(InvoiceKind::Simplified, &at).is_ok());
        let over = Totals {
            subtotal_cents: 33_058,
            vat_cents: 6_943,
            ..Totals::default()
        };
        let err = check_simplified_ceiling(InvoiceKind::Simplified, &over).expect_err("over");
        assert_eq!(err.fields()["details"]["total_with_vat_cents"], 40_001);
        assert!(check_simplified_ceiling(InvoiceKind::Full, &over).is_ok());
    }

    #[test]
    fn issue_dates_may_repeat_but_not_go_back() {
        assert!(check_issue_date_order("F", "2025-03-01", None).is_ok());
        assert!(check_issue_date_order("F", "2025-03-01", Some("2025-03-01")).is_ok());
        let err = check_issue_date_order("F", "2025-02-28", Some("2025-03-01")).expect_err("back");
        assert_eq!(err.fields()["subcode"], "issue_date_before_last_in_series");
    }

    #[test]
    fn every_rule_has_a_distinct_id_and_a_guide_that_names_it() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
        for rule in RULES {
            assert!(
                rule.guide.starts_with("# "),
                "{} guide has a title",
                rule.id
            );
            assert!(
                rule.guide.contains(&format!("`{}`", rule.id)),
                "{} guide names its id",
                rule.id
            );
        }
    }
}
