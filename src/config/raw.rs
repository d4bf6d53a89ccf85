//! The raw form of the configuration: what the file may say (every field optional,
//! unknown keys rejected with the list of valid ones), and the sources laid over it in
//! order: the file, the `TOLLGATE_*` environment, the command-line flags.

use super::*;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) database: Option<PathBuf>,
    pub(super) locale: Option<Locale>,
    #[serde(default)]
    pub(super) stdio: RawStdio,
    #[serde(default)]
    pub(super) http: RawHttp,
    #[serde(default)]
    pub(super) log: RawLog,
    #[serde(default)]
    pub(super) tools: RawTools,
    #[serde(default)]
    pub(super) dev: RawDev,
    #[serde(default)]
    pub(super) store: RawStore,
    #[serde(default)]
    pub(super) auth: RawAuth,
    #[serde(default)]
    pub(super) audit: RawAudit,
    #[serde(default)]
    pub(super) errors: RawErrors,
    #[serde(default)]
    pub(super) console: RawConsole,
    #[serde(default)]
    pub(super) oauth_server: super::oauth_server::RawOAuthServer,
    #[serde(default)]
    pub(super) telemetry: super::telemetry::RawTelemetry,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) backends: Vec<super::backend_entries::RawEntry>,
    #[serde(default)]
    pub(super) policy: super::policy::RawPolicy,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawErrors {
    pub(super) guard_channel: Option<GuardChannel>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    pub(super) argon2_per_second: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) issuers: Vec<super::issuers::RawIssuer>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStdio {
    pub(super) max_line_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    #[serde(default, deserialize_with = "deserialize_listen")]
    pub(super) listen: Option<SocketAddr>,
    pub(super) allow_non_loopback: Option<bool>,
    pub(super) allowed_origins: Option<Vec<String>>,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) max_body_bytes: Option<u64>,
    pub(super) workers: Option<u64>,
    pub(super) session_ttl_secs: Option<u64>,
    pub(super) public_base_url: Option<String>,
    pub(super) error_status: Option<ErrorStatusMode>,
    pub(super) metrics: Option<bool>,
    pub(super) trusted_proxies: Option<Vec<String>>,
    pub(super) client_address_header: Option<ClientAddressHeader>,
    pub(super) max_connections: Option<u64>,
    pub(super) head_timeout_ms: Option<u64>,
    pub(super) body_timeout_ms: Option<u64>,
    pub(super) idle_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub(super) level: Option<LogLevel>,
    pub(super) format: Option<LogFormat>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTools {
    pub(super) conformance_pack: Option<bool>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDev {
    pub(super) unauthenticated_credential: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsole {
    pub(super) enabled: Option<bool>,
    pub(super) idle_minutes: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) retention_days: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    /// The database, as `database` names it (a PostgreSQL URL, usually).
    pub(super) url: Option<String>,
    pub(super) busy_timeout_ms: Option<u64>,
    pub(super) pool_size: Option<u64>,
}

pub(super) fn deserialize_listen<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

pub(super) fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("invalid listen address {text:?}: expected IP:PORT, e.g. {DEFAULT_LISTEN}")
    })
}

pub(super) fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("expected true or false, got {text:?}")),
    }
}

pub(super) fn parse_u64(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("expected a non-negative integer, got {text:?}"))
}

pub(super) fn parse_word<T: FromStr<Err = ConfigError>>(text: &str) -> Result<T, String> {
    text.parse().map_err(|e: ConfigError| e.message)
}

// ---------------------------------------------------------------------------------------
// Sources: file, environment, flags.

pub(super) fn config_file(file: Option<&Path>, env: &[(String, String)]) -> Option<PathBuf> {
    file.map(Path::to_path_buf).or_else(|| {
        env_value(env, "TOLLGATE_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

pub(super) fn read_file(path: &Path) -> Result<RawConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ConfigError::new(format!("config file {} does not exist", path.display()))
        } else {
            ConfigError::new(format!("cannot read config file {}: {e}", path.display()))
        }
    })?;
    let raw: RawConfig = toml::from_str(&text).map_err(|e| {
        ConfigError::new(format!(
            "config file {}{}: {}",
            path.display(),
            e.span()
                .map(|span| place(&text, span.start))
                .unwrap_or_default(),
            e.message().trim_end()
        ))
    })?;
    if raw.database.is_some() && raw.store.url.is_some() {
        return Err(ConfigError::new(format!(
            "config file {}: database and store.url both name the database; keep one of them",
            path.display()
        )));
    }
    Ok(raw)
}

