//! Spanish tax ids (NIF, NIE, CIF) with checksum validation.
//!
//! - **NIF** of a person (DNI): 8 digits and a control letter, `TRWAGMYFPDXBNJZSQVHLCKE`
//!   indexed by the number mod 23. The K/L/M NIFs (minors, non-residents, foreigners
//!   without NIE) are a letter, 7 digits and the same control letter over the 7 digits.
//! - **NIE** of a foreigner: `X`, `Y` or `Z` (read as 0, 1, 2), 7 digits, the DNI letter.
//! - **CIF** of an entity: an entity-type letter, 7 digits and a control character: the
//!   digits at odd positions are doubled and their digits summed, the even ones added;
//!   control = `(10 − sum mod 10) mod 10`, written as that digit or as `JABCDEFGHI[c]`.
//!   Types P, Q, R, S, N, W use the letter; A, B, E, H the digit; the others either.
//!
//! Input is normalised first: upper case, spaces, dots and hyphens removed, and an `ES`
//! VAT prefix dropped. The normalised form is what is stored and compared for uniqueness.

use std::fmt;

const DNI_LETTERS: &[u8; 23] = b"TRWAGMYFPDXBNJZSQVHLCKE";
const CIF_LETTERS: &[u8; 10] = b"JABCDEFGHI";
const CIF_TYPES: &str = "ABCDEFGHJNPQRSUVW";

/// Which kind of Spanish tax id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaxIdKind {
    /// A person's NIF (DNI, or a K/L/M NIF).
    Nif,
    /// A foreigner's NIE.
    Nie,
    /// An entity's CIF (company NIF).
    Cif,
}

impl TaxIdKind {
    /// Lowercase name used in tool results.
    pub fn as_str(self) -> &'static str {
        match self {
            TaxIdKind::Nif => "nif",
            TaxIdKind::Nie => "nie",
            TaxIdKind::Cif => "cif",
        }
    }
}

/// A checksum-valid, normalised Spanish tax id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaxId {
    normalised: String,
    kind: TaxIdKind,
}

/// Why a tax id was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaxIdError {
    /// Not shaped like any NIF, NIE or CIF.
    UnrecognisedFormat,
    /// Shaped right, but the control character is wrong.
    ChecksumMismatch,
}

impl TaxIdError {
    /// Machine-readable reason, sent as `details.reason`.
    pub fn reason(self) -> &'static str {
        match self {
            TaxIdError::UnrecognisedFormat => "unrecognised_format",
            TaxIdError::ChecksumMismatch => "checksum_mismatch",
        }
    }
}

impl TaxId {
    /// Parses and validates a NIF, NIE or CIF.
    pub fn parse(input: &str) -> Result<TaxId, TaxIdError> {
        let normalised = normalise(input);
        let bytes = normalised.as_bytes();
        if bytes.len() != 9 || !bytes.iter().all(u8::is_ascii_alphanumeric) {
            return Err(TaxIdError::UnrecognisedFormat);
        }
        let kind = match bytes[0] {
            b'0'..=b'9' => check_dni(bytes)?,
            b'X' | b'Y' | b'Z' => check_nie(bytes)?,
            b'K' | b'L' | b'M' => check_klm(bytes)?,
            first if CIF_TYPES.as_bytes().contains(&first) => check_cif(bytes)?,
            _ => return Err(TaxIdError::UnrecognisedFormat),
        };
        Ok(TaxId { normalised, kind })
    }

    /// The normalised text, e.g. `B12345674`.
    pub fn as_str(&self) -> &str {
        &self.normalised
    }

    /// NIF, NIE or CIF.
    pub fn kind(&self) -> TaxIdKind {
        self.kind
    }
}

impl fmt::Display for TaxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.normalised)
    }
}

fn normalise(input: &str) -> String {
    let compact: String = input
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '.'))
        .flat_map(char::to_uppercase)
        .collect();
    match compact.strip_prefix("ES") {
        Some(rest) if rest.len() == 9 => rest.to_owned(),
        _ => compact,
    }
}

/// The value of an all-digit slice, or a format error.
fn digits_value(digits: &[u8]) -> Result<u32, TaxIdError> {
    digits.iter().try_fold(0u32, |acc, &b| match b {
        b'0'..=b'9' => Ok(acc * 10 + u32::from(b - b'0')),
        _ => Err(TaxIdError::UnrecognisedFormat),
    })
}

fn dni_letter(number: u32) -> u8 {
    DNI_LETTERS[(number % 23) as usize]
}

