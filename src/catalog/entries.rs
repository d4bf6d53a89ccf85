//! The catalog's entries: [`ErrorKind`], one variant per failure tollgate can report, and
//! [`ErrorKind::spec`], the single exhaustive `match` (the one `catalog!` table below) that
//! decides each entry's JSON-RPC code, string code, HTTP status, numeric category,
//! retryability, class and hints. What an entry's class and status rule decide is here too:
//! its [`Channel`], its HTTP status on the MCP endpoint, and whether a model can act on it.

use crate::config::ErrorStatusMode;

/// Which channel an error travels on when it reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// A JSON-RPC `error` object: protocol failures and guard rejections.
    JsonRpc,
    /// A normal `tools/call` result with `isError: true`: failures inside a tool.
    ToolResult,
}

impl Channel {
    /// The channel of an entry of this class: only failures inside a tool are results.
    const fn of(class: Class) -> Channel {
        match class {
            Class::Tool => Channel::ToolResult,
            _ => Channel::JsonRpc,
        }
    }
}

/// What kind of failure an entry is. The class decides, once, how the failure travels
/// ([`Channel`]) and how metrics and the audit log count it: a guard rejection, a tool
/// failure, or a fault of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The message or the method is wrong (JSON-RPC framing, revisions, names).
    Protocol,
    /// The HTTP request is refused before it becomes a message (origin, size, session).
    Transport,
    /// A guard of the chain refused the call (credential, quota, scope, plan, key, rule).
    Guard,
    /// The tool ran and failed; reported as an `isError` result the model can read.
    Tool,
    /// The server could not do its part (an unexpected fault, the store unavailable).
    ServerFault,
}

/// Which HTTP status a JSON-RPC error of an entry gets on the MCP endpoint
/// (ERRORS.md, "HTTP status on the MCP endpoint"). SDK clients read JSON-RPC errors only
/// from a 200 response, so most entries keep 200 and only these carry their own status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusRule {
    /// Always its own status: the request cannot be read as a call at all.
    Own,
    /// Its own status in the `semantic` status mode, 200 in `compatible`.
    Semantic,
    /// 200 in both modes (the client reads the JSON-RPC error).
    Ok,
}

/// The fixed identities of one catalog entry.
#[derive(Debug, Clone, Copy)]
pub struct EntrySpec {
    /// JSON-RPC `error.code`, sent when the error travels as a JSON-RPC error. An entry of
    /// the tool-result channel travels as an `isError` result, whose envelope has none.
    pub rpc_code: i64,
    /// Stable machine id (`error.message` and `data.code`).
    pub code: &'static str,
    /// The HTTP status an equivalent REST call would return.
    pub http_status: u16,
    /// Category code of the numeric model (1xxx protocol … 5xxx adapter).
    pub error_code: u32,
    /// Whether retrying the same call later can succeed.
    pub retryable: bool,
    /// What kind of failure the entry is.
    pub class: Class,
    /// The channel the entry is reported on (decided by its class).
    pub channel: Channel,
    /// Which HTTP status its JSON-RPC error gets on the MCP endpoint.
    pub status: StatusRule,
    /// The hint's template in English: one sentence, safe to show to a model
    /// ([`template`](mod@super::template) describes the syntax).
    pub hint_en: &'static str,
    /// The same template in Spanish.
    pub hint_es: &'static str,
    /// When the entry is used (documentation only).
    pub when: &'static str,
}

macro_rules! catalog {
    ($( $(#[$doc:meta])* $variant:ident => ($rpc:expr, $code:literal, $http:literal, $ec:literal,
        $retry:literal, $class:ident, $status:ident, $en:literal, $es:literal, $when:literal) ),+ $(,)?) => {
        /// One entry of the error catalog.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $( $(#[$doc])* $variant, )+
        }

        impl ErrorKind {
            /// Every entry, in catalog order.
            pub const ALL: &'static [ErrorKind] = &[ $( ErrorKind::$variant, )+ ];

            /// The fixed identities of this entry.
            pub fn spec(self) -> EntrySpec {
                match self {
                    $( ErrorKind::$variant => EntrySpec {
                        rpc_code: $rpc,
                        code: $code,
                        http_status: $http,
                        error_code: $ec,
                        retryable: $retry,
                        class: Class::$class,
                        channel: Channel::of(Class::$class),
                        status: StatusRule::$status,
                        hint_en: $en,
                        hint_es: $es,
                        when: $when,
                    }, )+
                }
            }
        }
    };
}

impl ErrorKind {
    /// The entries whose string code is `code`, in catalog order. A code names more than
    /// one entry where a backend's failure shares a guard's or the server's code
    /// (`backend_unavailable`); the first is the one the catalog lists first.
    pub fn with_code(code: &str) -> impl Iterator<Item = ErrorKind> + '_ {
        ErrorKind::ALL
            .iter()
            .copied()
            .filter(move |kind| kind.spec().code == code)
    }

    /// The HTTP status of this entry's JSON-RPC error on the MCP endpoint, in status
    /// `mode`. `modern` says the request was of the stateless era, where an unknown method
    /// is answered 404; `meta_param` that the error names a `_meta` field, which the
    /// stateless era answers 400 like a malformed header.
    pub fn mcp_http_status(self, mode: ErrorStatusMode, modern: bool, meta_param: bool) -> u16 {
        let spec = self.spec();
        let own = match spec.status {
            StatusRule::Own => true,
            StatusRule::Semantic => mode == ErrorStatusMode::Semantic,
            StatusRule::Ok => false,
        } || (self == ErrorKind::MethodNotFound && modern)
            || (self == ErrorKind::InvalidParams && meta_param);
        if own { spec.http_status } else { 200 }
    }
}

