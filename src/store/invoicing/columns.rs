//! How the model's ids and words sit in a column: as their text. An id goes in and comes
//! back as it is; a word the model does not know comes back as a damaged row
//! ([`StoreError::Corrupt`](crate::store::StoreError::Corrupt)), never as a default.

use super::super::sql::{Cell, Param, Value};
use super::model::{
    ClientId, InvoiceId, InvoiceKind, InvoiceStatus, OutboxId, PaymentId, PaymentMethod,
};

macro_rules! id_column {
    ($($id:ty),+) => {$(
        impl Param for $id {
            fn value(&self) -> Value<'_> {
                Value::Text(self.as_str())
            }
        }

        impl Cell for $id {
            fn from_value(v: Value<'_>) -> Result<Self, String> {
                String::from_value(v).map(<$id>::from_db)
            }
        }
    )+};
}
id_column!(ClientId, InvoiceId, PaymentId, OutboxId);

macro_rules! word_column {
    ($($word:ty),+) => {$(
        impl Param for $word {
            fn value(&self) -> Value<'_> {
                Value::Text(self.as_str())
            }
        }

        impl Cell for $word {
            fn from_value(v: Value<'_>) -> Result<Self, String> {
                let text = String::from_value(v)?;
                <$word>::parse(&text).ok_or_else(|| format!("unexpected value {text:?}"))
            }
        }
    )+};
}
word_column!(InvoiceKind, InvoiceStatus, PaymentMethod);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_words_are_text_and_an_unknown_word_is_a_damaged_row() {
        let id = ClientId::from_db("cli_1".to_owned());
        assert_eq!(id.value(), Value::Text("cli_1"));
        assert_eq!(ClientId::from_value(Value::Text("cli_1")), Ok(id));
        assert!(ClientId::from_value(Value::Int(1)).is_err());
        assert_eq!(
            PaymentMethod::DirectDebit.value(),
            Value::Text("direct_debit")
        );
        assert_eq!(
            InvoiceStatus::from_value(Value::Text("void")),
            Ok(InvoiceStatus::Void)
        );
        assert_eq!(
            InvoiceKind::from_value(Value::Text("proforma")),
            Err("unexpected value \"proforma\"".to_owned())
        );
    }
}
