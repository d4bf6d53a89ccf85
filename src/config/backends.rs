//! `[[backends]]`: the company's own systems put behind the gate — REST APIs described by
//! an OpenAPI document (`kind = "openapi"`) and existing MCP servers (`kind = "mcp"`, over
//! stdio or Streamable HTTP) — with the operator's per-tool overrides.
//!
//! Secrets never sit in the configuration text: a backend credential or a secret header
//! names a file that holds it ([`read_secret`]; [`secret_file_warning`] tells when every
//! user of the machine can read one). Relative paths (`spec`, secret files, `cwd`) are
//! relative to the directory of the configuration file. An OpenAPI document is a file or a
//! URL ([`SpecSource`]); plain `http://` is accepted only to this machine ([`SpecUrl`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// A backend's deadline per call unless configured (`timeout_ms`).
pub const DEFAULT_BACKEND_TIMEOUT_MS: u64 = 30_000;
/// The largest response body an OpenAPI backend may send unless configured.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;
/// The most tools of an upstream MCP server's list offered unless configured (`max_tools`).
pub const DEFAULT_MAX_TOOLS: usize = 256;
/// The largest input or output schema of an upstream MCP tool, serialized, unless
/// configured (`max_schema_bytes`).
pub const DEFAULT_MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Where the backend's own error id is looked for in a JSON error body, first match wins.
pub const DEFAULT_ERROR_ID_POINTERS: &[&str] = &[
    "/code",
    "/error/code",
    "/error_code",
    "/type",
    "/error/type",
    "/detail/0/type",
];
/// Where the backend's own error message is looked for in a JSON error body.
pub const DEFAULT_ERROR_MESSAGE_POINTERS: &[&str] = &[
    "/message",
    "/error/message",
    "/detail/0/msg",
    "/detail",
    "/title",
    "/error",
];

/// One configured backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Its name: the prefix of its tools' names (`crm` → `crm_create_order`) and of their
    /// default scopes (`crm:write`). Lower-case letters, digits and `_`, starting with a
    /// letter, at most 32 characters.
    pub name: String,
    /// How it is reached.
    pub kind: BackendKind,
    /// The deadline of one call (`timeout_ms`): past it the call is `timeout`.
    pub timeout: Duration,
    /// The operator's overrides, by the tool's full name (`crm_create_order`).
    pub tools: BTreeMap<String, ToolOverride>,
}

/// How a backend is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendKind {
    /// A REST API described by an OpenAPI document.
    OpenApi(OpenApiBackend),
    /// An MCP server.
    Mcp(McpBackend),
}

impl BackendKind {
    /// `"openapi"` or `"mcp"`, as written in the configuration.
    pub fn as_str(&self) -> &'static str {
        match self {
            BackendKind::OpenApi(_) => "openapi",
            BackendKind::Mcp(_) => "mcp",
        }
    }
}

/// `kind = "openapi"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenApiBackend {
    /// The OpenAPI 3.0 or 3.1 document, JSON or YAML: a file or a URL.
    pub spec: SpecSource,
    /// Where requests go (`http(s)://host[:port][/base]`); by default the document's first
    /// server URL.
    pub base_url: Option<String>,
    /// The backend's own credential for tollgate.
    pub auth: Option<BackendAuth>,
    /// A larger response body is refused (`adapter_error`, reason `response_too_large`).
    pub max_response_bytes: u64,
    /// JSON pointers to the backend's own error id in an error body, first match wins.
    pub error_id_pointers: Vec<String>,
    /// JSON pointers to the backend's own error message in an error body.
    pub error_message_pointers: Vec<String>,
}

/// Where an OpenAPI backend's document comes from (`spec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// A file, read when the backend opens (a relative path is resolved against the
    /// configuration file's directory).
    File(PathBuf),
    /// A URL, fetched when the backend opens.
    Url(SpecUrl),
}

impl SpecSource {
    /// Reads a `spec` value: a URL when it starts with a scheme (`https://…`), otherwise a
    /// path, resolved against `base` when relative.
    pub fn parse(text: &str, base: Option<&Path>) -> Result<SpecSource, String> {
        if text.trim().is_empty() {
            return Err("`spec` must not be empty".to_owned());
        }
        match url_scheme(text) {
            Some(_) => SpecUrl::parse(text).map(SpecSource::Url),
            None => Ok(SpecSource::File(resolve(base, PathBuf::from(text)))),
        }
    }

