//! The console's words in English and Spanish, one table made of three (the console's
//! own, here, the OAuth pages' in `oauth` and the latency page's in `latency`); the page
//! follows the company's locale (`tollgate init --locale`, or `locale` in the
//! configuration).

mod approvals;
mod latency;
mod oauth;
mod pins;

use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::config::Locale;

/// `(key, English, Spanish)`.
const TEXTS: &[(&str, &str, &str)] = &[
    // Page titles.
    ("sign_in", "Sign in", "Iniciar sesión"),
    ("overview", "Overview", "Resumen"),
    ("credentials", "Credentials", "Credenciales"),
    ("limits", "Limits", "Límites"),
    ("audit", "Audit log", "Registro de auditoría"),
    ("backends", "Backends", "Sistemas conectados"),
    ("users", "Users", "Usuarios"),
    ("refused", "Not done", "No realizado"),
    ("confirm", "Confirm", "Confirmar"),
    ("key_created", "Key created", "Clave creada"),
    ("key_rotated", "Key rotated", "Clave renovada"),
    (
        "client_created",
        "OAuth client created",
        "Cliente OAuth creado",
    ),
    // Frame.
    ("console", "console", "consola"),
    ("skip_to_content", "Skip to content", "Saltar al contenido"),
    ("nav_label", "Console sections", "Secciones de la consola"),
    ("signed_in_as", "Signed in as", "Sesión de"),
    ("sign_out", "Sign out", "Cerrar sesión"),
    (
        "back_to_console",
        "Back to the overview",
        "Volver al resumen",
    ),
    // Sign-in.
    ("sign_in_key", "Operator key", "Clave de operador"),
    (
        "sign_in_help",
        "An API key with the admin scope (the key tollgate init printed has it). It is exchanged for a session cookie and not stored in the browser.",
        "Una clave de API con el ámbito admin (la que imprimió tollgate init lo tiene). Se cambia por una cookie de sesión y no se guarda en el navegador.",
    ),
    (
        "sign_in_wrong",
        "That key is not valid. Check it and try again.",
        "Esa clave no es válida. Revísela e inténtelo de nuevo.",
    ),
    (
        "sign_in_not_admin",
        "That key has neither the admin scope nor the approve scope, so it cannot sign in to the console. Create an operator key with: tollgate key create --name operator --scopes admin",
        "Esa clave no tiene el ámbito admin ni el ámbito approve y no puede entrar en la consola. Cree una clave de operador con: tollgate key create --name operator --scopes admin",
    ),
    (
        "sign_in_full",
        "The console already has as many sign-ins as it keeps, and none is ended to make room for another. Try again once an operator signs out or an idle sign-in expires, or restart the service to end them all.",
        "La consola ya tiene tantas sesiones como admite, y no se cierra ninguna para dejar sitio a otra. Inténtelo de nuevo cuando un operador cierre la suya o caduque una inactiva, o reinicie el servicio para cerrarlas todas.",
    ),
    (
        "sign_in_throttled",
        "Too many failed sign-ins from this address. Try again in {s} seconds.",
        "Demasiados intentos fallidos desde esta dirección. Inténtelo de nuevo dentro de {s} segundos.",
    ),
    (
        "sign_in_expired",
        "The sign-in form expired or was not loaded from this console. Load it again and sign in.",
        "El formulario caducó o no se cargó desde esta consola. Vuelva a cargarlo e inicie sesión.",
    ),
    (
        "not_audited",
        "The change was made but its audit row could not be written; check the server log and the database.",
        "El cambio se hizo pero no se pudo escribir su registro de auditoría; revise el registro del servidor y la base de datos.",
    ),
    // Refusals.
    (
        "refused_forbidden",
        "This form was refused: it did not come from a console page of this server, or its page is too old. Reload the page and try again.",
        "Se rechazó el formulario: no venía de una página de esta consola o la página es demasiado antigua. Recárguela e inténtelo de nuevo.",
    ),
    (
        "refused_not_found",
        "There is no such page in the console.",
        "Esa página no existe en la consola.",
    ),
    (
        "refused_method",
        "The console does not answer that method here.",
        "La consola no admite ese método aquí.",
    ),
    (
        "refused_too_large",
        "The form is too large.",
        "El formulario es demasiado grande.",
    ),
    (
        "refused_internal",
        "Something went wrong on the server; its log says what.",
        "Algo falló en el servidor; su registro lo explica.",
    ),
    // Overview.
    (
        "chart_hour",
        "Calls per minute, last hour",
        "Llamadas por minuto, última hora",
    ),
    (
        "chart_day",
        "Calls per hour, last day",
        "Llamadas por hora, último día",
    ),
    ("calls", "calls", "llamadas"),
    ("calls_heading", "Calls", "Llamadas"),
    ("peak", "peak", "máximo"),
    (
        "no_calls",
        "No calls in this period.",
        "Ninguna llamada en este periodo.",
    ),
    ("outcome_ok", "admitted", "admitidas"),
    ("outcome_tool", "tool failure", "fallo de la herramienta"),
    (
        "outcome_fault",
        "server or protocol fault",
        "fallo del servidor o del protocolo",
    ),
    (
        "tightest_buckets",
        "Closest to their limit now",
        "Más cerca de su límite ahora",
    ),
    (
        "no_buckets",
        "No limited bucket has counted a call in its current window.",
        "Ningún contador con límite ha contado llamadas en su ventana actual.",
    ),
    ("resets_in", "resets in", "se reinicia en"),
    ("last_errors", "Last errors", "Últimos errores"),
    (
        "no_errors",
        "No failed calls recorded.",
        "No hay llamadas fallidas registradas.",
    ),
    (
        "all_failures",
        "Every failure in the audit log",
        "Todos los fallos en el registro de auditoría",
    ),
    // Tables.
    ("at", "Time (UTC)", "Hora (UTC)"),
    ("credential", "Credential", "Credencial"),
    ("tool", "Tool", "Herramienta"),
    ("tools", "Tools", "Herramientas"),
    ("outcome", "Outcome", "Resultado"),
    ("duration", "Duration", "Duración"),
    ("source", "Source", "Origen"),
    ("id", "Id", "Id"),
    ("name", "Name", "Nombre"),
    ("mode", "Mode", "Modo"),
    ("scopes", "Scopes", "Ámbitos"),
    ("status", "Status", "Estado"),
    ("state", "State", "Estado"),
    ("kind", "Kind", "Tipo"),
    ("last_used", "Last used (UTC)", "Último uso (UTC)"),
    ("actions", "Actions", "Acciones"),
    ("never", "never", "nunca"),
    ("default_setting", "the setting", "el ajuste"),
    ("guard_channel", "Guard channel", "Canal de los guardas"),
    // Credentials.
    ("company_plan", "The company's plan:", "Plan de la empresa:"),
    ("api_keys", "API keys", "Claves de API"),
    (
        "no_keys",
        "No API keys yet.",
        "Todavía no hay claves de API.",
    ),
    ("oauth_clients", "OAuth clients", "Clientes OAuth"),
    (
        "no_clients",
        "No OAuth clients yet.",
        "Todavía no hay clientes OAuth.",
    ),
    ("create_key", "Create a key", "Crear una clave"),
    (
        "create_client",
        "Create an OAuth client",
        "Crear un cliente OAuth",
    ),
    (
        "scopes_pick_help",
        "Choose at least one. Built-in tools have a scope per resource and action; a backend's tools, one per category. Beside each scope, the tools it opens now.",
        "Elija al menos uno. Las herramientas incluidas tienen un ámbito por recurso y acción; las de un sistema conectado, uno por categoría. Junto a cada ámbito, las herramientas que abre ahora.",
    ),
    ("scopes_special", "Special", "Especiales"),
    (
        "scopes_builtin",
        "Built-in tools: {resource}",
        "Herramientas incluidas: {resource}",
    ),
    (
        "scopes_backend",
        "Backend {backend}",
        "Sistema conectado {backend}",
    ),
    (
        "scope_super",
        "every tool, built-in and backend, now and to come; not this console",
        "todas las herramientas, incluidas y de sistemas conectados, ahora y en el futuro; no esta consola",
    ),
    (
        "scope_admin",
        "signs in to this console; opens no tool, and * does not include it",
        "permite entrar en esta consola; no abre ninguna herramienta, y * no lo incluye",
    ),
    (
        "scope_approve",
        "decides on the calls a policy rule holds for approval (the Approvals page); opens no tool, and * does not include it",
        "decide sobre las llamadas que una regla de política retiene para su aprobación (la página Aprobaciones); no abre ninguna herramienta, y * no lo incluye",
    ),
    (
        "scope_no_tools_now",
        "no tool needs it now (the backend lists none)",
        "ninguna herramienta lo necesita ahora (el sistema no ofrece ninguna)",
    ),
    (
        "scope_none",
        "Choose at least one scope.",
        "Elija al menos un ámbito.",
    ),
    (
        "scope_malformed",
        "{scope} is not a scope: scopes look like invoices:read, or * or admin.",
        "{scope} no es un ámbito: los ámbitos son como invoices:read, o * o admin.",
    ),
    (
        "scope_unknown",
        "Unknown scope: {scope}.",
        "Ámbito desconocido: {scope}.",
    ),
    (
        "scope_did_you_mean",
        "Did you mean {scopes}?",
        "¿Quería decir {scopes}?",
    ),
    (
        "scope_no_backend",
        "No backend named {backend} is configured: a backend's scopes can be chosen once its [[backends]] entry is in the server's configuration.",
        "No hay ningún sistema conectado llamado {backend}: sus ámbitos se pueden elegir cuando su entrada [[backends]] está en la configuración del servidor.",
    ),
    ("expires", "Expires", "Caduca"),
    ("expires_utc", "Expires (UTC)", "Caduca (UTC)"),
    ("expires_never", "never", "nunca"),
    ("expires_1d", "in 1 day", "en 1 día"),
    ("expires_7d", "in 7 days", "en 7 días"),
    ("expires_30d", "in 30 days", "en 30 días"),
    ("expires_90d", "in 90 days", "en 90 días"),
    (
        "expires_unknown",
        "Choose an expiry from the list.",
        "Elija una caducidad de la lista.",
    ),
    (
        "client_scopes_help",
        "The scopes its access tokens may carry, comma-separated, as in the key form's list (not admin).",
        "Los ámbitos que pueden llevar sus tokens de acceso, separados por comas, como en la lista del formulario de claves (no admin).",
    ),
    ("rotate", "Rotate", "Renovar"),
    ("revoke", "Revoke", "Revocar"),
    ("plan_default", "plan default", "el del plan"),
    (
        "secret_once",
        "Copy the secret now: it is shown only once",
        "Copie el secreto ahora: solo se muestra una vez",
    ),
    (
        "secret_help",
        "tollgate keeps only a hash of it. If it is lost, rotate the key or create a new one.",
        "tollgate solo guarda un hash. Si se pierde, renueve la clave o cree una nueva.",
    ),
    ("key_id", "Key id:", "Id de la clave:"),
    ("client_id", "Client id:", "Id del cliente:"),
    ("copy", "Copy to the clipboard", "Copiar al portapapeles"),
    ("copied", "Copied", "Copiado"),
    (
        "back_to_credentials",
        "Back to the credentials",
        "Volver a las credenciales",
    ),
    (
        "confirm_revoke_key",
        "Revoke key {id}? Every call with it is refused from the next one on, on every node. This cannot be undone.",
        "¿Revocar la clave {id}? Todas sus llamadas se rechazan desde la siguiente, en todos los nodos. No se puede deshacer.",
    ),
    (
        "confirm_rotate_key",
        "Give key {id} a new secret? The old secret keeps working for the grace period you choose.",
        "¿Dar un secreto nuevo a la clave {id}? El anterior sigue funcionando durante el periodo de gracia que elija.",
    ),
    (
        "confirm_revoke_client",
        "Revoke OAuth client {id}? Its tokens are refused from the next call on and it can get no new ones.",
        "¿Revocar el cliente OAuth {id}? Sus tokens se rechazan desde la siguiente llamada y no puede obtener otros.",
    ),
    (
        "grace",
        "The old secret keeps working for",
        "El secreto anterior sigue funcionando durante",
    ),
    ("grace_none", "no time: stop it now", "nada: se detiene ya"),
    ("grace_hour", "one hour", "una hora"),
    ("grace_day", "one day", "un día"),
    ("cancel", "Cancel", "Cancelar"),
    // Limits.
    (
        "plan_defaults",
        "Plan defaults",
        "Valores por defecto de los planes",
    ),
    ("plan", "Plan", "Plan"),
    ("current_plan", "current", "actual"),
    ("client_per_minute", "per client", "por cliente"),
    ("hourly", "per hour, company", "por hora, empresa"),
    ("unlimited", "unlimited", "sin límite"),
    ("per_minute", "Calls per minute", "Llamadas por minuto"),
    (
        "per_minute_help",
        "Per-credential calls per minute by tool category; a change applies on the next call on every node.",
        "Llamadas por minuto y credencial según la categoría de la herramienta; un cambio se aplica en la siguiente llamada en todos los nodos.",
    ),
    (
        "set_plan_limit",
        "Change a plan's default",
        "Cambiar el valor por defecto de un plan",
    ),
    (
        "overrides",
        "Per-credential overrides",
        "Excepciones por credencial",
    ),
    (
        "no_overrides",
        "No credential has an override.",
        "Ninguna credencial tiene excepciones.",
    ),
    (
        "set_credential_limit",
        "Set a credential's limit",
        "Fijar el límite de una credencial",
    ),
    (
        "override_help",
        "Leave it empty to go back to the plan's default.",
        "Déjelo vacío para volver al valor del plan.",
    ),
    ("category", "Category", "Categoría"),
    ("save", "Save", "Guardar"),
    (
        "bad_per_minute",
        "Calls per minute must be a whole number of at least 1.",
        "Las llamadas por minuto deben ser un número entero de al menos 1.",
    ),
    // Audit.
    ("since", "From", "Desde"),
    ("until", "Until", "Hasta"),
    (
        "outcome_help",
        "ok, or an error code such as rate_limited.",
        "ok, o un código de error como rate_limited.",
    ),
    ("failures_only", "Failures only", "Solo fallos"),
    ("times_utc", "Times are UTC.", "Las horas son UTC."),
    ("filter", "Filter", "Filtrar"),
    ("clear", "Clear", "Quitar filtros"),
    ("export_csv", "Export as CSV", "Exportar como CSV"),
    (
        "export_help",
        "(the newest {n} rows that match, at most)",
        "(como mucho, las {n} filas más recientes que coinciden)",
    ),
    ("no_rows", "No rows match.", "Ninguna fila coincide."),
    ("pages", "Pages", "Páginas"),
    ("newer", "Newer", "Más recientes"),
    ("older", "Older", "Más antiguas"),
    ("open_row", "Open this row", "Abrir esta fila"),
    (
        "open_row_help",
        "Open a row by its time to see every field it keeps and what the catalog says about its outcome.",
        "Abra una fila por su hora para ver todos sus campos y lo que dice el catálogo sobre su resultado.",
    ),
    // One audit row.
    (
        "audit_row_title",
        "Audit row {id}",
        "Fila {id} del registro de auditoría",
    ),
    (
        "back_to_audit",
        "Back to the audit log",
        "Volver al registro de auditoría",
    ),
    (
        "not_authenticated",
        "(the caller did not authenticate)",
        "(quien llamó no se autenticó)",
    ),
    ("client", "OAuth client", "Cliente OAuth"),
    ("backend", "Backend", "Sistema conectado"),
    (
        "built_in",
        "none: a built-in tool",
        "ninguno: una herramienta incluida",
    ),
    ("request_id", "Request id", "Id. de la solicitud"),
    ("trace_id", "Trace id", "Id. de la traza"),
    (
        "no_trace",
        "none: the caller sent no trace and traces are not exported",
        "ninguno: quien llamó no envió traza y las trazas no se exportan",
    ),
    ("changed", "What was changed", "Qué se cambió"),
    ("transport", "Transport", "Transporte"),
    (
        "summary_row_help",
        "This row stands for every refusal, with this outcome and within one minute, of callers from this source that did not authenticate; its tool and request id are those of the first (the tool is * when they named several).",
        "Esta fila representa todos los rechazos, con este resultado y en un mismo minuto, de quienes llamaron desde este origen sin autenticarse; su herramienta e id. de solicitud son los del primero (la herramienta es * si nombraron varias).",
    ),
    (
        "catalog_entry",
        "What the error catalog says about this code",
        "Lo que dice el catálogo de errores sobre este código",
    ),
    (
        "catalog_entry_help",
        "The audit log keeps the outcome's code, not the error the caller received: its hint named the caller's arguments, which the log never keeps. Below is the catalog entry for the code, with the template its hint is written from.",
        "El registro de auditoría guarda el código del resultado, no el error que recibió quien llamó: su indicación nombraba los argumentos de la llamada, que el registro nunca guarda. Debajo está la entrada del catálogo para el código, con la plantilla de la que se escribe su indicación.",
    ),
    (
        "shared_code_help",
        "{n} catalog entries carry this code; the row does not say which of them it was.",
        "{n} entradas del catálogo usan este código; la fila no indica cuál de ellas fue.",
    ),
    (
        "no_catalog_entry",
        "This release's catalog has no entry for this code (a newer release may have written the row).",
        "El catálogo de esta versión no tiene ninguna entrada para este código (puede que una versión más reciente escribiera la fila).",
    ),
    ("class", "Class", "Clase"),
    ("class_protocol", "protocol error", "error de protocolo"),
    (
        "class_transport",
        "refused by the HTTP transport",
        "rechazo del transporte HTTP",
    ),
    (
        "class_guard",
        "refused by a guard",
        "rechazo de una comprobación previa",
    ),
    ("class_tool", "tool failure", "fallo de la herramienta"),
    ("class_server_fault", "server fault", "fallo del servidor"),
    ("jsonrpc_code", "JSON-RPC code", "Código JSON-RPC"),
    ("hint_template", "its template", "su plantilla"),
    // Users.
    (
        "users_help",
        "The people and service accounts of the company's identity provider who have called, most recently seen first (a user is recorded the first time one of their tokens is verified). Calls and refusals are those of the last 24 hours, from the audit log; a refusal is a call a guard refused: a limit, a scope, a block. A block applies to the user's next call on every node.",
        "Las personas y cuentas de servicio del proveedor de identidad de la empresa que han llamado, de la vista más reciente a la más antigua (un usuario se registra la primera vez que se verifica uno de sus tokens). Las llamadas y los rechazos son los de las últimas 24 horas, según el registro de auditoría; un rechazo es una llamada que rechazó una comprobación previa: un límite, un ámbito, un bloqueo. Un bloqueo se aplica a la siguiente llamada del usuario en todos los nodos.",
    ),
    (
        "no_users",
        "No user of the identity provider has called yet.",
        "Todavía no ha llamado ningún usuario del proveedor de identidad.",
    ),
    ("subject", "Subject", "Sujeto"),
    ("issuer", "Issuer", "Emisor"),
    ("last_seen", "Last seen (UTC)", "Visto por última vez (UTC)"),
    ("refusals_day", "Refusals, 24 h", "Rechazos, 24 h"),
    (
        "own_limits",
        "Own limits, per minute",
        "Límites propios, por minuto",
    ),
    ("user_active", "active", "activo"),
    ("user_blocked_since", "blocked since", "bloqueado desde"),
    ("block", "Block", "Bloquear"),
    ("unblock", "Unblock", "Desbloquear"),
    (
        "confirm_block_user",
        "Block {name} ({id})? Their next call is refused, on every node, until they are unblocked.",
        "¿Bloquear a {name} ({id})? Su siguiente llamada se rechaza, en todos los nodos, hasta que se desbloquee.",
    ),
    (
        "confirm_unblock_user",
        "Unblock {name} ({id})? Their next call is admitted again, on every node.",
        "¿Desbloquear a {name} ({id})? Su siguiente llamada se vuelve a admitir, en todos los nodos.",
    ),
    // Backends.
    (
        "no_backends",
        "No backends are configured: the built-in tools only.",
        "No hay sistemas conectados: solo las herramientas incluidas.",
    ),
    ("scope", "Scope", "Ámbito"),
    ("calls_day", "Calls, 24 h", "Llamadas, 24 h"),
    ("failures_day", "Failures, 24 h", "Fallos, 24 h"),
    (
        "backend_counts_help",
        "Calls in the last 24 hours, from the audit log. A failure is any outcome but ok: the backend's errors and the refusals of calls meant for it alike. A tool's counts open its rows of the audit log.",
        "Llamadas de las últimas 24 horas, según el registro de auditoría. Un fallo es cualquier resultado distinto de ok: tanto los errores del sistema como los rechazos de llamadas dirigidas a él. Los números de cada herramienta abren sus filas del registro.",
    ),
    (
        "backend_admission_help",
        "In flight: the calls being forwarded now, of the most the backend is sent at once (max_in_flight); waiting: the calls queued for one of those places. After breaker_failures failures in a row (unreachable, too slow, a temporary 502, 503 or 504) the circuit opens: calls are refused without reaching the backend until, after the cooldown, one trial call succeeds.",
        "En curso: las llamadas que se reenvían ahora, del máximo que se envía a la vez al sistema (max_in_flight); en espera: las llamadas en cola para uno de esos puestos. Tras breaker_failures fallos seguidos (inalcanzable, demasiado lento, un 502, 503 o 504 temporal) el circuito se abre: las llamadas se rechazan sin llegar al sistema hasta que, pasada la pausa, una llamada de prueba sale bien.",
    ),
    ("in_flight", "In flight / limit", "En curso / límite"),
    ("queued", "Waiting", "En espera"),
    ("circuit", "Circuit", "Circuito"),
    ("circuit_closed", "closed", "cerrado"),
    (
        "circuit_open_for",
        "open: refused for {seconds} s more",
        "abierto: rechaza {seconds} s más",
    ),
    (
        "circuit_half_open",
        "half-open: one trial call",
        "semiabierto: una llamada de prueba",
    ),
    ("tools_of", "Tools of {name}", "Herramientas de {name}"),
    ("no_longer_offered", "no longer offered", "ya no se ofrece"),
    (
        "no_tools",
        "This backend offers no tools now.",
        "Este sistema no ofrece herramientas ahora.",
    ),
];

