//! The sentences of `mcp_guardrail_violation`, one per `subcode`: the rule broken, in words,
//! with the values at fault, what would be accepted and the rule's guide. A subcode not
//! listed here reads the entry's own template.

/// `(subcode, English template, Spanish template)`.
pub const SENTENCES: &[(&str, &str, &str)] = &[
    (
        "vat_rate_not_allowed",
        "The VAT rate {details.vat_rate} in `{param}` is not a legal rate in {details.country}; use one of {details.allowed_rates} (rule {rule_id}, guide {guardrail_uri}).",
        "El tipo de IVA {details.vat_rate} de `{param}` no es un tipo legal en {details.country}; use uno de {details.allowed_rates} (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "country_without_vat_table",
        "The company's country {details.country:q} has no table of legal VAT rates, so invoice lines cannot be checked; the operator must set a supported country (rule {rule_id}, guide {guardrail_uri}).",
        "El país de la empresa, {details.country:q}, no tiene tabla de tipos de IVA legales, así que no se pueden comprobar las líneas; el operador debe indicar un país admitido (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "total_above_ceiling",
        "A simplified invoice may not exceed {details.ceiling_cents} cents VAT included, and these lines total {details.total_with_vat_cents} cents; issue a full invoice (kind \"full\") to a client with a tax id instead (rule {rule_id}, guide {guardrail_uri}).",
        "Una factura simplificada no puede superar {details.ceiling_cents} céntimos con IVA, y estas líneas suman {details.total_with_vat_cents} céntimos; emita en su lugar una factura completa (kind \"full\") a un cliente con NIF (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "issue_date_before_last_in_series",
        "The issue date {details.issue_date} is earlier than {details.last_issue_date}, the last issue date in series {details.series:q}, and issue dates never go backwards in a series; use {details.last_issue_date} or later (rule {rule_id}, guide {guardrail_uri}).",
        "La fecha de emisión {details.issue_date} es anterior a {details.last_issue_date}, la última de la serie {details.series:q}, y las fechas de emisión nunca retroceden en una serie; use {details.last_issue_date} o posterior (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "client_tax_id_missing",
        "A full invoice needs the client's tax id, and client {details.client_id} has none; add its NIF, NIE or CIF with update_client, or make the invoice simplified (rule {rule_id}, guide {guardrail_uri}).",
        "Una factura completa necesita el NIF del cliente, y el cliente {details.client_id} no lo tiene; añada su NIF, NIE o CIF con update_client o haga la factura simplificada (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "invoice_issued",
        "Invoice {details.invoice_id} is issued, and an issued invoice is never deleted; cancel it with void_invoice and a reason (rule {rule_id}, guide {guardrail_uri}).",
        "La factura {details.invoice_id} está emitida, y una factura emitida nunca se elimina; anúlela con void_invoice indicando un motivo (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "invoice_paid",
        "Invoice {details.invoice_id} is paid, and an issued invoice is never deleted; cancel it with void_invoice and a reason (rule {rule_id}, guide {guardrail_uri}).",
        "La factura {details.invoice_id} está pagada, y una factura emitida nunca se elimina; anúlela con void_invoice indicando un motivo (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "invoice_void",
        "Invoice {details.invoice_id} is void and stays in the record; an issued invoice is never deleted, and nothing more is needed to cancel it (rule {rule_id}, guide {guardrail_uri}).",
        "La factura {details.invoice_id} está anulada y permanece en el registro; una factura emitida nunca se elimina y no hace falta nada más para cancelarla (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "invoice_already_void",
        "Invoice {details.invoice_id} is already void and an invoice is cancelled only once; nothing more is needed (read it with get_invoice), and to bill again create and issue a new invoice (rule {rule_id}, guide {guardrail_uri}).",
        "La factura {details.invoice_id} ya está anulada y una factura se cancela una sola vez; no hace falta nada más (consúltela con get_invoice) y, para facturar de nuevo, cree y emita una factura nueva (regla {rule_id}, guía {guardrail_uri}).",
    ),
    (
        "rectifying_invoice",
        "Invoice {details.invoice_id} is a rectifying invoice, which is itself the correction and is never voided; to bill again create and issue a new invoice (rule {rule_id}, guide {guardrail_uri}).",
        "La factura {details.invoice_id} es rectificativa, que es en sí la corrección y nunca se anula; para facturar de nuevo, cree y emita una factura nueva (regla {rule_id}, guía {guardrail_uri}).",
    ),
];

/// The templates of `subcode`, if it has its own sentence.
pub fn sentence(subcode: &str) -> Option<(&'static str, &'static str)> {
    SENTENCES
        .iter()
        .find(|(s, ..)| *s == subcode)
        .map(|(_, en, es)| (*en, *es))
}