    /// The path or the URL, as written back into a configuration.
    pub fn to_config_text(&self) -> String {
        match self {
            SpecSource::File(path) => path.display().to_string(),
            SpecSource::Url(url) => url.as_str().to_owned(),
        }
    }
}

/// The scheme of `text` when it starts with one followed by `://` (RFC 3986: a letter,
/// then letters, digits, `+`, `-` or `.`).
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// The URL of an OpenAPI document: `https://`, or `http://` to a loopback address
/// (`127.0.0.0/8`, `::1`, `localhost`). The document decides which operations exist and
/// where their arguments and the backend's credential go, so it must not be open to
/// change on the way; it carries no user name or password (secrets are never written in
/// the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecUrl(String);

/// What a plain `http://` document URL to another machine is refused with.
const PLAIN_HTTP_REFUSED: &str = "plain http:// is accepted only to this machine (127.0.0.1, \
     ::1, localhost), because whoever can change the document on its way decides which \
     operations tollgate offers and where their arguments and the backend's credential go; \
     serve the document over https://, or save it to a file and name the file in `spec`";

impl SpecUrl {
    /// Checks and normalizes a document URL (see [`SpecUrl`]).
    pub fn parse(text: &str) -> Result<SpecUrl, String> {
        let scheme = url_scheme(text).unwrap_or_default().to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "`spec` {text:?}: {scheme}:// is not supported; `spec` is a file path (written \
                 as a path, not a file:// URL), an https:// URL, or an http:// URL to this machine"
            ));
        }
        let mut url = reqwest::Url::parse(text)
            .map_err(|e| format!("`spec` {text:?} is not a valid URL: {e}"))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                "`spec`: the URL must not carry a user name or password (secrets are never \
                 written in the configuration)"
                    .to_owned(),
            );
        }
        url.set_fragment(None);
        if scheme == "http" && !url.host_str().is_some_and(is_loopback_host) {
            return Err(format!("`spec` {url}: {PLAIN_HTTP_REFUSED}"));
        }
        Ok(SpecUrl(url.to_string()))
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SpecUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a URL's host (as the URL writes it: an IPv6 address in brackets) is this
/// machine.
fn is_loopback_host(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The credential tollgate presents to an OpenAPI backend, read from a file at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendAuth {
    /// `auth = { header = "X-Api-Key", value_file = "…" }`: the file's content (trailing
    /// newline removed) as the value of `header`.
    Header {
        /// The header name.
        name: String,
        /// The file holding its value.
        value_file: PathBuf,
    },
    /// `auth = { bearer_file = "…" }`: `Authorization: Bearer <file content>`.
    Bearer {
        /// The file holding the token.
        token_file: PathBuf,
    },
    /// `auth = { basic_file = "…" }`: the file holds `user:password`.
    Basic {
        /// The file holding `user:password`.
        file: PathBuf,
    },
}

/// `kind = "mcp"`: an upstream MCP server, and how much of its list of tools is offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpBackend {
    /// How it is reached.
    pub transport: McpTransport,
    /// Tools past this many in its list are left out (`max_tools`).
    pub max_tools: usize,
    /// A tool whose input or output schema serializes to more bytes than this is left out
    /// (`max_schema_bytes`).
    pub max_schema_bytes: usize,
}

/// How the upstream MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// `command` (with `args`, `env`, `cwd`): a stdio server tollgate starts and restarts.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment (the rest of tollgate's is not passed on,
        /// except `PATH`, `HOME`, `LANG` and `TZ`).
        env: BTreeMap<String, String>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// `url` (with `headers`): a Streamable HTTP server.
    Http {
        /// The MCP endpoint.
        url: String,
        /// Headers sent with every request; a secret one names a file.
        headers: BTreeMap<String, HeaderValue>,
    },
}

/// A header value: plain text, or `{ file = "…" }` for a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    /// The value itself (not a secret).
    Plain(String),
    /// The file holding the value.
    File {
        /// The file.
        file: PathBuf,
    },
}

