//! Validation: the raw form becomes typed values once, or a [`ConfigError`] that names the
//! key, variable or flag at fault. Nothing downstream re-validates.

use super::raw::*;
use super::*;

pub(super) fn validate(mut raw: RawConfig) -> Result<Config, ConfigError> {
    // `database` (from the file, the environment or a flag) wins over `[store] url`; the
    // file may not set both (`raw::read_file`).
    let database = match (raw.database.take(), raw.store.url.take()) {
        (Some(text), _) => parse_database("database", &text)?,
        (None, Some(url)) => parse_database("store.url", &PathBuf::from(url))?,
        (None, None) => Database::Sqlite(PathBuf::from(DEFAULT_DATABASE)),
    };
    let http = validate_http(raw.http)?;
    let console = validate_console(raw.console, &http)?;
    let oauth_server = super::oauth_server::validate_oauth_server(
        raw.oauth_server,
        http.public_base_url.as_deref(),
        http.listen.ip().is_loopback(),
    )?;
    let config = Config {
        file: None,
        database,
        locale: raw.locale,
        stdio: validate_stdio(raw.stdio)?,
        http,
        log: LogConfig {
            level: raw.log.level.unwrap_or(LogLevel::Info),
            format: raw.log.format.unwrap_or(LogFormat::Human),
        },
        tools: ToolsConfig {
            conformance_pack: raw.tools.conformance_pack.unwrap_or(false),
        },
        dev: validate_dev(raw.dev)?,
        store: validate_store(raw.store)?,
        auth: validate_auth(raw.auth)?,
        audit: validate_audit(raw.audit)?,
        errors: ErrorsConfig {
            guard_channel: raw.errors.guard_channel.unwrap_or(GuardChannel::JsonRpc),
        },
        console,
        oauth_server,
        telemetry: super::telemetry::validate_telemetry(raw.telemetry)?,
        backends: Vec::new(),
        policy: super::policy::validate_policy(raw.policy)?,
    };
    check_dev_mode_is_local(&config)?;
    super::policy::check_approvals_have_a_console(&config)?;
    Ok(config)
}

pub(super) fn to_usize(value: u64, key: &str) -> Result<usize, ConfigError> {
    usize::try_from(value)
        .map_err(|_| ConfigError::new(format!("{key} = {value} is too large for this machine")))
}

pub(super) fn validate_stdio(raw: RawStdio) -> Result<StdioConfig, ConfigError> {
    let key = "stdio.max_line_bytes";
    let bytes = in_range(
        key,
        Some("TOLLGATE_STDIO_MAX_LINE_BYTES"),
        raw.max_line_bytes,
        DEFAULT_MAX_BYTES,
        (MIN_MAX_BYTES, u64::MAX),
    )?;
    Ok(StdioConfig {
        max_line_bytes: to_usize(bytes, key)?,
    })
}