impl ErrorKind {
    /// Whether a guard's refusal of this entry is one a model can act on (call another
    /// tool, wait, ask for a scope or a plan, fix an argument or a key) — the refusals that
    /// the `tool_result` guard channel answers as `isError` results. The authentication
    /// entries are not: nothing can be done without a credential.
    pub fn model_can_act(self) -> bool {
        matches!(
            self,
            ErrorKind::UnknownTool
                | ErrorKind::ToolRetired
                | ErrorKind::ToolUnderReview
                | ErrorKind::RateLimited
                | ErrorKind::PlanUpgradeRequired
                | ErrorKind::PlanLimitExceeded
                | ErrorKind::InsufficientScope
                | ErrorKind::IdempotencyKeyRequired
                | ErrorKind::IdempotencyKeyInvalid
                | ErrorKind::IdempotencyKeyReused
                | ErrorKind::IdempotencyKeyInUse
                | ErrorKind::GuardrailViolation
                | ErrorKind::PolicyDenied
                | ErrorKind::ApprovalRequired
                | ErrorKind::ApprovalDenied
                | ErrorKind::ApprovalExpired
        )
    }
}

catalog! {
    // ---- Protocol errors -------------------------------------------------------------
    /// Body or line is not JSON.
    ParseError => (-32700, "parse_error", 400, 1001, false, Protocol, Own,
        "The message is not valid JSON; send one UTF-8 JSON-RPC object per message.",
        "El mensaje no es JSON válido; envíe un objeto JSON-RPC en UTF-8 por mensaje.",
        "body or line is not JSON (id null)"),
    /// Not a JSON-RPC request, or a batch where the era forbids it.
    InvalidRequest => (-32600, "invalid_request", 400, 1002, false, Protocol, Own,
        "The message is not a valid JSON-RPC 2.0 request for this protocol revision[ ({details.reason})].",
        "El mensaje no es una petición JSON-RPC 2.0 válida para esta revisión del protocolo[ ({details.reason})].",
        "not a JSON-RPC request; batch where the era forbids it"),
    /// Unknown method, or a capability not served.
    MethodNotFound => (-32601, "method_not_found", 404, 1003, false, Protocol, Ok,
        "The method {details.method:q} does not exist or is not served by this protocol revision.",
        "El método {details.method:q} no existe o no se sirve en esta revisión del protocolo.",
        "unknown method, or a capability not served"),
    /// Params do not match the method's shape.
    InvalidParams => (-32602, "invalid_params", 400, 1004, false, Protocol, Ok,
        "The parameter `{param}` is missing or does not match what this method expects[ ({details.reason})].",
        "El parámetro `{param}` falta o no coincide con lo que espera este método[ ({details.reason})].",
        "params do not match the method's shape; bad cursor; missing 2026 `_meta`"),
    /// `tools/call` name does not resolve.
    UnknownTool => (-32602, "unknown_tool", 404, 1005, false, Protocol, Ok,
        "No tool is named {details.name:q}; call tools/list to see the tools you can use.",
        "Ninguna herramienta se llama {details.name:q}; llame a tools/list para ver las disponibles.",
        "`tools/call` name does not resolve"),
    /// A backend tool whose definition changed since an operator approved it (or a new
    /// one under manual pinning): held until an operator decides.
    ToolUnderReview => (-32602, "tool_under_review", 423, 1021, false, Protocol, Ok,
        "The tool {details.name:q} is held until an operator reviews its definition, which changed or is new; ask your user to have it approved, then call tools/list again.",
        "La herramienta {details.name:q} está retenida hasta que un operador revise su definición, que cambió o es nueva; pida a su usuario que la haga aprobar y vuelva a llamar a tools/list.",
        "a backend tool whose definition differs from the approved one (or is new under `pinning = \"manual\"`): hidden from tools/list, never forwarded; `details.state` is `pending` or `rejected`"),
    /// An upstream's prompt whose definition changed since an operator approved it (or a
    /// new one under manual pinning): held until an operator decides.
    PromptUnderReview => (-32602, "prompt_under_review", 423, 1022, false, Protocol, Ok,
        "The prompt {details.name:q} is held until an operator reviews its definition, which changed or is new; ask your user to have it approved, then call prompts/list again.",
        "La plantilla {details.name:q} está retenida hasta que un operador revise su definición, que cambió o es nueva; pida a su usuario que la haga aprobar y vuelva a llamar a prompts/list.",
        "an upstream's prompt whose definition differs from the approved one (or is new under `pinning = \"manual\"`): hidden from prompts/list, never forwarded; `details.state` is `pending` or `rejected`"),
    /// A retired tool name.
    ToolRetired => (-32602, "tool_retired", 410, 1006, false, Protocol, Ok,
        "The tool {details.name:q} was retired; call {replacement} instead.",
        "La herramienta {details.name:q} se retiró; llame a {replacement} en su lugar.",
        "a retired name; `replacement` names the tool to call instead"),
    /// `resources/read` of an unknown URI.
    ResourceNotFound => (-32602, "resource_not_found", 404, 1007, false, Protocol, Ok,
        "No resource has the URI {details.uri:q}; call resources/list to see the readable resources.",
        "Ningún recurso tiene la URI {details.uri:q}; llame a resources/list para ver los disponibles.",
        "`resources/read` of an unknown URI (`details.uri`)"),
    /// Handshake era: the requested protocol version is not supported.
    UnsupportedProtocolVersion => (-32602, "unsupported_protocol_version", 400, 1008, false, Protocol, Own,
        "The protocol version[ {requested:q}] is not supported; use one of {supported}.",
        "La versión del protocolo[ {requested:q}] no está soportada; use una de {supported}.",
        "handshake era; `supported`, `requested`"),
    /// 2026-07-28: HTTP headers disagree with the body.
    HeaderMismatch => (-32020, "header_mismatch", 400, 1009, false, Protocol, Own,
        "The {details.header} header does not match the body; send the same value in both.",
        "La cabecera {details.header} no coincide con el cuerpo; envíe el mismo valor en ambos.",
        "2026-07-28: `Mcp-Method`/`Mcp-Name`/version header vs body"),
    /// 2026-07-28: the call needs a client capability that was not declared.
    MissingClientCapability => (-32021, "missing_client_capability", 400, 1010, false, Protocol, Own,
        "This call needs the client capability {requiredCapabilities}, which the request did not declare.",
        "Esta llamada necesita la capacidad del cliente {requiredCapabilities}, que la petición no declaró.",
        "2026-07-28; `data.requiredCapabilities`"),
    /// 2026-07-28: the requested protocol version is not supported.
    UnsupportedProtocolVersionModern => (-32022, "unsupported_protocol_version", 400, 1008, false, Protocol, Own,
        "The protocol version[ {requested:q}] is not supported; use one of {supported}.",
        "La versión del protocolo[ {requested:q}] no está soportada; use una de {supported}.",
        "2026-07-28; `supported`, `requested`"),
    /// Unexpected fault; reveals nothing internal.
    InternalError => (-32603, "internal_error", 500, 4000, false, ServerFault, Own,
        "An unexpected error occurred on the server; it has been logged.",
        "Se produjo un error inesperado en el servidor; ha quedado registrado.",
        "unexpected fault; message reveals nothing internal"),
    /// The database is locked past its timeout, the disk is full, or the server is stopping.
    BackendUnavailable => (-32603, "backend_unavailable", 503, 4002, true, ServerFault, Ok,
        "The server's storage is temporarily unavailable; retry with backoff.",
        "El almacenamiento del servidor no está disponible por ahora; reintente con espera.",
        "the database is locked past its timeout, the disk is full, shutting down"),
    /// The company's identity provider cannot be reached to decide on a token.
    IdentityProviderUnavailable => (-32603, "backend_unavailable", 503, 4002, true, ServerFault, Ok,
        "The company's identity provider[ {details.issuer}] cannot be reached to check this token right now; retry with backoff.",
        "No se puede contactar ahora con el proveedor de identidad de la empresa[ {details.issuer}] para comprobar este token; reintente con espera.",
        "the identity provider cannot be reached to verify a token (its keys, or introspection)"),

    // ---- Transport errors (Streamable HTTP) --------------------------------------------
    /// HTTP: the `Origin` or `Host` header is not on the allow-list (DNS-rebinding protection).
    OriginNotAllowed => (-32600, "origin_not_allowed", 403, 1011, false, Transport, Own,
        "The request's Origin or Host is not allowed to reach this server.",
        "El Origin o el Host de la petición no tiene permitido acceder a este servidor.",
        "HTTP: `Origin`/`Host` not on the allow-list (DNS-rebinding protection)"),
    /// HTTP: the body is larger than the configured cap.
    PayloadTooLarge => (-32600, "payload_too_large", 413, 1012, false, Transport, Own,
        "The request body is larger than this server accepts[ ({details.max_bytes} bytes at most)].",
        "El cuerpo de la petición es mayor de lo que acepta este servidor[ ({details.max_bytes} bytes como máximo)].",
        "HTTP: body over `http.max_body_bytes`"),
    /// HTTP: the `Accept` header allows neither JSON nor an event stream.
    NotAcceptable => (-32600, "not_acceptable", 406, 1013, false, Transport, Own,
        "Send Accept: application/json, text/event-stream.",
        "Envíe Accept: application/json, text/event-stream.",
        "HTTP: `Accept` lists neither `application/json` nor `text/event-stream`"),
    /// HTTP: the body is not declared as JSON.
    UnsupportedMediaType => (-32600, "unsupported_media_type", 415, 1014, false, Transport, Own,
        "Send the JSON-RPC message with Content-Type: application/json.",
        "Envíe el mensaje JSON-RPC con Content-Type: application/json.",
        "HTTP: `Content-Type` is not `application/json`"),
    /// HTTP: the `Mcp-Session-Id` is unknown, expired or was ended.
    SessionNotFound => (-32600, "session_not_found", 404, 1015, false, Transport, Own,
        "This session has expired or was ended; send initialize again to start a new one.",
        "Esta sesión caducó o se cerró; envíe initialize de nuevo para iniciar otra.",
        "HTTP, handshake era: unknown, expired or deleted `Mcp-Session-Id`"),
    /// HTTP: the method is not allowed on this path.
    HttpMethodNotAllowed => (-32600, "http_method_not_allowed", 405, 1016, false, Transport, Own,
        "This HTTP method is not allowed here; MCP requests are POSTed to /mcp.",
        "Este método HTTP no está permitido aquí; las peticiones MCP se envían con POST a /mcp.",
        "HTTP: e.g. `GET /mcp` (no server-initiated stream), `DELETE` without a session"),
    /// HTTP: the request headers are larger than the cap.
    HeadersTooLarge => (-32600, "headers_too_large", 431, 1018, false, Transport, Own,
        "The request headers are larger than this server accepts.",
        "Las cabeceras de la petición son mayores de lo que acepta este servidor.",
        "HTTP: a request or header line over 16 KiB, more than 128 header lines, or a head over 64 KiB"),
    /// HTTP: the request carries no `Host` (HTTP/1.1), more than one, or an empty one.
    HostHeaderInvalid => (-32600, "host_header_invalid", 400, 1020, false, Transport, Own,
        "Send exactly one Host header naming this server.",
        "Envíe exactamente una cabecera Host con el nombre de este servidor.",
        "HTTP: an HTTP/1.1 request without `Host`, with more than one, or with an empty one (RFC 9112 §3.2)"),
    /// HTTP: the client did not send its request head or body in time.
    RequestTimeout => (-32600, "request_timeout", 408, 1019, true, Transport, Own,
        "The request did not arrive in time; send it again.",
        "La petición no llegó a tiempo; vuelva a enviarla.",
        "HTTP: the request head or body was not received within its deadline (`http.head_timeout_ms`, `http.body_timeout_ms`)"),
    /// HTTP: no connection can be taken on.
    ServerBusy => (-32603, "server_busy", 503, 4003, true, Transport, Own,
        "The server is busy with other requests; retry with backoff.",
        "El servidor está ocupado con otras peticiones; reintente con espera.",
        "HTTP: `http.max_connections` are open and every one is being worked on, or no thread can be created"),
    /// HTTP: nothing is served at this path.
    PathNotFound => (-32601, "path_not_found", 404, 1017, false, Transport, Own,
        "Nothing is served at this path; the MCP endpoint is /mcp.",
        "No se sirve nada en esta ruta; el punto de acceso MCP es /mcp.",
        "HTTP: unknown path"),

    // ---- Guard errors ----------------------------------------------------------------
    /// Missing, malformed, unknown, expired or revoked credential.
    InvalidToken => (-32001, "invalid_token", 401, 1101, false, Guard, Own,
        "A valid credential is required: set TOLLGATE_TOKEN (or TOLLGATE_TOKEN_FILE) for stdio, or send Authorization: Bearer <token> over HTTP.",
        "Se necesita una credencial válida: defina TOLLGATE_TOKEN (o TOLLGATE_TOKEN_FILE) en stdio, o envíe Authorization: Bearer <token> por HTTP.",
        "missing, malformed, unknown, expired or revoked credential"),
    /// The credential's OAuth client was revoked.
    ClientRevoked => (-32002, "client_revoked", 403, 1102, false, Guard, Semantic,
        "The OAuth client this credential belongs to has been revoked.",
        "El cliente OAuth al que pertenece esta credencial ha sido revocado.",
        "the credential's OAuth client was revoked"),
    /// The operator blocked the provider user the token names.
    UserBlocked => (-32002, "user_blocked", 403, 1108, false, Guard, Semantic,
        "The operator of this server has blocked this user[ ({details.user})]; retrying will not help: ask the company's administrator to unblock the user.",
        "El operador de este servidor ha bloqueado a este usuario[ ({details.user})]; reintentar no servirá: pida al administrador de la empresa que lo desbloquee.",
        "the operator blocked the identity provider's user the token names"),
    /// Wrong kind of credential for this surface.
    InvalidTokenType => (-32003, "invalid_token_type", 403, 1103, false, Guard, Semantic,
        "This kind of credential cannot be used here[ ({details.reason})].",
        "Este tipo de credencial no se puede usar aquí[ ({details.reason})].",
        "wrong kind of credential for this surface"),
    /// The tool is not in the company's plan.
    PlanUpgradeRequired => (-32004, "plan_upgrade_required", 403, 1104, false, Guard, Ok,
        "The tool {details.tool} is not included in the company's plan {details.current_plan:q}[; the plan {required_plan:q} includes it, and the account owner can upgrade to it]; call another tool meanwhile.",
        "La herramienta {details.tool} no está incluida en el plan {details.current_plan:q} de la empresa[; el plan {required_plan:q} la incluye y el titular de la cuenta puede cambiar a él]; mientras tanto, use otra herramienta.",
        "the tool is not in the company's plan; `required_plan`"),
    /// A plan allowance (not a rate) is used up.
    PlanLimitExceeded => (-32004, "plan_limit_exceeded", 403, 1107, false, Guard, Ok,
        "The company's plan {details.current_plan:q} allows {limit} {details.allowance}, and {details.active} are in use[; the plan {required_plan:q} allows more].",
        "El plan {details.current_plan:q} de la empresa permite {limit} {details.allowance}, y hay {details.active} en uso[; el plan {required_plan:q} permite más].",
        "a plan allowance (not a rate) is used up"),
    /// The credential lacks the scope the tool needs.
    InsufficientScope => (-32005, "insufficient_scope", 403, 1105, false, Guard, Semantic,
        "This tool needs the scope {required_scope:q}, and the credential has {provided_scopes}; ask the operator for a credential with {required_scope:q}.",
        "Esta herramienta necesita el permiso {required_scope:q}, y la credencial tiene {provided_scopes}; pida al operador una credencial con {required_scope:q}.",
        "`required_scope`, `provided_scopes`"),
    /// A rate bucket is over its limit.
    RateLimited => (-32006, "rate_limited", 429, 3001, true, Guard, Semantic,
        "Too many calls: the {bucket:q} limit of {limit} is used up; wait {retry_after:seconds} before calling again.",
        "Demasiadas llamadas: se agotó el límite {bucket:q} de {limit}; espere {retry_after:seconds} antes de volver a llamar.",
        "any bucket over its limit; `retry_after`, `bucket`, `limit`, `reset`"),
    /// The tool cannot be undone and no idempotency key was given.
    IdempotencyKeyRequired => (-32007, "idempotency_key_required", 400, 2002, false, Guard, Ok,
        "{details.tool} cannot be undone, so it needs an idempotency key: pass `{param}` with a new value for this operation (for example a UUID), and send the same value again if you retry it.",
        "{details.tool} no se puede deshacer, así que necesita una clave de idempotencia: envíe `{param}` con un valor nuevo para esta operación (por ejemplo un UUID) y repita el mismo valor si la reintenta.",
        "the tool cannot be undone and no key was given"),
    /// The idempotency key is empty, too long or not printable ASCII.
    IdempotencyKeyInvalid => (-32007, "idempotency_key_invalid", 400, 2003, false, Guard, Ok,
        "The idempotency key[ from {details.source}] is not valid[ ({details.reason})]: it must be 1 to 255 printable ASCII characters, and where it is sent in several places (`idempotency_key`, `_meta`, the Idempotency-Key header) the same in all.",
        "La clave de idempotencia[ de {details.source}] no es válida[ ({details.reason})]: debe tener de 1 a 255 caracteres ASCII imprimibles y, si se envía en varios sitios (`idempotency_key`, `_meta`, la cabecera Idempotency-Key), ser la misma en todos.",
        "key empty, too long (> 255) or not printable ASCII"),
    /// The same key was used with a different tool or arguments.
    IdempotencyKeyReused => (-32007, "idempotency_key_reused", 409, 3201, false, Guard, Ok,
        "This `{param}` was already used for another call[ (first with {details.tool})]: if you are retrying that same operation, send exactly its arguments again; for a new operation, pick a new key.",
        "Este `{param}` ya se usó en otra llamada[ (primero con {details.tool})]: si reintenta esa misma operación, envíe exactamente sus argumentos; para una operación nueva, elija una clave nueva.",
        "same key, different tool or arguments"),
    /// The first call with this key is still running.
    IdempotencyKeyInUse => (-32007, "idempotency_key_in_use", 409, 3202, true, Guard, Ok,
        "A call with this idempotency key is still running; wait {retry_after:seconds} and retry with the same key and arguments to get its result.",
        "Una llamada con esta clave de idempotencia sigue en curso; espere {retry_after:seconds} y reintente con la misma clave y argumentos para obtener su resultado.",
        "the first call with this key is still running"),
    /// A fiscal guardrail rejects the arguments.
    GuardrailViolation => (-32008, "mcp_guardrail_violation", 422, 3301, false, Guard, Ok,
        "The fiscal rule {rule_id} forbids this call; read its guide at {guardrail_uri} and change the arguments.",
        "La regla fiscal {rule_id} impide esta llamada; lea su guía en {guardrail_uri} y cambie los argumentos.",
        "a fiscal guardrail; `rule_id`, `guardrail_uri`, `subcode`"),
    /// A rule of the operator's policy (`[[policy.rules]]`, effect `deny`) refuses the call.
    PolicyDenied => (-32009, "policy_denied", 403, 1109, false, Guard, Ok,
        "The operator's policy rule {rule_id:q} does not allow this call[: {details.reason}]; do not retry it as it is: change what the rule objects to, or tell your user that it needs the operator.",
        "La regla {rule_id:q} de la política del operador no permite esta llamada[: {details.reason}]; no la reintente tal cual: cambie lo que la regla objeta o diga a su usuario que necesita al operador.",
        "a rule of the operator's policy (`[[policy.rules]]`, `effect = \"deny\"`) covers the call; `rule_id` is the rule's name, `details.reason` its reason"),
    /// A `require_approval` policy rule holds the call until a person approves it.
    ApprovalRequired => (-32009, "approval_required", 403, 1110, true, Guard, Ok,
        "The operator's policy rule {rule_id:q} needs a person to approve this call before it runs, and nothing was done yet: ask your user to approve it at {approval_url} before {expires_at}, then retry exactly the same call, with the same arguments and the same idempotency key[ {details.idempotency_key:q}]; until it is decided a retry gets this same answer.",
        "La regla {rule_id:q} de la política del operador exige que una persona apruebe esta llamada antes de ejecutarla, y aún no se hizo nada: pida a su usuario que la apruebe en {approval_url} antes de {expires_at} y después repita exactamente la misma llamada, con los mismos argumentos y la misma clave de idempotencia[ {details.idempotency_key:q}]; hasta que se decida, un reintento recibe esta misma respuesta.",
        "a `require_approval` policy rule covers the call: it is held, not run; `approval_id`, `approval_url` (its page in the console), `expires_at`, `retry_after`, `rule_id`"),
    /// A person denied the held call.
    ApprovalDenied => (-32009, "approval_denied", 403, 1111, false, Guard, Ok,
        "A person denied this call (approval {approval_id}, policy rule {rule_id:q}); do not retry it: tell your user it was denied.",
        "Una persona denegó esta llamada (aprobación {approval_id}, regla {rule_id:q}); no la reintente: diga a su usuario que se denegó.",
        "the approval of the held call was denied; final for these arguments and this idempotency key"),
    /// Nobody decided on the held call in time.
    ApprovalExpired => (-32009, "approval_expired", 403, 1112, false, Guard, Ok,
        "Nobody approved this call (approval {approval_id}, policy rule {rule_id:q}) before it expired at {expires_at}; to ask again, make the call with a new idempotency key and have your user approve the new request.",
        "Nadie aprobó esta llamada (aprobación {approval_id}, regla {rule_id:q}) antes de que caducara, el {expires_at}; para pedirla de nuevo, haga la llamada con una clave de idempotencia nueva y pida a su usuario que apruebe la nueva solicitud.",
        "the held call was not decided before its expiry (`policy.approval_ttl_minutes`); final for this idempotency key"),

    // ---- Tool execution errors (isError results) -------------------------------------
    /// Arguments fail the input schema.
    ValidationError => (-32602, "validation_error", 400, 2001, false, Tool, Ok,
        "The arguments do not match the tool's input schema: {details.errors:problems}.",
        "Los argumentos no cumplen el esquema de entrada de la herramienta: {details.errors:problems}.",
        "arguments fail the input schema; `param` names the first field, `details.errors` lists each failing argument"),
    /// A required argument is absent.
    MissingRequiredField => (-32602, "missing_required_field", 400, 2002, false, Tool, Ok,
        "Fix these arguments and call again: {details.errors:problems}.",
        "Corrija estos argumentos y vuelva a llamar: {details.errors:problems}.",
        "a required argument is absent; `param`, `details.errors`"),
    /// A date, tax id, amount or id is malformed.
    InvalidFormat => (-32602, "invalid_format", 400, 2003, false, Tool, Ok,
        "Fix these arguments and call again: {details.errors:problems}.",
        "Corrija estos argumentos y vuelva a llamar: {details.errors:problems}.",
        "a date, tax id, amount or id is malformed; `param`, `details.errors`"),
    /// The tool or its backend exceeded its time limit.
    Timeout => (-32603, "timeout", 504, 3002, true, Tool, Ok,
        "The operation took too long and was stopped[ while waiting for the client's answer to {details.waiting_for}][: the {details.backend} system did not answer within {details.timeout_ms} ms]; retry with backoff.",
        "La operación tardó demasiado y se detuvo[ mientras esperaba la respuesta del cliente a {details.waiting_for}][: el sistema {details.backend} no respondió en {details.timeout_ms} ms]; reintente con espera.",
        "the tool or its backend exceeded its time limit"),
    /// The backend answered with an error (not worth retrying as it is).
    AdapterError => (-32603, "adapter_error", 502, 4001, false, Tool, Ok,
        "The business backend[ {details.backend}] answered with an error[ ({details.original_error})][: {details.message}]; the call did not complete.",
        "El sistema de negocio[ {details.backend}] respondió con un error[ ({details.original_error})][: {details.message}]; la llamada no se completó.",
        "the backend answered with an error; its own id in `details.original_error`"),
    /// An upstream MCP server answered the forwarded call with a JSON-RPC error.
    UpstreamRpcError => (-32603, "adapter_error", 502, 4001, false, Tool, Ok,
        "The business backend {details.backend} answered with error {details.original_error.code}[: {details.message}]; the call did not complete.",
        "El sistema de negocio {details.backend} respondió con el error {details.original_error.code}[: {details.message}]; la llamada no se completó.",
        "an upstream MCP server answered with a JSON-RPC error; its code and message in `details.original_error`"),
    /// The backend answered with a temporary error (HTTP 502, 503, 504).
    AdapterErrorRetryable => (-32603, "adapter_error", 502, 4001, true, Tool, Ok,
        "The business backend[ {details.backend}] answered with a temporary error[ ({details.original_error})]; the call did not complete, retry with backoff.",
        "El sistema de negocio[ {details.backend}] respondió con un error temporal[ ({details.original_error})]; la llamada no se completó, reintente con espera.",
        "the backend answered with a temporary error (HTTP 502, 503, 504); retry with backoff"),
    /// The backend refused tollgate's own credential for it (HTTP 401 or 403).
    BackendCredentialRefused => (-32603, "adapter_error", 502, 4001, false, Tool, Ok,
        "The {details.backend} system refused the gateway's own credential for it (HTTP {details.status}); your credential is fine, this is for the operator to fix, so do not retry: tell the user the {details.backend} connection needs attention.",
        "El sistema {details.backend} rechazó la credencial propia de la pasarela (HTTP {details.status}); su credencial es correcta, debe arreglarlo el operador, así que no reintente: diga al usuario que la conexión con {details.backend} necesita atención.",
        "the backend refused tollgate's own credential (401/403): an operator problem, not the caller's"),
    /// The tool's backend cannot be reached.
    ToolBackendUnavailable => (-32603, "backend_unavailable", 503, 4002, true, Tool, Ok,
        "The business backend[ {details.backend}] cannot be reached right now[ ({details.reason})]; retry with backoff.",
        "No se puede contactar con el sistema de negocio[ {details.backend}] ahora[ ({details.reason})]; reintente con espera.",
        "the backend cannot be reached"),
    /// The gate already forwards as many calls to the backend as it lets through at once,
    /// and this one could not wait for a slot (its queue is full, or none freed in time).
    BackendBusy => (-32603, "backend_unavailable", 503, 4002, true, Tool, Ok,
        "The {details.backend} system already has as many calls in progress as the gateway lets through at once ({details.max_in_flight}) and no place freed up for this one ({details.reason}); it did not reach the system, so nothing changed: retry it in a few seconds.",
        "El sistema {details.backend} ya tiene en curso tantas llamadas como la pasarela deja pasar a la vez ({details.max_in_flight}) y no quedó sitio libre para esta ({details.reason}); no llegó al sistema, así que nada cambió: reinténtela en unos segundos.",
        "too many calls to the backend at once: its queue is full (`details.reason: queue_full`) or no slot freed within `queue_timeout_ms` (`queue_timeout`); `details.max_in_flight`; never forwarded"),
    /// The backend kept failing, so its circuit is open: calls are not forwarded for a while.
    BackendCircuitOpen => (-32603, "backend_unavailable", 503, 4002, true, Tool, Ok,
        "The {details.backend} system has been failing, so the gateway is not sending it calls for now; this call did not reach it, so nothing changed. Wait {retry_after:seconds} before calling it again, and meanwhile tell the user that {details.backend} is unavailable or carry on with other tools.",
        "El sistema {details.backend} está fallando, así que la pasarela no le envía llamadas por ahora; esta llamada no le llegó, así que nada cambió. Espere {retry_after:seconds} antes de volver a llamarlo y, mientras tanto, diga al usuario que {details.backend} no está disponible o siga con otras herramientas.",
        "the backend's circuit is open after `breaker_failures` consecutive failures (`details.reason: circuit_open`); never forwarded; `retry_after` is the rest of the cooldown"),
    /// The backend does not support this tool.
    NotImplemented => (-32603, "not_implemented", 501, 5001, false, Tool, Ok,
        "The business backend[ {details.backend}] does not support this operation[ (HTTP {details.status})]; use another tool.",
        "El sistema de negocio[ {details.backend}] no admite esta operación[ (HTTP {details.status})]; use otra herramienta.",
        "the backend does not support this tool"),
    /// The backend found nothing at what the arguments name (HTTP 404).
    BackendNotFound => (-32603, "not_found", 404, 3101, false, Tool, Ok,
        "The {details.backend} system found nothing for these arguments[: {details.message}]; check the ids you passed, for example by listing or searching first.",
        "El sistema {details.backend} no encontró nada para estos argumentos[: {details.message}]; compruebe los identificadores, por ejemplo listando o buscando antes.",
        "the backend has nothing at what the arguments name (HTTP 404); `details.original_error`"),
    /// The call conflicts with the backend's current state (HTTP 409).
    BackendConflict => (-32603, "conflict", 409, 3102, false, Tool, Ok,
        "The {details.backend} system refused the call because it conflicts with what it already holds[: {details.message}]; read the current state before trying again.",
        "El sistema {details.backend} rechazó la llamada porque choca con lo que ya contiene[: {details.message}]; consulte el estado actual antes de volver a intentarlo.",
        "the call conflicts with the backend's state (HTTP 409); `details.original_error`"),
    /// The backend rejected the arguments by one of its own rules (HTTP 400, 422).
    BackendRejected => (-32603, "business_rule_violation", 422, 3103, false, Tool, Ok,
        "The {details.backend} system rejected the call[: {details.message}]; change the arguments and call again.",
        "El sistema {details.backend} rechazó la llamada[: {details.message}]; cambie los argumentos y vuelva a llamar.",
        "the backend rejected the arguments by a rule of its own (HTTP 400, 422); its message as the hint, its id in `details.original_error`"),
    /// The backend limits its callers and this call was over its limit (HTTP 429).
    BackendRateLimited => (-32603, "rate_limited", 429, 3001, true, Tool, Ok,
        "The {details.backend} system is limiting calls right now; wait[ {retry_after:seconds}] before calling it again.",
        "El sistema {details.backend} está limitando las llamadas; espere[ {retry_after:seconds}] antes de volver a llamarlo.",
        "the backend's own rate limit (HTTP 429); `retry_after` from its `Retry-After`, `details.backend`"),
    /// No client has the given id.
    ClientNotFound => (-32602, "client_not_found", 404, 3101, false, Tool, Ok,
        "No client has the id {details.id:q} given in `{param}`; find the right one with search_clients.",
        "Ningún cliente tiene el identificador {details.id:q} indicado en `{param}`; busque el correcto con search_clients.",
        "a client id that does not exist; `param`"),
    /// No invoice has the given id.
    InvoiceNotFound => (-32602, "invoice_not_found", 404, 3101, false, Tool, Ok,
        "No invoice has the id {details.id:q} given in `{param}`; find the right one with search_invoices.",
        "Ninguna factura tiene el identificador {details.id:q} indicado en `{param}`; busque la correcta con search_invoices.",
        "an invoice id that does not exist; `param`"),
    /// Another client already has this tax id.
    TaxIdAlreadyExists => (-32602, "tax_id_already_exists", 409, 3102, false, Tool, Ok,
        "A client with this tax id already exists: {details.existing_resource_id}; use that client (get_client, update_client) instead of creating another.",
        "Ya existe un cliente con este NIF: {details.existing_resource_id}; use ese cliente (get_client, update_client) en lugar de crear otro.",
        "a client with this tax id exists; `details.existing_resource_id`"),
    /// Only drafts can change.
    InvoiceCannotBeModified => (-32602, "invoice_cannot_be_modified", 422, 3103, false, Tool, Ok,
        "Invoice[ {details.number}] is {details.status}, and only a draft can be modified; to correct an issued invoice, void it with void_invoice and create a new one.",
        "La factura[ {details.number}] está en estado {details.status} y solo un borrador se puede modificar; para corregir una factura emitida, anúlela con void_invoice y cree una nueva.",
        "the invoice is not a draft; `param: \"status\"`"),
    /// A payment larger than what is still owed.
    PaymentExceedsBalance => (-32602, "payment_exceeds_balance", 422, 3104, false, Tool, Ok,
        "The payment of {details.amount_cents} cents is larger than the invoice's outstanding balance of {details.balance_cents} cents; record at most {details.balance_cents} cents.",
        "El pago de {details.amount_cents} céntimos supera el saldo pendiente de la factura, {details.balance_cents} céntimos; registre como mucho {details.balance_cents} céntimos.",
        "amount above the balance; `details.balance_cents`"),
    /// A client with invoices cannot be deleted.
    ClientHasInvoices => (-32602, "client_has_invoices", 422, 3105, false, Tool, Ok,
        "This client has {details.invoice_count} invoices and cannot be deleted; invoices are part of the legal record.",
        "Este cliente tiene {details.invoice_count} facturas y no se puede eliminar; las facturas forman parte del registro legal.",
        "deleting a client with invoices; `details.invoice_count`"),
    /// No address to send an invoice to.
    RecipientHasNoEmail => (-32602, "recipient_has_no_email", 422, 3106, false, Tool, Ok,
        "The client {details.client_id} has no e-mail address; add one with update_client or pass `to`.",
        "El cliente {details.client_id} no tiene correo electrónico; añádalo con update_client o indique `to`.",
        "sending to a client without e-mail and no `to`"),
    /// The invoice is still a draft.
    InvoiceNotIssued => (-32602, "invoice_not_issued", 422, 3107, false, Tool, Ok,
        "The invoice[ {details.invoice_id}] is still a draft; issue it first with issue_invoice.",
        "La factura[ {details.invoice_id}] sigue en borrador; emítala antes con issue_invoice.",
        "paying, sending or voiding a draft"),
    /// The invoice was voided.
    InvoiceVoid => (-32602, "invoice_void", 422, 3108, false, Tool, Ok,
        "The invoice[ {details.invoice_id}] was voided; [use its rectifying invoice {details.rectified_by_id} or ]create a new one.",
        "La factura[ {details.invoice_id}] está anulada; [use su factura rectificativa {details.rectified_by_id} o ]cree una nueva.",
        "paying or sending a voided invoice"),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_exist_in_both_locales_and_differ() {
        for kind in ErrorKind::ALL {
            let s = kind.spec();
            assert!(!s.hint_en.is_empty() && !s.hint_es.is_empty(), "{}", s.code);
            assert_ne!(s.hint_en, s.hint_es, "{} has no Spanish hint", s.code);
        }
    }

    #[test]
    fn codes_and_error_codes_match_the_contract() {
        let expect = [
            (ErrorKind::ParseError, -32700, 400, 1001),
            (ErrorKind::InvalidRequest, -32600, 400, 1002),
            (ErrorKind::MethodNotFound, -32601, 404, 1003),
            (ErrorKind::UnknownTool, -32602, 404, 1005),
            (ErrorKind::ToolRetired, -32602, 410, 1006),
            (ErrorKind::ToolUnderReview, -32602, 423, 1021),
            (ErrorKind::PromptUnderReview, -32602, 423, 1022),
            (
                ErrorKind::UnsupportedProtocolVersionModern,
                -32022,
                400,
                1008,
            ),
            (ErrorKind::BackendUnavailable, -32603, 503, 4002),
            (ErrorKind::PlanLimitExceeded, -32004, 403, 1107),
            (ErrorKind::IdempotencyKeyInUse, -32007, 409, 3202),
            (ErrorKind::GuardrailViolation, -32008, 422, 3301),
            (ErrorKind::PolicyDenied, -32009, 403, 1109),
            (ErrorKind::ApprovalRequired, -32009, 403, 1110),
            (ErrorKind::ApprovalDenied, -32009, 403, 1111),
            (ErrorKind::ApprovalExpired, -32009, 403, 1112),
        ];
        for (kind, rpc, http, ec) in expect {
            let s = kind.spec();
            assert_eq!(
                (s.rpc_code, s.http_status, s.error_code),
                (rpc, http, ec),
                "{}",
                s.code
            );
        }
    }
}