/// How an override sets a tool's idempotency policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyPolicy {
    /// A call without a key is refused.
    Required,
    /// A key is honoured when given.
    Optional,
    /// Keys are ignored (a tool that changes nothing).
    None,
}

/// The operator's override of one backend tool; every field left out keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// The rate category: `read`, `write`, `destructive`, `send` or `generate`.
    pub category: Option<String>,
    /// The scope a credential needs (default `<backend>:<category>`).
    pub scope: Option<String>,
    /// The title shown to clients.
    pub title: Option<String>,
    /// The description shown to models.
    pub description: Option<String>,
    /// `false` hides the tool and refuses calls to it as unknown.
    pub enabled: Option<bool>,
    /// Whether an idempotency key is required.
    pub idempotency: Option<IdempotencyPolicy>,
}

/// The categories an override may name.
pub const CATEGORY_WORDS: &[&str] = &["read", "write", "destructive", "send", "generate"];

/// The raw form of one `[[backends]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackend {
    name: Option<String>,
    kind: Option<String>,
    timeout_ms: Option<u64>,
    // openapi
    spec: Option<String>,
    base_url: Option<String>,
    auth: Option<RawAuth>,
    max_response_bytes: Option<u64>,
    error_id_pointers: Option<Vec<String>>,
    error_message_pointers: Option<Vec<String>>,
    // mcp
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    headers: Option<BTreeMap<String, HeaderValue>>,
    max_tools: Option<u64>,
    max_schema_bytes: Option<u64>,
    #[serde(default)]
    tools: BTreeMap<String, ToolOverride>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    header: Option<String>,
    value_file: Option<PathBuf>,
    bearer_file: Option<PathBuf>,
    basic_file: Option<PathBuf>,
}

fn backend_error(index: usize, name: Option<&str>, what: impl std::fmt::Display) -> ConfigError {
    match name {
        Some(name) => ConfigError::new(format!("backends[{index}] ({name}): {what}")),
        None => ConfigError::new(format!("backends[{index}]: {what}")),
    }
}

/// Whether `name` is a valid backend name.
pub fn valid_backend_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_http_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://")) && url.len() > "https://".len()
}

/// Validates the raw entries; relative paths are resolved against `base` (the directory of
/// the configuration file).
pub(super) fn validate_backends(
    raw: Vec<RawBackend>,
    base: Option<&Path>,
) -> Result<Vec<BackendConfig>, ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (index, entry) in raw.into_iter().enumerate() {
        let backend = validate_one(index, entry, base)?;
        if !seen.insert(backend.name.clone()) {
            return Err(backend_error(
                index,
                Some(&backend.name),
                "another backend already has this name",
            ));
        }
        out.push(backend);
    }
    Ok(out)
}

fn resolve(base: Option<&Path>, path: PathBuf) -> PathBuf {
    match base {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
    }
}

