//! Reading `[[backends]]` entries: the raw form of each, tagged by its `kind`, and its
//! check into a [`BackendConfig`].
//!
//! An entry's `kind` decides which keys it may have ([`RawBackend`]: one struct of keys per
//! kind, each refusing the keys it does not know), so a key of the other kind is refused
//! with the keys this kind takes. Each entry is read from its table once its place in the
//! list is known, so that every mistake names it: `backends[1] (crm): …`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::backend_limits::RawLimits;
use super::backends::{
    BackendAuth, BackendConfig, BackendKind, CATEGORY_WORDS, DEFAULT_BACKEND_TIMEOUT_MS,
    DEFAULT_ERROR_ID_POINTERS, DEFAULT_ERROR_MESSAGE_POINTERS, DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_SCHEMA_BYTES, DEFAULT_MAX_TOOLS, HeaderValue, McpBackend, McpTransport,
    OpenApiBackend, SpecSource, ToolOverride, resolve, valid_backend_name,
};
use super::{ConfigError, Exposed, Pinning};

/// The words `kind` may be, in the order the messages list them.
const KINDS: [&str; 2] = ["openapi", "mcp"];

/// One `[[backends]]` entry of the raw configuration: the table the file holds (read
/// against its kind by [`validate_backends`]), or the effective entry `check-config` prints.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RawEntry {
    /// As the configuration file holds it.
    Table(toml::Table),
    /// As the effective configuration prints it.
    Effective(Box<RawBackend>),
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        toml::Table::deserialize(d).map(RawEntry::Table)
    }
}

impl Serialize for RawEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RawEntry::Table(table) => table.serialize(s),
            RawEntry::Effective(backend) => backend.serialize(s),
        }
    }
}

/// The raw form of one entry: the keys its `kind` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub(super) enum RawBackend {
    /// `kind = "openapi"`.
    #[serde(rename = "openapi")]
    OpenApi(RawOpenApi),
    /// `kind = "mcp"`.
    #[serde(rename = "mcp")]
    Mcp(RawMcp),
}

/// The keys of `kind = "openapi"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOpenApi {
    name: String,
    timeout_ms: Option<u64>,
    max_in_flight: Option<u64>,
    queue: Option<u64>,
    queue_timeout_ms: Option<u64>,
    breaker_failures: Option<u64>,
    breaker_cooldown_ms: Option<u64>,
    spec: Option<String>,
    base_url: Option<String>,
    auth: Option<RawAuth>,
    max_response_bytes: Option<u64>,
    error_id_pointers: Option<Vec<String>>,
    error_message_pointers: Option<Vec<String>>,
    #[serde(default)]
    tools: BTreeMap<String, ToolOverride>,
}

/// The keys of `kind = "mcp"`: `command` (with `args`, `env`, `cwd`) or `url` (with
/// `headers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    name: String,
    timeout_ms: Option<u64>,
    max_in_flight: Option<u64>,
    queue: Option<u64>,
    queue_timeout_ms: Option<u64>,
    breaker_failures: Option<u64>,
    breaker_cooldown_ms: Option<u64>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    headers: Option<BTreeMap<String, HeaderValue>>,
    max_tools: Option<u64>,
    max_schema_bytes: Option<u64>,
    pinning: Option<Pinning>,
    expose: Option<Vec<String>>,
    read_scope: Option<String>,
    #[serde(default)]
    tools: BTreeMap<String, ToolOverride>,
}

/// `auth = { … }` of an OpenAPI backend: one of three shapes, checked by [`validate_auth`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    header: Option<String>,
    value_file: Option<PathBuf>,
    bearer_file: Option<PathBuf>,
    basic_file: Option<PathBuf>,
}

impl RawBackend {
    /// The keys every kind has: `name`, `timeout_ms` and `tools`.
    fn common(&self) -> (&str, Option<u64>, &BTreeMap<String, ToolOverride>) {
        match self {
            RawBackend::OpenApi(o) => (&o.name, o.timeout_ms, &o.tools),
            RawBackend::Mcp(m) => (&m.name, m.timeout_ms, &m.tools),
        }
    }

