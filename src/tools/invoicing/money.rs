//! Exact money: integer cents, integer percentages, and one rounding rule.
//!
//! No floating point anywhere. A line is computed in `i128` and stored in `i64` cents:
//!
//! 1. `gross = quantity × unit_price_cents` (exact);
//! 2. `discount = round(gross × discount_percent / 100)`;
//! 3. `net = gross − discount`;
//! 4. `vat = round(net × vat_rate / 100)`, `withholding = round(net × withholding_rate / 100)`;
//! 5. `total = net + vat − withholding`.
//!
//! `round` is **half away from zero** on the exact quotient ("redondeo comercial", the rule
//! Spanish invoicing software applies to the cent), so a rectifying line computed from the
//! negated unit price is exactly the negation of the original line. Rounding happens **per
//! line**; an invoice's totals are plain sums of its lines' rounded amounts, so the lines
//! always add up to the invoice to the cent.
//!
//! The amounts are types of the invoicing model ([`LinePricing`], [`LineAmounts`],
//! [`Totals`]); this module computes them.

use std::fmt;

use super::model::{LineAmounts, LinePricing, Totals};

/// A computed amount does not fit in `i64` cents (the input bounds of the tools make this
/// unreachable; it is still checked, never wrapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmountOverflow;

impl fmt::Display for AmountOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("amount out of range")
    }
}

impl std::error::Error for AmountOverflow {}

/// `numerator / denominator` rounded half away from zero. `denominator` must be positive.
pub fn div_round_half_away(numerator: i128, denominator: i128) -> i128 {
    debug_assert!(denominator > 0);
    let quotient = numerator / denominator;
    let remainder = numerator % denominator;
    if 2 * remainder.abs() >= denominator {
        quotient + numerator.signum()
    } else {
        quotient
    }
}

/// `amount × percent / 100`, rounded half away from zero; `None` if it overflows `i128`.
pub fn percent_of(amount: i128, percent: i64) -> Option<i128> {
    amount
        .checked_mul(i128::from(percent))
        .map(|scaled| div_round_half_away(scaled, 100))
}

fn to_cents(value: i128) -> Result<i64, AmountOverflow> {
    i64::try_from(value).map_err(|_| AmountOverflow)
}

impl LinePricing {
    /// Computes the line's amounts with the rounding rule of this module.
    pub fn amounts(&self) -> Result<LineAmounts, AmountOverflow> {
        // i64 × i64 always fits in i128; the percentages are checked.
        let gross = i128::from(self.quantity) * i128::from(self.unit_price_cents);
        let discount = percent_of(gross, self.discount_percent).ok_or(AmountOverflow)?;
        let net = gross.checked_sub(discount).ok_or(AmountOverflow)?;
        let vat = percent_of(net, self.vat_rate).ok_or(AmountOverflow)?;
        let withholding = percent_of(net, self.withholding_rate).ok_or(AmountOverflow)?;
        let total = net
            .checked_add(vat)
            .and_then(|t| t.checked_sub(withholding))
            .ok_or(AmountOverflow)?;
        Ok(LineAmounts {
            gross_cents: to_cents(gross)?,
            discount_cents: to_cents(discount)?,
            net_cents: to_cents(net)?,
            vat_cents: to_cents(vat)?,
            withholding_cents: to_cents(withholding)?,
            total_cents: to_cents(total)?,
        })
    }
}

impl Totals {
    /// Adds up lines; fails rather than wraps.
    pub fn sum<'a>(
        lines: impl IntoIterator<Item = &'a LineAmounts>,
    ) -> Result<Totals, AmountOverflow> {
        let mut acc = [0i128; 6];
        for line in lines {
            let parts = [
                line.gross_cents,
                line.discount_cents,
                line.net_cents,
                line.vat_cents,
                line.withholding_cents,
                line.total_cents,
            ];
            for (sum, part) in acc.iter_mut().zip(parts) {
                *sum += i128::from(part);
            }
        }
        Ok(Totals {
            gross_cents: to_cents(acc[0])?,
            discount_cents: to_cents(acc[1])?,
            subtotal_cents: to_cents(acc[2])?,
            vat_cents: to_cents(acc[3])?,
            withholding_cents: to_cents(acc[4])?,
            total_cents: to_cents(acc[5])?,
        })
    }
}

