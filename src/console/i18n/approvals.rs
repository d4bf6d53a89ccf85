//! The words of the Approvals page: the calls a policy rule holds for a person's decision.
//! Merged into the console's one table by [`super::texts`], keys unique across all.

/// `(key, English, Spanish)`.
pub(super) const TEXTS: &[(&str, &str, &str)] = &[
    ("approvals", "Approvals", "Aprobaciones"),
    ("approval", "Approval", "Aprobación"),
    (
        "approvals_help",
        "Calls a require_approval policy rule holds until a person decides. Nothing has run yet; once approved, the caller's next identical call (same arguments, same idempotency key) runs, once. A denial is final.",
        "Llamadas que una regla de política require_approval retiene hasta que una persona decida. Aún no se ha ejecutado nada; una vez aprobada, la siguiente llamada idéntica del llamante (mismos argumentos, misma clave de idempotencia) se ejecuta, una sola vez. Una denegación es definitiva.",
    ),
    (
        "approvals_pending",
        "Waiting for a decision",
        "Esperando una decisión",
    ),
    (
        "approvals_decided",
        "Decided and expired",
        "Decididas y caducadas",
    ),
    ("no_approvals", "None.", "Ninguna."),
    ("approval_tool", "Tool", "Herramienta"),
    ("approval_caller", "Asked by", "Solicitada por"),
    ("approval_rule", "Rule", "Regla"),
    ("approval_asked", "Asked at", "Solicitada el"),
    ("approval_expires", "Expires at", "Caduca el"),
    ("approval_state", "State", "Estado"),
    ("approval_key", "Idempotency key", "Clave de idempotencia"),
    ("approval_arguments", "Arguments", "Argumentos"),
    (
        "approval_state_pending",
        "waiting for a decision",
        "esperando una decisión",
    ),
    (
        "approval_state_approved",
        "approved, not yet run",
        "aprobada, aún sin ejecutar",
    ),
    (
        "approval_state_used",
        "approved and run",
        "aprobada y ejecutada",
    ),
    ("approval_state_denied", "denied", "denegada"),
    ("approval_state_expired", "expired", "caducada"),
    ("approve_call", "Approve", "Aprobar"),
    ("deny_call", "Deny", "Denegar"),
    (
        "confirm_approve_call",
        "Approve this call of {tool} by {caller}? It runs, once, when the caller retries it.",
        "¿Aprobar esta llamada a {tool} de {caller}? Se ejecutará, una sola vez, cuando el llamante la repita.",
    ),
    (
        "confirm_deny_call",
        "Deny this call of {tool} by {caller}? The denial is final.",
        "¿Denegar esta llamada a {tool} de {caller}? La denegación es definitiva.",
    ),
    (
        "approval_own_call",
        "You made this call, and its rule does not let its caller approve it: another approver must decide.",
        "Usted hizo esta llamada y su regla no permite que quien llama la apruebe: debe decidir otra persona con permiso de aprobación.",
    ),
    (
        "approval_not_pending",
        "This call is no longer waiting for a decision.",
        "Esta llamada ya no espera una decisión.",
    ),
];