    /// The keys every kind has that bound its calls.
    fn limits(&self) -> RawLimits {
        match self {
            RawBackend::OpenApi(o) => RawLimits {
                max_in_flight: o.max_in_flight,
                queue: o.queue,
                queue_timeout_ms: o.queue_timeout_ms,
                breaker_failures: o.breaker_failures,
                breaker_cooldown_ms: o.breaker_cooldown_ms,
            },
            RawBackend::Mcp(m) => RawLimits {
                max_in_flight: m.max_in_flight,
                queue: m.queue,
                queue_timeout_ms: m.queue_timeout_ms,
                breaker_failures: m.breaker_failures,
                breaker_cooldown_ms: m.breaker_cooldown_ms,
            },
        }
    }
}

fn backend_error(index: usize, name: Option<&str>, what: impl std::fmt::Display) -> ConfigError {
    match name {
        Some(name) => ConfigError::new(format!("backends[{index}] ({name}): {what}")),
        None => ConfigError::new(format!("backends[{index}]: {what}")),
    }
}

/// Validates the raw entries; relative paths are resolved against `base` (the directory of
/// the configuration file).
pub(super) fn validate_backends(
    raw: Vec<RawEntry>,
    base: Option<&Path>,
) -> Result<Vec<BackendConfig>, ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (index, entry) in raw.into_iter().enumerate() {
        let entry = match entry {
            RawEntry::Table(table) => read_entry(index, table)?,
            RawEntry::Effective(backend) => *backend,
        };
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

/// Reads the entry at `index` against its kind.
fn read_entry(index: usize, table: toml::Table) -> Result<RawBackend, ConfigError> {
    let name = table.get("name").and_then(toml::Value::as_str);
    let err = |what: &str| backend_error(index, name, what);
    match table.get("kind") {
        None => return Err(err("`kind` is required: openapi or mcp")),
        Some(kind) if kind.as_str().is_some_and(|k| KINDS.contains(&k)) => {}
        Some(kind) => {
            return Err(err(&format!(
                "`kind` {kind} is not one of {}",
                KINDS.join(", ")
            )));
        }
    }
    RawBackend::deserialize(toml::Value::Table(table.clone()))
        .map_err(|e| err(&with_key(&table, e.message().trim_end())))
}

/// A refusal's message, led by the key at fault when the message does not name it (serde
/// names an unknown key, not one whose value has the wrong type).
fn with_key(table: &toml::Table, message: &str) -> String {
    match key_at_fault(table) {
        Some(key) if !message.contains(&format!("`{key}`")) => format!("`{key}`: {message}"),
        _ => message.to_owned(),
    }
}

/// The first key of an entry that is refused on its own (with the entry's kind and name):
/// `name` itself first, the others in order.
fn key_at_fault(table: &toml::Table) -> Option<&str> {
    let refused = |key: &str| {
        let alone: toml::Table = table
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "kind" | "name") || k.as_str() == key)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        RawBackend::deserialize(toml::Value::Table(alone)).is_err()
    };
    let others = table.keys().map(String::as_str);
    std::iter::once("name")
        .chain(others.filter(|k| !matches!(*k, "kind" | "name")))
        .find(|key| refused(key))
}

/// Checks one entry read against its kind.
fn validate_one(
    index: usize,
    raw: RawBackend,
    base: Option<&Path>,
) -> Result<BackendConfig, ConfigError> {
    let (name, timeout_ms, tools) = raw.common();
    let (name, tools, limits) = (name.to_owned(), tools.clone(), raw.limits());
    let err = |what: &str| backend_error(index, Some(&name), what);
    if !valid_backend_name(&name) {
        return Err(err(
            "`name` must be 1 to 32 lower-case letters, digits or `_`, starting with a letter",
        ));
    }
    let timeout_ms = timeout_ms.unwrap_or(DEFAULT_BACKEND_TIMEOUT_MS);
    if !(100..=600_000).contains(&timeout_ms) {
        return Err(err("`timeout_ms` must be between 100 and 600000"));
    }
    let limits = limits.check(timeout_ms).map_err(|e| err(&e))?;
    check_overrides(&name, &tools).map_err(|e| err(&e))?;
    let kind = match raw {
        RawBackend::OpenApi(openapi) => validate_openapi(openapi, base).map(BackendKind::OpenApi),
        RawBackend::Mcp(mcp) => validate_mcp(mcp, base).map(BackendKind::Mcp),
    };
    Ok(BackendConfig {
        kind: kind.map_err(|e| err(&e))?,
        name,
        timeout: Duration::from_millis(timeout_ms),
        limits,
        tools,
    })
}