/// The words of one language.
pub struct Texts {
    map: Value,
}

/// Every `(key, English, Spanish)` of the console's and the OAuth pages' tables.
fn every_text() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    TEXTS
        .iter()
        .chain(oauth::TEXTS)
        .chain(latency::TEXTS)
        .chain(pins::TEXTS)
        .chain(approvals::TEXTS)
}

impl Texts {
    fn of(english: bool) -> Texts {
        let map: Map<String, Value> = every_text()
            .map(|(k, en, es)| {
                (
                    (*k).to_owned(),
                    Value::from(if english { *en } else { *es }),
                )
            })
            .collect();
        Texts {
            map: Value::Object(map),
        }
    }

    /// The text of `key` (the key itself when there is none: a test keeps that from
    /// happening).
    pub fn get<'a>(&'a self, key: &'a str) -> &'a str {
        self.map.get(key).and_then(Value::as_str).unwrap_or(key)
    }

    /// Every text, for the templates (`tr.<key>`).
    pub fn map(&self) -> &Value {
        &self.map
    }
}

static ENGLISH: LazyLock<Texts> = LazyLock::new(|| Texts::of(true));
static SPANISH: LazyLock<Texts> = LazyLock::new(|| Texts::of(false));

/// The texts of `locale`.
pub fn texts(locale: Locale) -> &'static Texts {
    match locale {
        Locale::En => &ENGLISH,
        Locale::Es => &SPANISH,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `tr.<key>` of the templates and every `get("<key>")` of the console's code.
    fn keys_used() -> BTreeSet<String> {
        let sources = [
            include_str!("templates/base.html"),
            include_str!("templates/sign_in.html"),
            include_str!("templates/overview.html"),
            include_str!("templates/credentials.html"),
            include_str!("templates/secret.html"),
            include_str!("templates/confirm.html"),
            include_str!("templates/limits.html"),
            include_str!("templates/audit.html"),
            include_str!("templates/audit_row.html"),
            include_str!("templates/backends.html"),
            include_str!("templates/users.html"),
            include_str!("templates/grants.html"),
            include_str!("templates/refused.html"),
            include_str!("templates/front_door.html"),
            include_str!("templates/latency.html"),
            include_str!("mod.rs"),
            include_str!("pages.rs"),
            include_str!("credentials.rs"),
            include_str!("charts.rs"),
            include_str!("audit_log.rs"),
            include_str!("backends.rs"),
            include_str!("users.rs"),
            include_str!("grants.rs"),
            include_str!("front_door.rs"),
            include_str!("latency.rs"),
            include_str!("names.rs"),
        ];
        let mut keys = BTreeSet::new();
        for source in sources {
            for marker in ["tr.", "get(\""] {
                for (at, _) in source.match_indices(marker) {
                    let key: String = source[at + marker.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !key.is_empty() {
                        keys.insert(key);
                    }
                }
            }
        }
        // The navigation's entries are looked up by page name.
        keys.extend(
            [
                "overview",
                "credentials",
                "users",
                "grants",
                "limits",
                "audit",
                "latency",
                "backends",
                "approvals",
                "approval_state_pending",
                "approval_state_approved",
                "approval_state_used",
                "approval_state_denied",
                "approval_state_expired",
            ]
            .map(String::from),
        );
        keys
    }

    #[test]
    fn every_text_used_exists_in_both_languages_and_each_key_once() {
        let defined: BTreeSet<&str> = every_text().map(|(k, _, _)| *k).collect();
        assert_eq!(
            defined.len(),
            every_text().count(),
            "a key is defined twice"
        );
        // Fields of the pages' data read with get() (a form's fields) are not texts.
        let not_texts = [
            "csrf",
            "key",
            "scopes",
            "guard_channel",
            "mode",
            "name",
            "grace",
            "per_minute",
            "credential",
            "category",
            "plan",
            "retry_after",
            "expires",
        ];
        let missing: Vec<String> = keys_used()
            .into_iter()
            .filter(|k| !defined.contains(k.as_str()) && !not_texts.contains(&k.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "texts used but not defined: {missing:?}"
        );
        for (key, en, es) in every_text() {
            assert!(!en.is_empty() && !es.is_empty(), "{key}");
        }
    }

    #[test]
    fn the_language_follows_the_locale() {
        assert_eq!(texts(Locale::En).get("sign_in"), "Sign in");
        assert_eq!(texts(Locale::Es).get("sign_in"), "Iniciar sesión");
        assert_eq!(texts(Locale::Es).get("no such key"), "no such key");
    }
}