fn validate_one(
    index: usize,
    raw: RawBackend,
    base: Option<&Path>,
) -> Result<BackendConfig, ConfigError> {
    let name = raw
        .name
        .clone()
        .ok_or_else(|| backend_error(index, None, "`name` is required"))?;
    let err = |what: &str| backend_error(index, Some(&name), what);
    if !valid_backend_name(&name) {
        return Err(err(
            "`name` must be 1 to 32 lower-case letters, digits or `_`, starting with a letter",
        ));
    }
    let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_BACKEND_TIMEOUT_MS);
    if !(100..=600_000).contains(&timeout_ms) {
        return Err(err("`timeout_ms` must be between 100 and 600000"));
    }
    for (tool, over) in &raw.tools {
        if !tool.starts_with(&format!("{name}_")) {
            return Err(err(&format!(
                "tools.{tool}: an override names the tool's full name, which starts with `{name}_`"
            )));
        }
        if let Some(category) = &over.category
            && !CATEGORY_WORDS.contains(&category.as_str())
        {
            return Err(err(&format!(
                "tools.{tool}.category: {category:?} is not one of {}",
                CATEGORY_WORDS.join(", ")
            )));
        }
        if over.scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(err(&format!("tools.{tool}.scope must not be empty")));
        }
    }
    let kind = match raw.kind.as_deref() {
        Some("openapi") => {
            let stray = [
                ("command", raw.command.is_some()),
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("cwd", raw.cwd.is_some()),
                ("url", raw.url.is_some()),
                ("headers", raw.headers.is_some()),
                ("max_tools", raw.max_tools.is_some()),
                ("max_schema_bytes", raw.max_schema_bytes.is_some()),
            ];
            if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(err(&format!(
                    "`{key}` belongs to kind = \"mcp\"; an openapi backend takes spec, base_url, auth, timeout_ms, max_response_bytes, error_id_pointers, error_message_pointers and tools"
                )));
            }
            let spec = raw
                .spec
                .ok_or_else(|| err("`spec` (the OpenAPI document) is required"))?;
            if let Some(url) = &raw.base_url
                && !is_http_url(url)
            {
                return Err(err("`base_url` must be an http:// or https:// URL"));
            }
            let max_response_bytes = raw.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
            if !(1024..=1024 * 1024 * 1024).contains(&max_response_bytes) {
                return Err(err(
                    "`max_response_bytes` must be between 1024 and 1073741824",
                ));
            }
            let pointers = |given: Option<Vec<String>>, default: &[&str], key: &str| {
                let list = given.unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
                match list.iter().find(|p| !p.is_empty() && !p.starts_with('/')) {
                    Some(bad) => Err(err(&format!(
                        "`{key}`: {bad:?} is not a JSON pointer (it starts with `/`)"
                    ))),
                    None => Ok(list),
                }
            };
            BackendKind::OpenApi(OpenApiBackend {
                spec: SpecSource::parse(&spec, base).map_err(|e| err(&e))?,
                base_url: raw.base_url.map(|u| u.trim_end_matches('/').to_owned()),
                auth: raw
                    .auth
                    .map(|a| validate_auth(a, base))
                    .transpose()
                    .map_err(|e| err(&e))?,
                max_response_bytes,
                error_id_pointers: pointers(
                    raw.error_id_pointers,
                    DEFAULT_ERROR_ID_POINTERS,
                    "error_id_pointers",
                )?,
                error_message_pointers: pointers(
                    raw.error_message_pointers,
                    DEFAULT_ERROR_MESSAGE_POINTERS,
                    "error_message_pointers",
                )?,
            })
        }
        Some("mcp") => {
            let stray = [
                ("spec", raw.spec.is_some()),
                ("base_url", raw.base_url.is_some()),
                ("auth", raw.auth.is_some()),
                ("max_response_bytes", raw.max_response_bytes.is_some()),
                ("error_id_pointers", raw.error_id_pointers.is_some()),
                (
                    "error_message_pointers",
                    raw.error_message_pointers.is_some(),
                ),
            ];
            if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(err(&format!(
                    "`{key}` belongs to kind = \"openapi\"; an mcp backend takes command, args, env, cwd (stdio) or url, headers (Streamable HTTP), timeout_ms, max_tools, max_schema_bytes and tools"
                )));
            }
            let max_tools = raw.max_tools.unwrap_or(DEFAULT_MAX_TOOLS as u64);
            if !(1..=4096).contains(&max_tools) {
                return Err(err("`max_tools` must be between 1 and 4096"));
            }
            let max_schema_bytes = raw
                .max_schema_bytes
                .unwrap_or(DEFAULT_MAX_SCHEMA_BYTES as u64);
            if !(1024..=1024 * 1024).contains(&max_schema_bytes) {
                return Err(err("`max_schema_bytes` must be between 1024 and 1048576"));
            }
            let transport = match (raw.command, raw.url) {
                (Some(command), None) => {
                    if raw.headers.is_some() {
                        return Err(err("`headers` go with `url`, not with `command`"));
                    }
                    if command.trim().is_empty() {
                        return Err(err("`command` must not be empty"));
                    }
                    McpTransport::Stdio {
                        command,
                        args: raw.args.unwrap_or_default(),
                        env: raw.env.unwrap_or_default(),
                        cwd: raw.cwd.map(|c| resolve(base, c)),
                    }
                }
                (None, Some(url)) => {
                    if raw.args.is_some() || raw.env.is_some() || raw.cwd.is_some() {
                        return Err(err(
                            "`args`, `env` and `cwd` go with `command`, not with `url`",
                        ));
                    }
                    if !is_http_url(&url) {
                        return Err(err("`url` must be an http:// or https:// URL"));
                    }
                    let headers = raw
                        .headers
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| match v {
                            HeaderValue::File { file } => (
                                k,
                                HeaderValue::File {
                                    file: resolve(base, file),
                                },
                            ),
                            plain => (k, plain),
                        })
                        .collect();
                    McpTransport::Http { url, headers }
                }
                (Some(_), Some(_)) => {
                    return Err(err(
                        "give either `command` (stdio) or `url` (Streamable HTTP), not both",
                    ));
                }
                (None, None) => {
                    return Err(err(
                        "`command` (stdio) or `url` (Streamable HTTP) is required",
                    ));
                }
            };
            BackendKind::Mcp(McpBackend {
                transport,
                // Both ranges were checked above.
                max_tools: max_tools as usize,
                max_schema_bytes: max_schema_bytes as usize,
            })
        }
        Some(other) => {
            return Err(err(&format!("`kind` {other:?} is not one of openapi, mcp")));
        }
        None => return Err(err("`kind` is required: openapi or mcp")),
    };
    Ok(BackendConfig {
        name,
        kind,
        timeout: Duration::from_millis(timeout_ms),
        tools: raw.tools,
    })
}