/// Checks the overrides of the backend `name`: each names a tool of it, with a known
/// category and a scope that is not empty.
fn check_overrides(name: &str, tools: &BTreeMap<String, ToolOverride>) -> Result<(), String> {
    for (tool, over) in tools {
        if !tool.starts_with(&format!("{name}_")) {
            return Err(format!(
                "tools.{tool}: an override names the tool's full name, which starts with `{name}_`"
            ));
        }
        if let Some(category) = &over.category
            && !CATEGORY_WORDS.contains(&category.as_str())
        {
            return Err(format!(
                "tools.{tool}.category: {category:?} is not one of {}",
                CATEGORY_WORDS.join(", ")
            ));
        }
        if over.scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(format!("tools.{tool}.scope must not be empty"));
        }
    }
    Ok(())
}

fn is_http_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://")) && url.len() > "https://".len()
}

/// Checks the keys of an OpenAPI backend.
fn validate_openapi(raw: RawOpenApi, base: Option<&Path>) -> Result<OpenApiBackend, String> {
    let spec = raw
        .spec
        .ok_or("`spec` (the OpenAPI document) is required")?;
    if let Some(url) = &raw.base_url
        && !is_http_url(url)
    {
        return Err("`base_url` must be an http:// or https:// URL".to_owned());
    }
    let max_response_bytes = raw.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
    if !(1024..=1024 * 1024 * 1024).contains(&max_response_bytes) {
        return Err("`max_response_bytes` must be between 1024 and 1073741824".to_owned());
    }
    Ok(OpenApiBackend {
        spec: SpecSource::parse(&spec, base)?,
        base_url: raw.base_url.map(|u| u.trim_end_matches('/').to_owned()),
        auth: raw.auth.map(|a| validate_auth(a, base)).transpose()?,
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

/// The JSON pointers `key` gives, or `default`; each must start with `/`.
fn pointers(
    given: Option<Vec<String>>,
    default: &[&str],
    key: &str,
) -> Result<Vec<String>, String> {
    let list = given.unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
    match list.iter().find(|p| !p.is_empty() && !p.starts_with('/')) {
        Some(bad) => Err(format!(
            "`{key}`: {bad:?} is not a JSON pointer (it starts with `/`)"
        )),
        None => Ok(list),
    }
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

/// Checks the keys of an MCP backend.
fn validate_mcp(raw: RawMcp, base: Option<&Path>) -> Result<McpBackend, String> {
    let max_tools = raw.max_tools.unwrap_or(DEFAULT_MAX_TOOLS as u64);
    if !(1..=4096).contains(&max_tools) {
        return Err("`max_tools` must be between 1 and 4096".to_owned());
    }
    let max_schema_bytes = raw
        .max_schema_bytes
        .unwrap_or(DEFAULT_MAX_SCHEMA_BYTES as u64);
    if !(1024..=1024 * 1024).contains(&max_schema_bytes) {
        return Err("`max_schema_bytes` must be between 1024 and 1048576".to_owned());
    }
    let pinning = raw.pinning.unwrap_or(Pinning::FirstUse);
    let expose = match &raw.expose {
        Some(words) => Exposed::of(words)?,
        None => Exposed::ALL,
    };
    let read_scope = raw.read_scope.clone();
    if read_scope
        .as_deref()
        .is_some_and(|s| s.trim().is_empty() || s.contains(char::is_whitespace))
    {
        return Err("`read_scope` must be one scope, without spaces".to_owned());
    }
    Ok(McpBackend {
        transport: validate_transport(raw, base)?,
        // Both ranges were checked above.
        max_tools: max_tools as usize,
        max_schema_bytes: max_schema_bytes as usize,
        pinning,
        expose,
        read_scope,
    })
}

/// How an MCP backend is reached: `command` (stdio) or `url` (Streamable HTTP), each with
/// the keys that go with it only.
fn validate_transport(raw: RawMcp, base: Option<&Path>) -> Result<McpTransport, String> {
    match (raw.command, raw.url) {
        (Some(command), None) => {
            if raw.headers.is_some() {
                return Err("`headers` go with `url`, not with `command`".to_owned());
            }
            if command.trim().is_empty() {
                return Err("`command` must not be empty".to_owned());
            }
            Ok(McpTransport::Stdio {
                command,
                args: raw.args.unwrap_or_default(),
                env: raw.env.unwrap_or_default(),
                cwd: raw.cwd.map(|c| resolve(base, c)),
            })
        }
        (None, Some(url)) => {
            if raw.args.is_some() || raw.env.is_some() || raw.cwd.is_some() {
                return Err("`args`, `env` and `cwd` go with `command`, not with `url`".to_owned());
            }
            if !is_http_url(&url) {
                return Err("`url` must be an http:// or https:// URL".to_owned());
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
            Ok(McpTransport::Http { url, headers })
        }
        (Some(_), Some(_)) => {
            Err("give either `command` (stdio) or `url` (Streamable HTTP), not both".to_owned())
        }
        (None, None) => Err("`command` (stdio) or `url` (Streamable HTTP) is required".to_owned()),
    }
}

impl BackendConfig {
    /// The raw form (for `check-config`'s effective configuration); secrets are paths.
    pub(super) fn to_raw(&self) -> RawEntry {
        let (name, timeout_ms) = (self.name.clone(), Some(self.timeout.as_millis() as u64));
        let tools = self.tools.clone();
        let limits = RawLimits::from(&self.limits);
        RawEntry::Effective(Box::new(match &self.kind {
            BackendKind::OpenApi(o) => RawBackend::OpenApi(RawOpenApi {
                name,
                timeout_ms,
                max_in_flight: limits.max_in_flight,
                queue: limits.queue,
                queue_timeout_ms: limits.queue_timeout_ms,
                breaker_failures: limits.breaker_failures,
                breaker_cooldown_ms: limits.breaker_cooldown_ms,
                spec: Some(o.spec.to_config_text()),
                base_url: o.base_url.clone(),
                auth: o.auth.as_ref().map(RawAuth::from),
                max_response_bytes: Some(o.max_response_bytes),
                error_id_pointers: Some(o.error_id_pointers.clone()),
                error_message_pointers: Some(o.error_message_pointers.clone()),
                tools,
            }),
            BackendKind::Mcp(mcp) => RawBackend::Mcp(raw_mcp(name, timeout_ms, limits, mcp, tools)),
        }))
    }
}

/// The raw keys of an MCP backend.
fn raw_mcp(
    name: String,
    timeout_ms: Option<u64>,
    limits: RawLimits,
    mcp: &McpBackend,
    tools: BTreeMap<String, ToolOverride>,
) -> RawMcp {
    let mut raw = RawMcp {
        name,
        timeout_ms,
        max_in_flight: limits.max_in_flight,
        queue: limits.queue,
        queue_timeout_ms: limits.queue_timeout_ms,
        breaker_failures: limits.breaker_failures,
        breaker_cooldown_ms: limits.breaker_cooldown_ms,
        command: None,
        args: None,
        env: None,
        cwd: None,
        url: None,
        headers: None,
        max_tools: Some(mcp.max_tools as u64),
        max_schema_bytes: Some(mcp.max_schema_bytes as u64),
        pinning: Some(mcp.pinning),
        expose: (mcp.expose != Exposed::ALL).then(|| mcp.expose.words()),
        read_scope: mcp.read_scope.clone(),
        tools,
    };
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
    raw
}

impl From<&BackendAuth> for RawAuth {
    fn from(auth: &BackendAuth) -> RawAuth {
        match auth {
            BackendAuth::Header { name, value_file } => RawAuth {
                header: Some(name.clone()),
                value_file: Some(value_file.clone()),
                ..RawAuth::default()
            },
            BackendAuth::Bearer { token_file } => RawAuth {
                bearer_file: Some(token_file.clone()),
                ..RawAuth::default()
            },
            BackendAuth::Basic { file } => RawAuth {
                basic_file: Some(file.clone()),
                ..RawAuth::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IdempotencyPolicy, SpecUrl};

    fn parse(text: &str) -> Result<Vec<BackendConfig>, ConfigError> {
        #[derive(Deserialize)]
        struct Doc {
            backends: Vec<RawEntry>,
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
            max_in_flight = 8
            queue = 0
            breaker_failures = 0
            breaker_cooldown_ms = 1000
            "#,
        )
        .expect("valid");
        assert_eq!(backends[0].limits, crate::config::BackendLimits::default());
        assert_eq!(
            backends[1].limits,
            crate::config::BackendLimits {
                max_in_flight: 8,
                queue: 0,
                queue_timeout: Duration::from_millis(5000),
                breaker_failures: 0,
                breaker_cooldown: Duration::from_millis(1000),
            }
        );
        assert!(
            matches!(&backends[0].kind, BackendKind::Mcp(McpBackend { transport: McpTransport::Stdio { args, .. }, .. }) if args.len() == 2)
        );
        let BackendKind::Mcp(McpBackend {
            transport: McpTransport::Http { headers, .. },
            max_tools,
            max_schema_bytes,
            ..
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
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nexpose = []",
                "`expose` names nothing",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nexpose = [\"tools\", \"files\"]",
                "`expose`: \"files\" is not one of",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nexpose = [\"tools\", \"tools\"]",
                "`expose` names \"tools\" twice",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nread_scope = \"a b\"",
                "`read_scope` must be one scope",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nurl = \"http://h/mcp\"",
                "not both",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nspec = \"s.json\"",
                "backends[0] (a): unknown field `spec`, expected one of `name`, `timeout_ms`, \
                 `max_in_flight`, `queue`, `queue_timeout_ms`, `breaker_failures`, \
                 `breaker_cooldown_ms`, `command`, `args`, `env`, `cwd`, `url`, `headers`, \
                 `max_tools`, `max_schema_bytes`, `pinning`, `expose`, `read_scope`, `tools`",
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
                "backends[0] (a): unknown field `max_tools`, expected one of `name`, \
                 `timeout_ms`, `max_in_flight`, `queue`, `queue_timeout_ms`, \
                 `breaker_failures`, `breaker_cooldown_ms`, `spec`, `base_url`, `auth`, \
                 `max_response_bytes`, `error_id_pointers`, `error_message_pointers`, `tools`",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\ntimeout_ms = \"30s\"",
                "backends[0] (a): `timeout_ms`: invalid type: string \"30s\", expected u64",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\nauth = \"bearer.txt\"",
                "backends[0] (a): `auth`: invalid type: string \"bearer.txt\", expected struct RawAuth",
            ),
            (
                "kind = \"mcp\"\ncommand = \"x\"",
                "backends[0]: missing field `name`",
            ),
            (
                "name = \"a\"\ncommand = \"x\"",
                "backends[0] (a): `kind` is required: openapi or mcp",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nflavour = 1",
                "unknown field `flavour`",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nmax_in_flight = 0",
                "backends[0] (a): `max_in_flight` must be between 1 and 4096",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\ntimeout_ms = 1000\nqueue_timeout_ms = 2000",
                "backends[0] (a): `queue_timeout_ms` must be between 1 and the backend's `timeout_ms` (1000)",
            ),
            (
                "name = \"a\"\nkind = \"openapi\"\nspec = \"s\"\nbreaker_cooldown_ms = 5",
                "backends[0] (a): `breaker_cooldown_ms` must be between 100 and 3600000",
            ),
            (
                "name = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\nqueue = -1",
                "backends[0] (a): `queue`: invalid value: integer `-1`, expected u64",
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
        let second = "[[backends]]\nname = \"a\"\nkind = \"mcp\"\ncommand = \"x\"\n\n\
                      [[backends]]\nname = \"b\"\nkind = \"mcp\"\nurl = \"http://h/mcp\"\nflavour = 1\n";
        assert!(
            parse(second)
                .expect_err("second")
                .message()
                .starts_with("backends[1] (b): unknown field `flavour`, expected one of `name`")
        );
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
        let url = |u: &str| Ok(SpecSource::Url(SpecUrl::parse(u).expect("a valid URL")));
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
}