/// Renders cents as a decimal amount with a dot and two decimals: `-1234` → `"-12.34"`.
pub fn decimal(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Renders an amount for people: `"1210.00 EUR"`.
pub fn display(cents: i64, currency: &str) -> String {
    format!("{} {currency}", decimal(cents))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(quantity: i64, unit: i64, discount: i64, vat: i64, withholding: i64) -> LinePricing {
        LinePricing {
            quantity,
            unit_price_cents: unit,
            discount_percent: discount,
            vat_rate: vat,
            withholding_rate: withholding,
        }
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(div_round_half_away(5, 10), 1);
        assert_eq!(div_round_half_away(4, 10), 0);
        assert_eq!(div_round_half_away(-5, 10), -1);
        assert_eq!(div_round_half_away(-4, 10), 0);
        assert_eq!(div_round_half_away(15, 10), 2);
        assert_eq!(div_round_half_away(25, 10), 3);
        assert_eq!(div_round_half_away(0, 7), 0);
    }

    #[test]
    fn a_worked_line() {
        // 3 × 33.33 € = 99.99 €; 10 % off = 9.999 → 10.00; net 89.99; VAT 21 % = 18.8979 →
        // 18.90; IRPF 15 % = 13.4985 → 13.50; total 89.99 + 18.90 − 13.50 = 95.39.
        let amounts = line(3, 3333, 10, 21, 15).amounts().expect("fits");
        assert_eq!(
            amounts,
            LineAmounts {
                gross_cents: 9999,
                discount_cents: 1000,
                net_cents: 8999,
                vat_cents: 1890,
                withholding_cents: 1350,
                total_cents: 9539,
            }
        );
    }

    #[test]
    fn a_negated_line_is_the_negation() {
        let original = line(7, 1999, 15, 10, 7).amounts().expect("fits");
        let negated = line(7, -1999, 15, 10, 7).amounts().expect("fits");
        assert_eq!(negated.net_cents, -original.net_cents);
        assert_eq!(negated.vat_cents, -original.vat_cents);
        assert_eq!(negated.total_cents, -original.total_cents);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let huge = line(i64::MAX, i64::MAX, 0, 21, 0);
        assert_eq!(huge.amounts(), Err(AmountOverflow));
    }

    #[test]
    fn decimals_render_with_two_digits() {
        assert_eq!(decimal(0), "0.00");
        assert_eq!(decimal(5), "0.05");
        assert_eq!(decimal(-1234), "-12.34");
        assert_eq!(decimal(i64::MIN), "-92233720368547758.08");
        assert_eq!(display(121000, "EUR"), "1210.00 EUR");
    }

    /// An independent reference: rounds the exact rational `n / d` half away from zero by
    /// comparing `2·|n| mod 2d` instead of the remainder, on `i128`.
    fn reference_round(n: i128, d: i128) -> i128 {
        let floor_abs = n.abs() / d;
        let twice_rest = 2 * (n.abs() - floor_abs * d);
        let abs = if twice_rest >= d {
            floor_abs + 1
        } else {
            floor_abs
        };
        if n < 0 { -abs } else { abs }
    }

    /// Reference amounts in hundredths of a cent scaled by 100 (`× 10 000`), so every
    /// intermediate is an exact integer, then rounded once per amount.
    fn reference_line(p: &LinePricing) -> [i128; 6] {
        let gross = i128::from(p.quantity) * i128::from(p.unit_price_cents);
        let discount = reference_round(gross * i128::from(p.discount_percent) * 100, 10_000);
        let net = gross - discount;
        let vat = reference_round(net * i128::from(p.vat_rate) * 100, 10_000);
        let withholding = reference_round(net * i128::from(p.withholding_rate) * 100, 10_000);
        [
            gross,
            discount,
            net,
            vat,
            withholding,
            net + vat - withholding,
        ]
    }

    fn pricing() -> impl Strategy<Value = LinePricing> {
        (
            1i64..=1_000_000,
            -10_000_000_000i64..=10_000_000_000,
            0i64..=100,
            prop::sample::select(vec![0i64, 4, 10, 21]),
            prop::sample::select(vec![0i64, 1, 2, 7, 15, 19]),
        )
            .prop_map(|(q, u, d, v, w)| line(q, u, d, v, w))
    }

    proptest! {
        #[test]
        fn line_amounts_are_exact(p in pricing()) {
            let got = p.amounts().expect("within bounds");
            let want = reference_line(&p);
            let got128 = [got.gross_cents, got.discount_cents, got.net_cents, got.vat_cents,
                          got.withholding_cents, got.total_cents].map(i128::from);
            prop_assert_eq!(got128, want);
            // Each rounded amount is within half a cent of the exact value.
            let exact_vat_x100 = i128::from(got.net_cents) * i128::from(p.vat_rate);
            prop_assert!((i128::from(got.vat_cents) * 100 - exact_vat_x100).abs() <= 50);
        }

        #[test]
        fn invoice_totals_are_the_exact_sums(lines in prop::collection::vec(pricing(), 1..50)) {
            let amounts: Vec<LineAmounts> =
                lines.iter().map(|p| p.amounts().expect("within bounds")).collect();
            let totals = Totals::sum(&amounts).expect("within bounds");
            let mut want = [0i128; 6];
            for p in &lines {
                for (sum, part) in want.iter_mut().zip(reference_line(p)) {
                    *sum += part;
                }
            }
            let got = [totals.gross_cents, totals.discount_cents, totals.subtotal_cents,
                       totals.vat_cents, totals.withholding_cents, totals.total_cents].map(i128::from);
            prop_assert_eq!(got, want);
            prop_assert_eq!(
                i128::from(totals.total_cents),
                i128::from(totals.subtotal_cents) + i128::from(totals.vat_cents)
                    - i128::from(totals.withholding_cents)
            );
        }
    }
}