pub(super) fn validate_http(raw: RawHttp) -> Result<HttpConfig, ConfigError> {
    let listen = raw
        .listen
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8787)));
    let allow_non_loopback = raw.allow_non_loopback.unwrap_or(false);
    check_listen(listen, allow_non_loopback)?;
    let body = in_range(
        "http.max_body_bytes",
        Some("TOLLGATE_HTTP_MAX_BODY_BYTES"),
        raw.max_body_bytes,
        DEFAULT_MAX_BYTES,
        (MIN_MAX_BYTES, u64::MAX),
    )?;
    let workers = in_range(
        "http.workers",
        Some("TOLLGATE_HTTP_WORKERS"),
        raw.workers,
        DEFAULT_WORKERS,
        (1, MAX_WORKERS),
    )?;
    let connections = in_range(
        "http.max_connections",
        Some("TOLLGATE_HTTP_MAX_CONNECTIONS"),
        raw.max_connections,
        DEFAULT_MAX_CONNECTIONS,
        (1, MAX_MAX_CONNECTIONS),
    )?;
    let ttl = in_range(
        "http.session_ttl_secs",
        None,
        raw.session_ttl_secs,
        DEFAULT_SESSION_TTL_SECS,
        (1, u64::MAX),
    )?;
    Ok(HttpConfig {
        listen,
        allow_non_loopback,
        allowed_origins: validate_origins(raw.allowed_origins.unwrap_or_default())?,
        allowed_hosts: validate_hosts(raw.allowed_hosts.unwrap_or_default())?,
        max_body_bytes: to_usize(body, "http.max_body_bytes")?,
        workers: to_usize(workers, "http.workers")?,
        session_ttl: Duration::from_secs(ttl),
        public_base_url: validate_base_url(raw.public_base_url.unwrap_or_default())?,
        error_status: raw.error_status.unwrap_or(ErrorStatusMode::Compatible),
        metrics: raw.metrics.unwrap_or(false),
        trusted_proxies: raw
            .trusted_proxies
            .unwrap_or_default()
            .iter()
            .map(|p| p.parse())
            .collect::<Result<_, _>>()?,
        client_address_header: raw
            .client_address_header
            .unwrap_or(ClientAddressHeader::XForwardedFor),
        max_connections: to_usize(connections, "http.max_connections")?,
        head_timeout: listener_timeout("head", raw.head_timeout_ms, DEFAULT_HEAD_TIMEOUT_MS)?,
        body_timeout: listener_timeout("body", raw.body_timeout_ms, DEFAULT_BODY_TIMEOUT_MS)?,
        idle_timeout: listener_timeout("idle", raw.idle_timeout_ms, DEFAULT_IDLE_TIMEOUT_MS)?,
    })
}

pub(super) fn validate_auth(raw: RawAuth) -> Result<AuthConfig, ConfigError> {
    let per_second = in_range(
        "auth.argon2_per_second",
        Some("TOLLGATE_AUTH_ARGON2_PER_SECOND"),
        raw.argon2_per_second,
        u64::from(DEFAULT_ARGON2_PER_SECOND),
        (1, MAX_ARGON2_PER_SECOND),
    )?;
    Ok(AuthConfig {
        argon2_per_second: u32::try_from(per_second).unwrap_or(u32::MAX),
        issuers: Vec::new(),
    })
}

/// `http.<which>_timeout_ms`, within [`LISTENER_TIMEOUT_RANGE_MS`].
pub(super) fn listener_timeout(
    which: &str,
    value: Option<u64>,
    default: u64,
) -> Result<Duration, ConfigError> {
    let key = format!("http.{which}_timeout_ms");
    let env = format!("TOLLGATE_HTTP_{}_TIMEOUT_MS", which.to_ascii_uppercase());
    let ms = in_range(&key, Some(&env), value, default, LISTENER_TIMEOUT_RANGE_MS)?;
    Ok(Duration::from_millis(ms))
}

// Loopback by default: exposing the MCP endpoint to a network must be a deliberate choice.
pub(super) fn check_listen(
    listen: SocketAddr,
    allow_non_loopback: bool,
) -> Result<(), ConfigError> {
    if listen.ip().is_loopback() || allow_non_loopback {
        return Ok(());
    }
    Err(ConfigError::new(format!(
        "http.listen = {listen} is not a loopback address; tollgate only listens on loopback \
         unless you opt in: set `allow_non_loopback = true` in [http], \
         TOLLGATE_HTTP_ALLOW_NON_LOOPBACK=true, or pass --allow-non-loopback"
    )))
}

/// `scheme://host[:port]`, lower-cased, no path.
pub(super) fn validate_origins(origins: Vec<String>) -> Result<Vec<String>, ConfigError> {
    origins
        .into_iter()
        .map(|origin| {
            let lower = origin.trim().to_ascii_lowercase();
            let rest = lower
                .strip_prefix("http://")
                .or_else(|| lower.strip_prefix("https://"));
            match rest {
                Some(host) if !host.is_empty() && !host.contains(['/', ' ']) => Ok(lower),
                _ => Err(ConfigError::new(format!(
                    "http.allowed_origins: invalid origin {origin:?}: expected \
                     scheme://host[:port] with no path, e.g. https://app.example.com"
                ))),
            }
        })
        .collect()
}