/// Where a parse error is: `, line N (key = …)`. The line's key is named and its value
/// left out: a line of a config file may hold a secret an operator wrote inline by
/// mistake, and this message reaches the journal.
fn place(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let number = before.matches('\n').count() + 1;
    let line = text.lines().nth(number - 1).unwrap_or_default().trim();
    match line.split_once('=') {
        Some((key, _)) => format!(", line {number} ({} = …)", key.trim()),
        None if line.starts_with('[') => format!(", line {number} ({line})"),
        None => format!(", line {number}"),
    }
}

/// The last value of `name` in `env`.
pub(super) fn env_value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The `TOLLGATE_*` variables of this process (others are irrelevant and may not be UTF-8).
pub(super) fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        // tollgate's own variables, and OpenTelemetry's standard ones for `[telemetry]`.
        let Some(name) = name
            .to_str()
            .filter(|n| n.starts_with("TOLLGATE_") || n.starts_with("OTEL_"))
        else {
            continue;
        };
        let value = value
            .into_string()
            .map_err(|_| ConfigError::new(format!("{name}: the value is not valid UTF-8")))?;
        vars.push((name.to_owned(), value));
    }
    Ok(vars)
}

pub(super) type EnvSetter = fn(&mut RawConfig, &str) -> Result<(), String>;