fn validate_auth(raw: RawAuth, base: Option<&Path>) -> Result<BackendAuth, String> {
    match (raw.header, raw.value_file, raw.bearer_file, raw.basic_file) {
        (Some(name), Some(file), None, None) => {
            if name.trim().is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(format!("auth.header {name:?} is not a header name"));
            }
            Ok(BackendAuth::Header {
                name,
                value_file: resolve(base, file),
            })
        }
        (None, None, Some(file), None) => Ok(BackendAuth::Bearer {
            token_file: resolve(base, file),
        }),
        (None, None, None, Some(file)) => Ok(BackendAuth::Basic {
            file: resolve(base, file),
        }),
        _ => Err(
            "`auth` is one of { header, value_file }, { bearer_file } or { basic_file }; \
                  the secret itself is read from the file, never written here"
                .to_owned(),
        ),
    }
}

impl BackendConfig {
    /// The raw form (for `check-config`'s effective configuration); secrets are paths.
    pub(super) fn to_raw(&self) -> RawBackend {
        let mut raw = RawBackend {
            name: Some(self.name.clone()),
            kind: Some(self.kind.as_str().to_owned()),
            timeout_ms: Some(self.timeout.as_millis() as u64),
            tools: self.tools.clone(),
            ..RawBackend::default()
        };
        match &self.kind {
            BackendKind::OpenApi(o) => {
                raw.spec = Some(o.spec.to_config_text());
                raw.base_url = o.base_url.clone();
                raw.auth = o.auth.as_ref().map(|a| match a {
                    BackendAuth::Header { name, value_file } => RawAuth {
                        header: Some(name.clone()),
                        value_file: Some(value_file.clone()),
                        bearer_file: None,
                        basic_file: None,
                    },
                    BackendAuth::Bearer { token_file } => RawAuth {
                        header: None,
                        value_file: None,
                        bearer_file: Some(token_file.clone()),
                        basic_file: None,
                    },
                    BackendAuth::Basic { file } => RawAuth {
                        header: None,
                        value_file: None,
                        bearer_file: None,
                        basic_file: Some(file.clone()),
                    },
                });
                raw.max_response_bytes = Some(o.max_response_bytes);
                raw.error_id_pointers = Some(o.error_id_pointers.clone());
                raw.error_message_pointers = Some(o.error_message_pointers.clone());
            }
            BackendKind::Mcp(mcp) => {
                raw.max_tools = Some(mcp.max_tools as u64);
                raw.max_schema_bytes = Some(mcp.max_schema_bytes as u64);
                match &mcp.transport {
                    McpTransport::Stdio {
                        command,
                        args,
                        env,
                        cwd,
                    } => {
                        raw.command = Some(command.clone());
                        raw.args = Some(args.clone());
                        raw.env = Some(env.clone());
                        raw.cwd = cwd.clone();
                    }
                    McpTransport::Http { url, headers } => {
                        raw.url = Some(url.clone());
                        raw.headers = Some(headers.clone());
                    }
                }
            }
        }
        raw
    }
}

