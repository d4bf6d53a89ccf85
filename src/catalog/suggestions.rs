//! The `suggestion` of an error: one sentence on what to do instead, in both locales, chosen
//! at the error's call site from this closed list.

use crate::config::Locale;

/// A suggestion an error can carry in its envelope's `suggestion` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suggestion {
    /// A simplified invoice over its ceiling.
    IssueFullInvoice,
    /// A full invoice to a client without a tax id.
    AddTaxIdOrSimplify,
    /// Deleting an issued invoice.
    VoidInstead,
    /// Paying a draft.
    IssueFirst,
    /// Sending a draft.
    IssueBeforeSending,
    /// Sending to a client without an address.
    AddEmailOrPassTo,
    /// Voiding a draft.
    DeleteTheDraft,
}

impl Suggestion {
    /// The sentence in `locale`.
    pub fn text(self, locale: Locale) -> &'static str {
        let (en, es) = match self {
            Suggestion::IssueFullInvoice => (
                "Issue a full invoice (kind \"full\") to a client with a tax id.",
                "Emita una factura completa (kind \"full\") a un cliente con NIF.",
            ),
            Suggestion::AddTaxIdOrSimplify => (
                "Add the client's NIF/NIE/CIF with update_client, or make the invoice simplified.",
                "Añada el NIF/NIE/CIF del cliente con update_client o haga la factura simplificada.",
            ),
            Suggestion::VoidInstead => (
                "Call void_invoice with a reason to cancel an issued invoice.",
                "Llame a void_invoice con un motivo para cancelar una factura emitida.",
            ),
            Suggestion::IssueFirst => (
                "Issue the invoice with issue_invoice first.",
                "Emita antes la factura con issue_invoice.",
            ),
            Suggestion::IssueBeforeSending => (
                "Issue the invoice with issue_invoice before sending it.",
                "Emita la factura con issue_invoice antes de enviarla.",
            ),
            Suggestion::AddEmailOrPassTo => (
                "Add the client's e-mail with update_client, or pass `to`.",
                "Añada el correo del cliente con update_client o indique `to`.",
            ),
            Suggestion::DeleteTheDraft => (
                "A draft has no legal effect: delete it with delete_invoice.",
                "Un borrador no tiene efecto legal: elimínelo con delete_invoice.",
            ),
        };
        match locale {
            Locale::En => en,
            Locale::Es => es,
        }
    }
}