/// Every configuration override read from the environment, with how it applies.
pub(super) const ENV_OVERRIDES: &[(&str, EnvSetter)] = &[
    ("TOLLGATE_DATABASE", |raw, v| {
        raw.database = Some(non_empty_path(v)?);
        Ok(())
    }),
    ("TOLLGATE_LOCALE", |raw, v| {
        raw.locale = Some(parse_word(v)?);
        Ok(())
    }),
    ("TOLLGATE_STDIO_MAX_LINE_BYTES", |raw, v| {
        raw.stdio.max_line_bytes = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_LISTEN", |raw, v| {
        raw.http.listen = Some(parse_listen(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_ALLOW_NON_LOOPBACK", |raw, v| {
        raw.http.allow_non_loopback = Some(parse_bool(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_WORKERS", |raw, v| {
        raw.http.workers = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_MAX_BODY_BYTES", |raw, v| {
        raw.http.max_body_bytes = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_ERROR_STATUS", |raw, v| {
        raw.http.error_status = Some(parse_word(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_PUBLIC_BASE_URL", |raw, v| {
        raw.http.public_base_url = Some(v.to_owned());
        Ok(())
    }),
    ("TOLLGATE_HTTP_METRICS", |raw, v| {
        raw.http.metrics = Some(parse_bool(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_MAX_CONNECTIONS", |raw, v| {
        raw.http.max_connections = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_HEAD_TIMEOUT_MS", |raw, v| {
        raw.http.head_timeout_ms = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_BODY_TIMEOUT_MS", |raw, v| {
        raw.http.body_timeout_ms = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_HTTP_IDLE_TIMEOUT_MS", |raw, v| {
        raw.http.idle_timeout_ms = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_LOG_LEVEL", |raw, v| {
        raw.log.level = Some(parse_word(v)?);
        Ok(())
    }),
    ("TOLLGATE_LOG_FORMAT", |raw, v| {
        raw.log.format = Some(parse_word(v)?);
        Ok(())
    }),
    ("TOLLGATE_CONFORMANCE_PACK", |raw, v| {
        raw.tools.conformance_pack = Some(parse_bool(v)?);
        Ok(())
    }),
    ("TOLLGATE_DEV_UNAUTHENTICATED_CREDENTIAL", |raw, v| {
        raw.dev.unauthenticated_credential = Some(v.to_owned());
        Ok(())
    }),
    ("TOLLGATE_HTTP_TRUSTED_PROXIES", |raw, v| {
        raw.http.trusted_proxies = Some(
            v.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        );
        Ok(())
    }),
    ("TOLLGATE_HTTP_CLIENT_ADDRESS_HEADER", |raw, v| {
        raw.http.client_address_header = Some(parse_word(v)?);
        Ok(())
    }),
    ("TOLLGATE_AUTH_ARGON2_PER_SECOND", |raw, v| {
        raw.auth.argon2_per_second = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_STORE_BUSY_TIMEOUT_MS", |raw, v| {
        raw.store.busy_timeout_ms = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_OAUTH_SERVER_ENABLED", |raw, v| {
        raw.oauth_server.enabled = Some(parse_bool(v)?);
        Ok(())
    }),
    ("TOLLGATE_CONSOLE_ENABLED", |raw, v| {
        raw.console.enabled = Some(parse_bool(v)?);
        Ok(())
    }),
    ("TOLLGATE_CONSOLE_IDLE_MINUTES", |raw, v| {
        raw.console.idle_minutes = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_AUDIT_RETENTION_DAYS", |raw, v| {
        raw.audit.retention_days = Some(parse_u64(v)?);
        Ok(())
    }),
    ("TOLLGATE_ERRORS_GUARD_CHANNEL", |raw, v| {
        raw.errors.guard_channel = Some(parse_word(v)?);
        Ok(())
    }),
];

/// Every `TOLLGATE_*` variable tollgate knows: overrides first, then pass-through ones.
pub fn known_env_vars() -> Vec<&'static str> {
    ENV_OVERRIDES
        .iter()
        .map(|(name, _)| *name)
        .chain(PASSTHROUGH_ENV_VARS.iter().copied())
        .collect()
}

// A misspelt variable would otherwise be ignored silently, so any unknown one is an error.
pub(super) fn reject_unknown_env(env: &[(String, String)]) -> Result<(), ConfigError> {
    let known = known_env_vars();
    match env
        .iter()
        .find(|(name, _)| name.starts_with("TOLLGATE_") && !known.contains(&name.as_str()))
    {
        Some((name, _)) => Err(ConfigError::new(format!(
            "unknown environment variable {name}; known: {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

pub(super) fn apply_env(raw: &mut RawConfig, env: &[(String, String)]) -> Result<(), ConfigError> {
    for (name, setter) in ENV_OVERRIDES {
        if let Some(value) = env_value(env, name) {
            setter(raw, value).map_err(|e| ConfigError::new(format!("{name}: {e}")))?;
        }
    }
    Ok(())
}

pub(super) fn apply_flags(raw: &mut RawConfig, flags: &Overrides) -> Result<(), ConfigError> {
    let flag_error = |flag: &str, e: String| ConfigError::new(format!("{flag}: {e}"));
    if let Some(path) = &flags.database {
        raw.database = Some(path.clone());
    }
    if let Some(locale) = &flags.locale {
        raw.locale = Some(parse_word(locale).map_err(|e| flag_error("--locale", e))?);
    }
    if let Some(listen) = &flags.listen {
        raw.http.listen = Some(parse_listen(listen).map_err(|e| flag_error("--listen", e))?);
    }
    if let Some(level) = &flags.log_level {
        raw.log.level = Some(parse_word(level).map_err(|e| flag_error("--log-level", e))?);
    }
    if let Some(format) = &flags.log_format {
        raw.log.format = Some(parse_word(format).map_err(|e| flag_error("--log-format", e))?);
    }
    raw.tools.conformance_pack = flags.conformance_pack.or(raw.tools.conformance_pack);
    raw.http.allow_non_loopback = flags.allow_non_loopback.or(raw.http.allow_non_loopback);
    if let Some(id) = &flags.dev_credential {
        raw.dev.unauthenticated_credential = Some(id.clone());
    }
    Ok(())
}

pub(super) fn non_empty_path(text: &str) -> Result<PathBuf, String> {
    if text.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    Ok(PathBuf::from(text))
}