/// Reads a secret file: its content without the trailing newline. The error names the file
/// but never its content.
pub fn read_secret(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the secret file {}: {e}", path.display()))?;
    let value = text.trim_end_matches(['\r', '\n']).to_owned();
    if value.is_empty() {
        return Err(format!("the secret file {} is empty", path.display()));
    }
    Ok(value)
}

/// A warning when every user of the machine can read the secret file at `path` (its
/// mode lets others read it): what it is and how to make it private. A file the service's
/// group can read (`0640 root:tollgate`, like the packaged configuration) is normal and
/// gets none; neither does a file that cannot be read at all (that is a problem of its
/// own, told when the backend opens).
pub fn secret_file_warning(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o004 != 0).then(|| {
        let file = path.display();
        format!(
            "the secret file {file} can be read by every user of this machine (mode {mode:04o}); \
             make it private: `chmod 600 {file}` (owned by the user tollgate runs as), or \
             `chown root:tollgate {file}` and `chmod 640 {file}` for the packaged service"
        )
    })
}

impl BackendConfig {
    /// The secret files this backend names: its credential's, its secret headers'.
    pub fn secret_files(&self) -> Vec<&Path> {
        match &self.kind {
            BackendKind::OpenApi(openapi) => match &openapi.auth {
                Some(BackendAuth::Header { value_file, .. }) => vec![value_file.as_path()],
                Some(BackendAuth::Bearer { token_file }) => vec![token_file.as_path()],
                Some(BackendAuth::Basic { file }) => vec![file.as_path()],
                None => Vec::new(),
            },
            BackendKind::Mcp(McpBackend {
                transport: McpTransport::Http { headers, .. },
                ..
            }) => headers
                .values()
                .filter_map(|value| match value {
                    HeaderValue::File { file } => Some(file.as_path()),
                    HeaderValue::Plain(_) => None,
                })
                .collect(),
            BackendKind::Mcp(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<BackendConfig>, ConfigError> {
        #[derive(Deserialize)]
        struct Doc {
            backends: Vec<RawBackend>,
        }
        let doc: Doc = toml::from_str(text).map_err(|e| ConfigError::new(e.to_string()))?;
        validate_backends(doc.backends, Some(Path::new("/etc/tollgate")))
    }

    #[test]
    fn an_openapi_backend_with_overrides_and_a_header_credential() {
        let backends = parse(
            r#"
            [[backends]]
            name = "crm"
            kind = "openapi"
            spec = "crm.yaml"
            base_url = "http://127.0.0.1:9000/api/"
            auth = { header = "X-Api-Key", value_file = "crm.key" }
            [backends.tools.crm_delete_order]
            idempotency = "required"
            category = "destructive"
            "#,
        )
        .expect("valid");
        let crm = &backends[0];
        assert_eq!(
            crm.timeout,
            Duration::from_millis(DEFAULT_BACKEND_TIMEOUT_MS)
        );
        let BackendKind::OpenApi(o) = &crm.kind else {
            panic!("openapi")
        };
        assert_eq!(
            o.spec,
            SpecSource::File(PathBuf::from("/etc/tollgate/crm.yaml"))
        );
        assert_eq!(o.base_url.as_deref(), Some("http://127.0.0.1:9000/api"));
        assert_eq!(
            o.auth,
            Some(BackendAuth::Header {
                name: "X-Api-Key".into(),
                value_file: PathBuf::from("/etc/tollgate/crm.key")
            })
        );
        assert_eq!(
            crm.tools["crm_delete_order"].idempotency,
            Some(IdempotencyPolicy::Required)
        );
    }

    #[test]
    fn mcp_backends_over_stdio_and_http() {
        let backends = parse(
            r#"
            [[backends]]
            name = "files"
            kind = "mcp"
            command = "node"
            args = ["server.js", "stdio"]
            env = { LOG = "1" }

            [[backends]]
            name = "vendor"
            kind = "mcp"
            url = "http://127.0.0.1:9001/mcp"
            headers = { "X-Tenant" = "acme", "Authorization" = { file = "vendor.token" } }
            timeout_ms = 5000
            max_tools = 40
            max_schema_bytes = 4096
            "#,
        )
        .expect("valid");
        assert!(
            matches!(&backends[0].kind, BackendKind::Mcp(McpBackend { transport: McpTransport::Stdio { args, .. }, .. }) if args.len() == 2)
        );
        let BackendKind::Mcp(McpBackend {
            transport: McpTransport::Http { headers, .. },
            max_tools,
            max_schema_bytes,
        }) = &backends[1].kind
        else {
            panic!("http")
        };
        assert_eq!(*max_tools, 40);
        assert_eq!(*max_schema_bytes, 4096);
        let BackendKind::Mcp(files) = &backends[0].kind else {
            panic!("mcp")
        };
        assert_eq!(files.max_tools, DEFAULT_MAX_TOOLS);
        assert_eq!(files.max_schema_bytes, DEFAULT_MAX_SCHEMA_BYTES);
        assert_eq!(headers["X-Tenant"], HeaderValue::Plain("acme".into()));
        assert_eq!(
            headers["Authorization"],
            HeaderValue::File {
                file: PathBuf::from("/etc/tollgate/vendor.token")
            }
        );
    }

    #[test]
    fn mistakes_are_refused_with_what_to_fix() {
        let cases = [
            (
                "name = \"Bad-Name\"\nkind = \"mcp\"\ncommand = \"x\"",
                "`name` must be",
            ),
            (
                "name = \"a\"\nkind = \"soap\"",
                "`kind` \"soap\" is not one of openapi, mcp",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"",
                "`spec` (the OpenAPI document) is required",
            ),
            ("name = \"a\"\nkind = \"mcp\"", "`command` (stdio) or `url`"),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nurl = \"http://h/mcp\"",
                "not both",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nspec = \"s.json\"",
                "`spec` belongs to kind = \"openapi\"",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\nauth = { header = \"X\", value = \"secret\" }",
                "unknown field `value`",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\nauth = { header = \"X\" }",
                "the secret itself is read from the file",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\ntimeout_ms = 5",
                "`timeout_ms` must be",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\n[backends.tools.b_x]\nenabled = false",
                "starts with `a_`",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\n[backends.tools.a_x]\ncategory = \"delete\"",
                "is not one of read, write",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\n[backends.tools.a_x]\ncolour = \"red\"",
                "unknown field `colour`",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nmax_tools = 0",
                "`max_tools` must be between 1 and 4096",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nmax_tools = 5000",
                "`max_tools` must be between 1 and 4096",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\nurl = \"http://h/mcp\"\nmax_schema_bytes = 100",
                "`max_schema_bytes` must be between 1024 and 1048576",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\nmax_tools = 10",
                "`max_tools` belongs to kind = \"mcp\"",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nflavour = 1",
                "unknown field `flavour`",
            ),
        ];
        for (entry, expected) in cases {
            let err = parse(&format!("[[backends]]\n{entry}")).expect_err(entry);
            assert!(
                err.message().contains(expected),
                "{entry}: {}",
                err.message()
            );
        }
        let twice = "[[backends]]\nname = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\n".repeat(2);
        assert!(
            parse(&twice)
                .expect_err("twice")
                .message()
                .contains("already has this name")
        );
    }

    fn spec_of(value: &str) -> Result<SpecSource, String> {
        let entry = format!("[[backends]]\nname = \"erp\"\nkind = \"openapi\"\nspec = {value:?}\n");
        match parse(&entry) {
            Ok(backends) => match &backends[0].kind {
                BackendKind::OpenApi(o) => Ok(o.spec.clone()),
                BackendKind::Mcp(_) => panic!("openapi"),
            },
            Err(e) => Err(e.message().to_owned()),
        }
    }

    #[test]
    fn a_spec_is_a_path_or_a_url() {
        let file = |p: &str| Ok(SpecSource::File(PathBuf::from(p)));
        let url = |u: &str| Ok(SpecSource::Url(SpecUrl(u.to_owned())));
        assert_eq!(spec_of("erp.yaml"), file("/etc/tollgate/erp.yaml"));
        assert_eq!(
            spec_of("/srv/erp/openapi.json"),
            file("/srv/erp/openapi.json")
        );
        assert_eq!(
            spec_of("docs/a:b.yaml"),
            file("/etc/tollgate/docs/a:b.yaml"),
            "a colon without :// is part of a path"
        );
        assert_eq!(
            spec_of("https://erp.example.com/openapi.json"),
            url("https://erp.example.com/openapi.json")
        );
        assert_eq!(
            spec_of("HTTPS://ERP.example.com/api/openapi.json#top"),
            url("https://erp.example.com/api/openapi.json"),
            "the scheme and host are normalized, the fragment dropped"
        );
        for loopback in [
            "http://127.0.0.1:8000/openapi.json",
            "http://127.8.9.10/openapi.json",
            "http://[::1]:8000/openapi.json",
            "http://localhost:8000/openapi.json",
            "http://LocalHost/openapi.json",
        ] {
            assert!(
                matches!(spec_of(loopback), Ok(SpecSource::Url(_))),
                "{loopback}"
            );
        }
    }

    #[test]
    fn a_spec_url_that_breaks_the_rules_is_refused_saying_why() {
        for remote in [
            "http://erp.internal:8080/openapi.json",
            "http://10.0.0.7/openapi.json",
            "http://[::ffff:127.0.0.1]/openapi.json",
            "http://localhost.example.com/openapi.json",
        ] {
            let message = spec_of(remote).expect_err(remote);
            assert!(
                message.starts_with("backends[0] (erp): `spec` http://")
                    && message.contains("plain http:// is accepted only to this machine")
                    && message.contains("serve the document over https://"),
                "{remote}: {message}"
            );
        }
        let cases = [
            ("ftp://erp.internal/openapi.json", "ftp:// is not supported"),
            ("file:///etc/erp.json", "file:// is not supported"),
            ("https://", "is not a valid URL"),
            (
                "https://user:pw@erp.example.com/openapi.json",
                "must not carry a user name or password",
            ),
            ("", "`spec` must not be empty"),
        ];
        for (value, expected) in cases {
            let message = spec_of(value).expect_err(value);
            assert!(message.contains(expected), "{value}: {message}");
            assert!(!message.contains("pw@"), "{message}");
        }
    }

    #[test]
    fn a_secret_file_others_can_read_is_named_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("erp.key");
        std::fs::write(&path, "s3cret\n").expect("write");
        for (mode, warned) in [(0o600, false), (0o640, false), (0o604, true), (0o644, true)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let warning = secret_file_warning(&path);
            assert_eq!(warning.is_some(), warned, "{mode:o}");
            if let Some(warning) = warning {
                assert!(
                    warning.contains(&format!("{} can be read by every user", path.display()))
                        && warning.contains(&format!("(mode {mode:04o})"))
                        && warning.contains("chmod 600")
                        && !warning.contains("s3cret"),
                    "{warning}"
                );
            }
        }
        assert_eq!(secret_file_warning(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_backend_names_its_secret_files() {
        let backends = parse(
            r#"
            [[backends]]
            name = "erp"
            kind = "openapi"
            spec = "erp.yaml"
            auth = { basic_file = "erp.basic" }

            [[backends]]
            name = "vendor"
            kind = "mcp"
            url = "https://vendor.example.com/mcp"
            headers = { "X-Tenant" = "acme", "Authorization" = { file = "vendor.auth" } }
            "#,
        )
        .expect("valid");
        assert_eq!(
            backends[0].secret_files(),
            [Path::new("/etc/tollgate/erp.basic")]
        );
        assert_eq!(
            backends[1].secret_files(),
            [Path::new("/etc/tollgate/vendor.auth")]
        );
    }

    #[test]
    fn a_secret_file_is_read_without_its_newline_and_never_echoed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k");
        std::fs::write(&path, "s3cret\n").expect("write");
        assert_eq!(read_secret(&path).expect("read"), "s3cret");
        std::fs::write(&path, "\n").expect("write");
        let err = read_secret(&path).expect_err("empty");
        assert!(err.contains("is empty") && !err.contains("s3cret"));
    }
}
