//! `[[backends]]`: the company's own systems put behind the gate — REST APIs described by
//! an OpenAPI document (`kind = "openapi"`) and existing MCP servers (`kind = "mcp"`, over
//! stdio or Streamable HTTP) — with the operator's per-tool overrides.
//!
//! Secrets never sit in the configuration text: a backend credential or a secret header
//! names a file that holds it ([`read_secret`]; [`secret_file_warning`] tells when every
//! user of the machine can read one). Relative paths (`spec`, secret files, `cwd`) are
//! relative to the directory of the configuration file. An OpenAPI document is a file or a
//! URL ([`SpecSource`]); plain `http://` is accepted only to this machine ([`SpecUrl`]).
//!
//! Here: the checked form of an entry ([`BackendConfig`]) and the secret files it names;
//! `backend_entries` reads the entries into it, `backend_limits` checks the keys that bound
//! its calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::backend_limits::BackendLimits;

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
    /// How many of its calls are forwarded at once, how many wait and how long, and when
    /// its circuit opens (`max_in_flight`, `queue`, `queue_timeout_ms`,
    /// `breaker_failures`, `breaker_cooldown_ms`).
    pub limits: BackendLimits,
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
    /// Which of its tools' (and prompts') definitions are offered without an operator's
    /// approval (`pinning`).
    pub pinning: Pinning,
    /// Which of what it offers is put behind the gate (`expose`).
    pub expose: Exposed,
    /// The scope a read of its resources or prompts needs (`read_scope`; `None`:
    /// `<backend>:read`).
    pub read_scope: Option<String>,
}

/// Which kinds of an upstream's offer are put behind the gate (`expose = ["tools",
/// "resources", "prompts"]`, all three by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exposed {
    /// Its tools.
    pub tools: bool,
    /// Its resources and resource templates.
    pub resources: bool,
    /// Its prompts.
    pub prompts: bool,
}

impl Exposed {
    /// The words of `expose`, in order.
    pub const WORDS: [&'static str; 3] = ["tools", "resources", "prompts"];

    /// Every kind.
    pub const ALL: Exposed = Exposed {
        tools: true,
        resources: true,
        prompts: true,
    };

    /// The kinds named by `words` (each one of [`Exposed::WORDS`], at least one, none twice).
    pub fn of(words: &[String]) -> Result<Exposed, String> {
        let mut exposed = Exposed {
            tools: false,
            resources: false,
            prompts: false,
        };
        if words.is_empty() {
            return Err("`expose` names nothing: name at least one of \"tools\", \"resources\", \"prompts\" (or remove the backend)".to_owned());
        }
        for word in words {
            let kind = match word.as_str() {
                "tools" => &mut exposed.tools,
                "resources" => &mut exposed.resources,
                "prompts" => &mut exposed.prompts,
                other => {
                    return Err(format!(
                        "`expose`: {other:?} is not one of \"tools\", \"resources\", \"prompts\""
                    ));
                }
            };
            if std::mem::replace(kind, true) {
                return Err(format!("`expose` names {word:?} twice"));
            }
        }
        Ok(exposed)
    }

    /// Its words, in the order of [`Exposed::WORDS`].
    pub fn words(self) -> Vec<String> {
        Exposed::WORDS
            .iter()
            .zip([self.tools, self.resources, self.prompts])
            .filter(|(_, on)| *on)
            .map(|(word, _)| (*word).to_owned())
            .collect()
    }
}

/// Which definitions of an upstream's tools are offered without an operator's approval.
/// Either way, a tool whose definition changes after it was approved is held until an
/// operator approves the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pinning {
    /// A tool seen for the first time is approved as it is (trust on first use).
    #[default]
    FirstUse,
    /// Every new tool waits for an operator too.
    Manual,
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

/// Whether `name` is a valid backend name.
pub fn valid_backend_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `path`, resolved against `base` (the configuration file's directory) when relative.
pub(super) fn resolve(base: Option<&Path>, path: PathBuf) -> PathBuf {
    match base {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
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