fn expect_letter(found: u8, want: u8) -> Result<(), TaxIdError> {
    if !found.is_ascii_uppercase() {
        Err(TaxIdError::UnrecognisedFormat)
    } else if found != want {
        Err(TaxIdError::ChecksumMismatch)
    } else {
        Ok(())
    }
}

fn check_dni(b: &[u8]) -> Result<TaxIdKind, TaxIdError> {
    let number = digits_value(&b[..8])?;
    expect_letter(b[8], dni_letter(number))?;
    Ok(TaxIdKind::Nif)
}

fn check_nie(b: &[u8]) -> Result<TaxIdKind, TaxIdError> {
    let prefix = u32::from(b[0] - b'X');
    let number = prefix * 10_000_000 + digits_value(&b[1..8])?;
    expect_letter(b[8], dni_letter(number))?;
    Ok(TaxIdKind::Nie)
}

fn check_klm(b: &[u8]) -> Result<TaxIdKind, TaxIdError> {
    let number = digits_value(&b[1..8])?;
    expect_letter(b[8], dni_letter(number))?;
    Ok(TaxIdKind::Nif)
}

/// The CIF control digit of the 7 central digits.
fn cif_control(digits: &[u8]) -> Result<u8, TaxIdError> {
    digits_value(digits)?;
    let sum: u32 = digits
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 0 {
                let doubled = d * 2;
                doubled / 10 + doubled % 10
            } else {
                d
            }
        })
        .sum();
    Ok(((10 - sum % 10) % 10) as u8)
}

fn check_cif(b: &[u8]) -> Result<TaxIdKind, TaxIdError> {
    let control = cif_control(&b[1..8])?;
    let as_digit = b'0' + control;
    let as_letter = CIF_LETTERS[usize::from(control)];
    let accepted: &[u8] = match b[0] {
        b'P' | b'Q' | b'R' | b'S' | b'N' | b'W' => &[as_letter],
        b'A' | b'B' | b'E' | b'H' => &[as_digit],
        _ => &[as_digit, as_letter],
    };
    if !b[8].is_ascii_alphanumeric() {
        return Err(TaxIdError::UnrecognisedFormat);
    }
    if accepted.contains(&b[8]) {
        Ok(TaxIdKind::Cif)
    } else {
        Err(TaxIdError::ChecksumMismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(input: &str) -> Result<TaxIdKind, TaxIdError> {
        TaxId::parse(input).map(|t| t.kind())
    }

    #[test]
    fn valid_nifs() {
        for nif in [
            "12345678Z",
            "00000000T",
            "99999999R",
            "44444444A",
            "K1234567L",
        ] {
            assert_eq!(kind(nif), Ok(TaxIdKind::Nif), "{nif}");
        }
    }

    #[test]
    fn valid_nies() {
        for nie in ["X1234567L", "Y1234567X", "Z7654321H"] {
            assert_eq!(kind(nie), Ok(TaxIdKind::Nie), "{nie}");
        }
    }

    #[test]
    fn valid_cifs() {
        // Digit control (A, B), letter control (Q, P), either (G).
        for cif in [
            "A58818501",
            "B12345674",
            "Q2826000H",
            "P0800000B",
            "G12345674",
            "G1234567D",
        ] {
            assert_eq!(kind(cif), Ok(TaxIdKind::Cif), "{cif}");
        }
    }

    #[test]
    fn wrong_control_characters_are_checksum_mismatches() {
        for bad in [
            "12345678A", // NIF, wants Z
            "X1234567A", // NIE, wants L
            "Y1234567L", // NIE with X's letter
            "B12345675", // CIF, wants 4
            "B1234567D", // A/B take the digit, not the letter
            "Q28260008", // Q takes the letter, not the digit
            "A58818502",
        ] {
            assert_eq!(kind(bad), Err(TaxIdError::ChecksumMismatch), "{bad}");
        }
    }

    #[test]
    fn malformed_ids_are_unrecognised() {
        for bad in [
            "",
            "1234567Z",
            "123456789Z",
            "I12345674",
            "12345678-",
            "XX234567L",
            "B1234567",
            "ñ2345678Z",
        ] {
            assert_eq!(kind(bad), Err(TaxIdError::UnrecognisedFormat), "{bad:?}");
        }
    }

    #[test]
    fn input_is_normalised() {
        let id = TaxId::parse(" es-b12.345.674 ").expect("valid");
        assert_eq!(id.as_str(), "B12345674");
        assert_eq!(
            TaxId::parse("12345678z").expect("valid").as_str(),
            "12345678Z"
        );
        assert_eq!(
            TaxId::parse("ESX1234567L").expect("valid").kind(),
            TaxIdKind::Nie
        );
    }
}
