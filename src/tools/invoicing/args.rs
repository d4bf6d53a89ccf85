//! How the invoicing tools and their guardrails read arguments: already validated against
//! the input schema (types hold, formats do not yet), parsed here into ids, dates, tax ids,
//! e-mail addresses, page sizes and priced lines, each failure a catalog error naming the
//! argument.

use serde_json::{Map, Value};

use super::date::Date;
use super::model::{Line, LinePricing, Totals};
use super::taxid::TaxId;
use crate::catalog::{Expect, McpError};

/// Default page size of the search and list tools.
const DEFAULT_PAGE_SIZE: usize = 20;
/// Largest page a caller may ask for.
const MAX_PAGE_SIZE: usize = 100;

/// How the bodies read their arguments, already validated against the input schema: types
/// hold, formats do not yet.
pub(super) trait Args {
    /// The argument `name`, as sent.
    fn arg(&self, name: &str) -> Option<&Value>;

    /// A string argument.
    fn str(&self, name: &str) -> Option<&str> {
        self.arg(name).and_then(Value::as_str)
    }

    /// A non-blank string argument, trimmed.
    fn text(&self, name: &str) -> Option<String> {
        self.str(name)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    }

    /// An integer argument (an integral JSON number).
    fn int(&self, name: &str) -> Option<i64> {
        integer(self.arg(name))
    }

    /// A boolean argument.
    fn bool(&self, name: &str) -> Option<bool> {
        self.arg(name).and_then(Value::as_bool)
    }

    /// Whether the argument is present (even as null).
    fn has(&self, name: &str) -> bool {
        self.arg(name).is_some()
    }

    /// A required string argument.
    fn required(&self, name: &str) -> Result<&str, McpError> {
        self.str(name)
            .ok_or_else(|| McpError::missing(name, expect_for(name)))
    }

    /// A required id argument of one type.
    fn id<T>(&self, name: &str, parse: fn(&str) -> Option<T>) -> Result<T, McpError> {
        let text = self.required(name)?;
        parse(text).ok_or_else(|| invalid_format(name, "malformed_id", id_expect(name), text))
    }

    /// An optional id argument of one type.
    fn opt_id<T>(&self, name: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>, McpError> {
        match self.str(name) {
            None => Ok(None),
            Some(text) => parse(text)
                .map(Some)
                .ok_or_else(|| invalid_format(name, "malformed_id", id_expect(name), text)),
        }
    }

    /// An optional `YYYY-MM-DD` date.
    fn date(&self, name: &str) -> Result<Option<Date>, McpError> {
        match self.str(name) {
            None => Ok(None),
            Some(text) => Date::parse(text).map(Some).ok_or_else(|| {
                invalid_format(name, "expected_yyyy_mm_dd", Expect::Named("date"), text)
            }),
        }
    }

    /// An optional Spanish tax id, checksum-validated and normalised.
    fn tax_id(&self, name: &str) -> Result<Option<TaxId>, McpError> {
        match self.text(name) {
            None => Ok(None),
            Some(text) => TaxId::parse(&text)
                .map(Some)
                .map_err(|e| invalid_format(name, e.reason(), Expect::Named("tax_id"), &text)),
        }
    }

    /// An optional e-mail address, loosely checked (one `@`, a dotted domain, no spaces).
    fn email(&self, name: &str) -> Result<Option<String>, McpError> {
        let Some(text) = self.text(name) else {
            return Ok(None);
        };
        let plausible = text.len() <= 254
            && !text.contains(char::is_whitespace)
            && text.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty()
                    && !domain.contains('@')
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            });
        if plausible {
            Ok(Some(text))
        } else {
            Err(invalid_format(
                name,
                "not_an_email_address",
                Expect::Named("email"),
                &text,
            ))
        }
    }

    /// The page size (`limit`), defaulted and capped.
    fn limit(&self) -> usize {
        self.int("limit")
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_PAGE_SIZE)
            .clamp(1, MAX_PAGE_SIZE)
    }

    /// The `lines` argument, priced; `None` when absent.
    fn lines(&self) -> Result<Option<(Vec<Line>, Totals)>, McpError> {
        let Some(items) = self.arg("lines").and_then(Value::as_array) else {
            return Ok(None);
        };
        let lines = items
            .iter()
            .enumerate()
            .map(|(i, item)| priced_line(i, item))
            .collect::<Result<Vec<_>, _>>()?;
        let amounts: Vec<_> = lines.iter().map(|l| l.amounts).collect();
        let totals = Totals::sum(&amounts).map_err(|_| {
            McpError::validation("lines", "overflow", Expect::Named("amounts_in_range"))
                .detail("reason", "amount_out_of_range")
        })?;
        Ok(Some((lines, totals)))
    }
}

impl Args for Map<String, Value> {
    fn arg(&self, name: &str) -> Option<&Value> {
        self.get(name)
    }
}

/// An integral JSON number (`3` or `3.0`) as `i64`.
pub(super) fn integer(value: Option<&Value>) -> Option<i64> {
    let value = value?;
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

fn priced_line(index: usize, item: &Value) -> Result<Line, McpError> {
    let field = |name: &str| {
        integer(item.get(name)).ok_or_else(|| {
            let expect = if name.ends_with("_cents") {
                Expect::Cents
            } else {
                Expect::Type("integer".into())
            };
            McpError::missing(&format!("lines.{index}.{name}"), expect)
        })
    };
    let optional = |name: &str| integer(item.get(name)).unwrap_or(0);
    let pricing = LinePricing {
        quantity: field("quantity")?,
        unit_price_cents: field("unit_price_cents")?,
        discount_percent: optional("discount_percent"),
        vat_rate: field("vat_rate")?,
        withholding_rate: optional("withholding_rate"),
    };
    let amounts = pricing.amounts().map_err(|_| {
        McpError::validation(
            &format!("lines.{index}"),
            "overflow",
            Expect::Named("amounts_in_range"),
        )
        .detail("reason", "amount_out_of_range")
    })?;
    let description = item
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    Ok(Line {
        description,
        pricing,
        amounts,
    })
}

/// `invalid_format` of `value` sent in `param`: `reason` is the machine reason kept in
/// `details.reason`, `expect` what would be accepted.
pub(super) fn invalid_format(
    param: &str,
    reason: &'static str,
    expect: Expect,
    value: &str,
) -> McpError {
    let word = if reason == "checksum_mismatch" {
        "checksum"
    } else {
        "format"
    };
    McpError::invalid_format(param, word, expect, &Value::from(value)).detail("reason", reason)
}

/// What an id argument named `name` must be.
fn id_expect(name: &str) -> Expect {
    match expect_for(name) {
        Expect::Type(_) => Expect::Named("id"),
        named => named,
    }
}

/// What a required string argument named `name` must be.
fn expect_for(name: &str) -> Expect {
    match name {
        "client_id" => Expect::Named("client_id"),
        "invoice_id" => Expect::Named("invoice_id"),
        _ => Expect::Type("string".into()),
    }
}