/// `host[:port]`, lower-cased.
pub(super) fn validate_hosts(hosts: Vec<String>) -> Result<Vec<String>, ConfigError> {
    hosts
        .into_iter()
        .map(|host| {
            let lower = host.trim().to_ascii_lowercase();
            if lower.is_empty() || lower.contains(['/', ' ']) {
                return Err(ConfigError::new(format!(
                    "http.allowed_hosts: invalid host {host:?}: expected host[:port], \
                     e.g. mcp.example.com"
                )));
            }
            Ok(lower)
        })
        .collect()
}

pub(super) fn validate_base_url(url: String) -> Result<Option<String>, ConfigError> {
    let url = url.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let has_scheme = url.starts_with("https://") || url.starts_with("http://");
    if !has_scheme || url.contains(char::is_whitespace) {
        return Err(ConfigError::new(format!(
            "http.public_base_url: invalid URL {url:?}: expected http(s)://host[/path], \
             e.g. https://mcp.example.com"
        )));
    }
    Ok(Some(url.trim_end_matches('/').to_owned()))
}

pub(super) fn validate_dev(raw: RawDev) -> Result<DevConfig, ConfigError> {
    let id = raw.unauthenticated_credential.unwrap_or_default();
    let id = id.trim();
    if id.is_empty() {
        return Ok(DevConfig::default());
    }
    // A whole token here would put a secret in a config file; only the public id belongs.
    if !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(ConfigError::new(
            "dev.unauthenticated_credential: expected a credential's public id (letters and \
             digits, as shown by `tollgate key list`), not a full token",
        ));
    }
    Ok(DevConfig {
        unauthenticated_credential: Some(id.to_owned()),
    })
}

// Development mode serves unauthenticated requests; it must never face a network.
pub(super) fn check_dev_mode_is_local(config: &Config) -> Result<(), ConfigError> {
    if config.dev.unauthenticated_credential.is_some() && !config.http.listen.ip().is_loopback() {
        return Err(ConfigError::new(format!(
            "dev.unauthenticated_credential is set but http.listen = {} is not a loopback \
             address; development mode only runs on loopback (127.0.0.1 or ::1)",
            config.http.listen
        )));
    }
    Ok(())
}

pub(super) fn validate_store(raw: RawStore) -> Result<StoreConfig, ConfigError> {
    let busy_ms = raw.busy_timeout_ms.unwrap_or(DEFAULT_BUSY_TIMEOUT_MS);
    let pool = in_range(
        "store.pool_size",
        None,
        raw.pool_size,
        DEFAULT_POOL_SIZE,
        (1, MAX_POOL_SIZE),
    )?;
    Ok(StoreConfig {
        busy_timeout: Duration::from_millis(busy_ms),
        pool_size: u32::try_from(pool).unwrap_or(u32::MAX),
    })
}

/// `[console]`: served by default only when the listener is on loopback.
pub(super) fn validate_console(
    raw: RawConsole,
    http: &HttpConfig,
) -> Result<ConsoleConfig, ConfigError> {
    let minutes = in_range(
        "console.idle_minutes",
        Some("TOLLGATE_CONSOLE_IDLE_MINUTES"),
        raw.idle_minutes,
        DEFAULT_CONSOLE_IDLE_MINUTES,
        (1, MAX_CONSOLE_IDLE_MINUTES),
    )?;
    Ok(ConsoleConfig {
        enabled: raw.enabled.unwrap_or(http.listen.ip().is_loopback()),
        idle_timeout: Duration::from_secs(minutes * 60),
    })
}

pub(super) fn validate_audit(raw: RawAudit) -> Result<AuditConfig, ConfigError> {
    let days = in_range(
        "audit.retention_days",
        Some("TOLLGATE_AUDIT_RETENTION_DAYS"),
        raw.retention_days,
        DEFAULT_AUDIT_RETENTION_DAYS,
        (0, MAX_AUDIT_RETENTION_DAYS),
    )?;
    Ok(AuditConfig {
        retention_days: u32::try_from(days).unwrap_or(u32::MAX),
    })
}

pub(super) fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn parse_database(key: &str, text: &Path) -> Result<Database, ConfigError> {
    let text = text
        .to_str()
        .ok_or_else(|| ConfigError::new(format!("{key}: the value is not valid UTF-8")))?;
    Database::parse(text).map_err(|e| ConfigError::new(format!("{key}: {e}")))
}
