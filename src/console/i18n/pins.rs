//! The words of the review of upstream tools held for their definitions, on the backends
//! page. Merged into the console's one table by [`super::texts`], keys unique across all.

/// `(key, English, Spanish)`.
pub(super) const TEXTS: &[(&str, &str, &str)] = &[
    ("held_title", "Held for review", "Retenidas para revisión"),
    (
        "held_help",
        "These tools and prompts (prompt:…) of an MCP backend changed their definition since it was approved (or are new, with pinning = \"manual\"): they are hidden from tools/list and prompts/list and refused (tool_under_review, prompt_under_review) until you decide. Compare the definitions; the lines that differ are marked.",
        "Estas herramientas y plantillas (prompt:…) de un sistema MCP cambiaron su definición desde que se aprobó (o son nuevas, con pinning = \"manual\"): no aparecen en tools/list ni en prompts/list y se rechazan (tool_under_review, prompt_under_review) hasta que usted decida. Compare las definiciones; las líneas que difieren están marcadas.",
    ),
    (
        "approved_definition",
        "Approved until now",
        "Aprobada hasta ahora",
    ),
    ("presented_definition", "Presented now", "Presentada ahora"),
    (
        "no_approved_definition",
        "none: a new tool",
        "ninguna: una herramienta nueva",
    ),
    ("description", "Description", "Descripción"),
    ("input_schema", "Input schema", "Esquema de entrada"),
    ("prompt_arguments", "Arguments", "Argumentos"),
    (
        "held_pending",
        "waiting for a decision",
        "esperando una decisión",
    ),
    ("held_rejected", "rejected", "rechazada"),
    ("approve", "Approve", "Aprobar"),
    ("reject", "Reject", "Rechazar"),
    ("seen_at", "Presented", "Presentada"),
    ("digest", "Digest", "Huella"),
    (
        "confirm_approve_tool",
        "Approve the new definition of {tool}? It is offered again, as it is now, at the next tools/list on every node.",
        "¿Aprobar la nueva definición de {tool}? Se ofrece de nuevo, tal como está ahora, en el siguiente tools/list de cada nodo.",
    ),
    (
        "confirm_reject_tool",
        "Reject the new definition of {tool}? The tool stays hidden and its calls refused.",
        "¿Rechazar la nueva definición de {tool}? La herramienta sigue oculta y sus llamadas rechazadas.",
    ),
];
