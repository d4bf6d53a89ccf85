//! Configuration: a TOML file, `TOLLGATE_*` environment overrides and command-line flags,
//! in that order of precedence (flags win), parsed once into a validated [`Config`].
//!
//! The file is read into a private raw form (every field optional, unknown keys rejected
//! with the list of valid ones), environment variables and flags are laid over it, and
//! [`Config::load`] turns the result into typed values or a [`ConfigError`] that names the
//! key, variable or flag at fault. Nothing downstream re-validates. `Display` on [`Config`]
//! prints the effective configuration as TOML for `tollgate check-config`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod backend_entries;
mod backend_limits;
mod backends;
mod database;
mod issuer_checks;
mod issuers;
mod oauth_server;
mod policy;
mod proxy;
mod raw;
mod telemetry;
mod validate;

pub use backend_limits::{
    BackendLimits, DEFAULT_BREAKER_COOLDOWN_MS, DEFAULT_BREAKER_FAILURES, DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_QUEUE, DEFAULT_QUEUE_TIMEOUT_MS,
};
pub use backends::{
    BackendAuth, BackendConfig, BackendKind, CATEGORY_WORDS, DEFAULT_ERROR_ID_POINTERS,
    DEFAULT_ERROR_MESSAGE_POINTERS, DEFAULT_MAX_SCHEMA_BYTES, DEFAULT_MAX_TOOLS, Exposed,
    HeaderValue, IdempotencyPolicy, McpBackend, McpTransport, OpenApiBackend, Pinning, SpecSource,
    SpecUrl, ToolOverride, read_secret, secret_file_warning, valid_backend_name,
};

pub use database::{Database, PostgresUrl};
pub use issuers::{
    ClientSecret, DEFAULT_LOGIN_SCOPES, Discovery, IntrospectionConfig, IssuerConfig, LoginConfig,
    Preset, algorithm_name, is_tool_scope, is_trusted_url,
};
pub use oauth_server::{ClientDocumentsConfig, OAuthServerConfig};
pub use policy::{
    CONDITION_VARIABLES, Condition, Effect, PolicyConfig, PolicyRule, ToolPattern, Who,
};
pub use proxy::ProxyRange;
pub use telemetry::{Sampler, TelemetryConfig};

use raw::*;
use validate::{duration_millis, validate};

/// Environment variables that are read elsewhere (not config overrides) but are known.
pub const PASSTHROUGH_ENV_VARS: &[&str] =
    &["TOLLGATE_CONFIG", "TOLLGATE_TOKEN", "TOLLGATE_TOKEN_FILE"];

/// argon2 verifications started per second across all sources unless configured
/// (`auth.argon2_per_second`): about half a core's worth at 27 ms each.
pub const DEFAULT_ARGON2_PER_SECOND: u32 = 20;
const DEFAULT_DATABASE: &str = "tollgate.db";
const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
const DEFAULT_MAX_BYTES: u64 = 4 * 1024 * 1024;
const MIN_MAX_BYTES: u64 = 1024;
const DEFAULT_WORKERS: u64 = 16;
const MAX_WORKERS: u64 = 256;
const DEFAULT_SESSION_TTL_SECS: u64 = 3600;
/// `[http]` connection cap and request deadlines (see `HttpConfig`).
const DEFAULT_MAX_CONNECTIONS: u64 = 512;
const MAX_MAX_CONNECTIONS: u64 = 65_536;
const DEFAULT_HEAD_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_BODY_TIMEOUT_MS: u64 = 30_000;
const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// The bounds of every listener deadline: 100 ms to one hour.
const LISTENER_TIMEOUT_RANGE_MS: (u64, u64) = (100, 3_600_000);
const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5000;
const DEFAULT_POOL_SIZE: u64 = 8;
const MAX_POOL_SIZE: u64 = 256;
const MAX_ARGON2_PER_SECOND: u64 = 10_000;
const DEFAULT_AUDIT_RETENTION_DAYS: u64 = 90;
/// A hundred years: longer is a typo (0 keeps rows forever).
const MAX_AUDIT_RETENTION_DAYS: u64 = 36_500;
/// A console sign-in ends after this many minutes without a request.
const DEFAULT_CONSOLE_IDLE_MINUTES: u64 = 15;
const MAX_CONSOLE_IDLE_MINUTES: u64 = 720;

/// A configuration that could not be read or is invalid; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
}

impl ConfigError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The human explanation (also what `Display` prints).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Checks `value` (default `default`) lies in `min..=max`; the error names the key and
/// its environment variable, if it has one.
fn in_range(
    key: &str,
    env: Option<&str>,
    value: Option<u64>,
    default: u64,
    (min, max): (u64, u64),
) -> Result<u64, ConfigError> {
    let value = value.unwrap_or(default);
    if (min..=max).contains(&value) {
        return Ok(value);
    }
    let bound = if max == u64::MAX {
        format!("at least {min}")
    } else {
        format!("between {min} and {max}")
    };
    let env = env.map(|e| format!(" or {e}")).unwrap_or_default();
    Err(ConfigError::new(format!(
        "{key} = {value} is out of range: it must be {bound} (set by the config key {key}{env})"
    )))
}

/// Defines a closed set of words: the enum, `as_str`, `FromStr` (case-insensitive; the
/// error lists the accepted words), `Display`, and serde as a plain string.
macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal,
     { $($(#[$vmeta:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every accepted word, in order.
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            /// The word for this value, as written in the config file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $word),+
                }
            }
        }

        impl FromStr for $name {
            type Err = ConfigError;

            fn from_str(s: &str) -> Result<Self, ConfigError> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($word => Ok(Self::$variant),)+
                    _ => Err(ConfigError::new(format!(
                        "invalid {} {:?}: expected one of {}",
                        $what,
                        s,
                        Self::WORDS.join(", ")
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let word = String::deserialize(d)?;
                word.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

word_enum!(
    /// Language of error hints.
    Locale, "locale", {
        /// English.
        En => "en",
        /// Spanish.
        Es => "es",
    }
);

word_enum!(
    /// Which HTTP statuses JSON-RPC errors get (ERRORS.md, "HTTP status on the MCP endpoint").
    ErrorStatusMode, "error_status", {
        /// 200 for guard and tool errors (401 only for `-32001`): what SDK clients can read.
        Compatible => "compatible",
        /// Also 403/429 for scope, client and rate errors, for proxies that act on statuses.
        Semantic => "semantic",
    }
);

word_enum!(
    /// How a `tools/call` refused by a guard the model can act on (unknown or retired tool,
    /// rate limit, scope, plan, guardrail, idempotency) is answered.
    GuardChannel, "guard_channel", {
        /// A JSON-RPC error (ERRORS.md, "Two channels"): the default contract.
        JsonRpc => "jsonrpc",
        /// An `isError` tool result carrying the same envelope and the JSON-RPC code it
        /// would have had, which agent hosts hand to the model.
        ToolResult => "tool_result",
    }
);

word_enum!(
    /// The header a trusted reverse proxy names the client address in.
    ClientAddressHeader, "client_address_header", {
        /// `X-Forwarded-For: client, proxy1, …` (nginx, HAProxy, most load balancers).
        XForwardedFor => "x-forwarded-for",
        /// RFC 7239 `Forwarded: for=client, for=proxy1`.
        Forwarded => "forwarded",
    }
);

word_enum!(
    /// Log line format.
    LogFormat, "log format", {
        /// Human-readable lines.
        Human => "human",
        /// One JSON object per line.
        Json => "json",
    }
);

word_enum!(
    /// Most verbose log level emitted.
    LogLevel, "log level", {
        /// Errors only.
        Error => "error",
        /// Warnings and errors.
        Warn => "warn",
        /// Normal operation (default).
        Info => "info",
        /// Debugging detail.
        Debug => "debug",
        /// Everything.
        Trace => "trace",
    }
);

/// Settings the CLI takes as flags; they override the file and the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--database`
    pub database: Option<PathBuf>,
    /// `--locale`
    pub locale: Option<String>,
    /// `--listen`
    pub listen: Option<String>,
    /// `--conformance-pack`
    pub conformance_pack: Option<bool>,
    /// `--log-level`
    pub log_level: Option<String>,
    /// `--log-format`
    pub log_format: Option<String>,
    /// `--allow-non-loopback`
    pub allow_non_loopback: Option<bool>,
    /// `--dev-credential`: development mode's credential (public id).
    pub dev_credential: Option<String>,
}

/// The validated, effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
    /// The database: an SQLite file (relative paths are relative to the working
    /// directory) or a PostgreSQL URL.
    pub database: Database,
    /// Language of error hints; `None` means the company's locale.
    pub locale: Option<Locale>,
    /// `[stdio]`
    pub stdio: StdioConfig,
    /// `[http]`
    pub http: HttpConfig,
    /// `[log]`
    pub log: LogConfig,
    /// `[tools]`
    pub tools: ToolsConfig,
    /// `[dev]`
    pub dev: DevConfig,
    /// `[store]`
    pub store: StoreConfig,
    /// `[auth]`
    pub auth: AuthConfig,
    /// `[audit]`
    pub audit: AuditConfig,
    /// `[errors]`
    pub errors: ErrorsConfig,
    /// `[console]`
    pub console: ConsoleConfig,
    /// `[oauth_server]`
    pub oauth_server: OAuthServerConfig,
    /// `[telemetry]`: traces over OTLP.
    pub telemetry: TelemetryConfig,
    /// `[[backends]]`: the company's REST APIs and MCP servers behind the gate.
    pub backends: Vec<BackendConfig>,
    /// `[policy]`: the operator's rules on calls (deny, require approval).
    pub policy: PolicyConfig,
}

/// `[errors]`: how errors reach the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorsConfig {
    /// The channel of guard refusals a model can act on, for credentials without an
    /// override of their own.
    pub guard_channel: GuardChannel,
}

/// `[auth]`: credential verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// argon2 verifications started per second across all sources (1..=10000); beyond
    /// it, tokens that are not cached are refused `rate_limited` until the next second.
    pub argon2_per_second: u32,
    /// `[[auth.issuers]]`: the identity providers whose tokens are accepted.
    pub issuers: Vec<IssuerConfig>,
}

/// `[console]`: the operator's console under `/console` on the HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Whether `/console` is served. Unset, it is served when the listener is on a
    /// loopback address (reach it through an SSH tunnel) and not otherwise.
    pub enabled: bool,
    /// A sign-in ends after this long without a request.
    pub idle_timeout: Duration,
}

/// `[audit]`: the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Rows older than this many days are deleted in the background; 0 keeps them forever.
    pub retention_days: u32,
}

/// `[stdio]`: the stdio transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioConfig {
    /// A longer input line is answered with an error; the session continues.
    pub max_line_bytes: usize,
}

/// `[http]`: the Streamable HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Address to bind; loopback unless `allow_non_loopback`.
    pub listen: SocketAddr,
    /// The operator opted in to a non-loopback `listen`.
    pub allow_non_loopback: bool,
    /// Extra allowed `Origin` values (lower-case `scheme://host[:port]`) besides loopback.
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` values (lower-case) besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Requests worked on at once (1..=256); each connection has its own thread.
    pub workers: usize,
    /// Idle lifetime of a handshake-era session.
    pub session_ttl: Duration,
    /// Public base URL for OAuth metadata (no trailing slash), e.g. `https://mcp.example.com`.
    pub public_base_url: Option<String>,
    /// Which HTTP statuses JSON-RPC errors get.
    pub error_status: ErrorStatusMode,
    /// Serve `GET /metrics` (Prometheus text format); off by default.
    pub metrics: bool,
    /// Reverse proxies whose client-address header is believed (default: none).
    pub trusted_proxies: Vec<ProxyRange>,
    /// Which header those proxies name the client in.
    pub client_address_header: ClientAddressHeader,
    /// Open connections at most; at the cap the longest-waiting idle or still-receiving
    /// connection is closed for a new one, or the new one gets 503 `server_busy`.
    pub max_connections: usize,
    /// Deadline for a request's whole head (408 `request_timeout` past it).
    pub head_timeout: Duration,
    /// Deadline for a request's whole body, from the end of its head.
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Most verbose level emitted.
    pub level: LogLevel,
    /// Line format.
    pub format: LogFormat,
}

/// `[tools]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsConfig {
    /// Expose the MCP conformance-suite fixture tools, resources and prompts.
    pub conformance_pack: bool,
}

/// `[dev]`: development-only settings, off by default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DevConfig {
    /// Public id of the credential used for HTTP requests without a token (loopback only).
    pub unauthenticated_credential: Option<String>,
}

/// `[store]`: the database pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// How long a write waits for another writer's lock.
    pub busy_timeout: Duration,
    /// Pooled connections (1..=256).
    pub pool_size: u32,
}

impl Default for Config {
    /// Every setting at its documented default (no file, no overrides).
    fn default() -> Self {
        Self {
            file: None,
            database: Database::Sqlite(PathBuf::from(DEFAULT_DATABASE)),
            locale: None,
            stdio: StdioConfig {
                max_line_bytes: DEFAULT_MAX_BYTES as usize,
            },
            http: HttpConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
                allow_non_loopback: false,
                allowed_origins: Vec::new(),
                allowed_hosts: Vec::new(),
                max_body_bytes: DEFAULT_MAX_BYTES as usize,
                workers: DEFAULT_WORKERS as usize,
                session_ttl: Duration::from_secs(DEFAULT_SESSION_TTL_SECS),
                public_base_url: None,
                error_status: ErrorStatusMode::Compatible,
                metrics: false,
                trusted_proxies: Vec::new(),
                client_address_header: ClientAddressHeader::XForwardedFor,
                max_connections: DEFAULT_MAX_CONNECTIONS as usize,
                head_timeout: Duration::from_millis(DEFAULT_HEAD_TIMEOUT_MS),
                body_timeout: Duration::from_millis(DEFAULT_BODY_TIMEOUT_MS),
                idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            },
            log: LogConfig {
                level: LogLevel::Info,
                format: LogFormat::Human,
            },
            tools: ToolsConfig {
                conformance_pack: false,
            },
            dev: DevConfig::default(),
            store: StoreConfig {
                busy_timeout: Duration::from_millis(DEFAULT_BUSY_TIMEOUT_MS),
                pool_size: DEFAULT_POOL_SIZE as u32,
            },
            auth: AuthConfig {
                argon2_per_second: DEFAULT_ARGON2_PER_SECOND,
                issuers: Vec::new(),
            },
            audit: AuditConfig {
                retention_days: DEFAULT_AUDIT_RETENTION_DAYS as u32,
            },
            errors: ErrorsConfig {
                guard_channel: GuardChannel::JsonRpc,
            },
            console: ConsoleConfig {
                enabled: true,
                idle_timeout: Duration::from_secs(DEFAULT_CONSOLE_IDLE_MINUTES * 60),
            },
            oauth_server: OAuthServerConfig::default(),
            telemetry: TelemetryConfig::default(),
            backends: Vec::new(),
            policy: PolicyConfig::default(),
        }
    }
}

impl Config {
    /// Loads the configuration: `file` (or `TOLLGATE_CONFIG` from `env` when `file` is
    /// `None`; no file at all when neither is given), then the `TOLLGATE_*` variables of
    /// `env`, then `flags`. A named file that does not exist is an error.
    pub fn load(
        file: Option<&Path>,
        env: &[(String, String)],
        flags: &Overrides,
    ) -> Result<Config, ConfigError> {
        reject_unknown_env(env)?;
        let file = config_file(file, env);
        let mut raw = match &file {
            Some(path) => read_file(path)?,
            None => RawConfig::default(),
        };
        apply_env(&mut raw, env)?;
        telemetry::apply_otel_env(&mut raw.telemetry, env)?;
        apply_flags(&mut raw, flags)?;
        let base = file
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
        let backends = std::mem::take(&mut raw.backends);
        let issuers = std::mem::take(&mut raw.auth.issuers);
        let mut config = validate(raw)?;
        config.backends = backend_entries::validate_backends(backends, base.as_deref())?;
        config.auth.issuers = issuer_checks::validate_issuers(issuers, base.as_deref())?;
        config.file = file;
        Ok(config)
    }

    /// [`Config::load`] with this process's environment.
    pub fn from_process(file: Option<&Path>, flags: &Overrides) -> Result<Config, ConfigError> {
        Config::load(file, &process_env()?, flags)
    }

    /// The directory where tollgate keeps what it writes besides the database (the last
    /// good copy of a backend's document): the SQLite file's directory, or, on
    /// PostgreSQL, the working directory (`/var/lib/tollgate` under the packaged service,
    /// the one place it may write).
    pub fn state_dir(&self) -> PathBuf {
        match self.database.file().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The effective configuration as TOML (what `Display` prints).
    pub fn describe(&self) -> String {
        self.to_string()
    }

    fn to_raw(&self) -> RawConfig {
        let http = &self.http;
        RawConfig {
            database: Some(PathBuf::from(self.database.to_string())),
            locale: self.locale,
            stdio: RawStdio {
                max_line_bytes: Some(self.stdio.max_line_bytes as u64),
            },
            http: RawHttp {
                listen: Some(http.listen),
                allow_non_loopback: Some(http.allow_non_loopback),
                allowed_origins: Some(http.allowed_origins.clone()),
                allowed_hosts: Some(http.allowed_hosts.clone()),
                max_body_bytes: Some(http.max_body_bytes as u64),
                workers: Some(http.workers as u64),
                session_ttl_secs: Some(http.session_ttl.as_secs()),
                public_base_url: Some(http.public_base_url.clone().unwrap_or_default()),
                error_status: Some(http.error_status),
                metrics: Some(http.metrics),
                trusted_proxies: Some(http.trusted_proxies.iter().map(|r| r.to_string()).collect()),
                client_address_header: Some(http.client_address_header),
                max_connections: Some(http.max_connections as u64),
                head_timeout_ms: Some(duration_millis(http.head_timeout)),
                body_timeout_ms: Some(duration_millis(http.body_timeout)),
                idle_timeout_ms: Some(duration_millis(http.idle_timeout)),
            },
            log: RawLog {
                level: Some(self.log.level),
                format: Some(self.log.format),
            },
            tools: RawTools {
                conformance_pack: Some(self.tools.conformance_pack),
            },
            dev: RawDev {
                unauthenticated_credential: Some(
                    self.dev
                        .unauthenticated_credential
                        .clone()
                        .unwrap_or_default(),
                ),
            },
            store: RawStore {
                url: None,
                busy_timeout_ms: Some(duration_millis(self.store.busy_timeout)),
                pool_size: Some(u64::from(self.store.pool_size)),
            },
            auth: RawAuth {
                argon2_per_second: Some(u64::from(self.auth.argon2_per_second)),
                issuers: self.auth.issuers.iter().map(IssuerConfig::to_raw).collect(),
            },
            audit: RawAudit {
                retention_days: Some(u64::from(self.audit.retention_days)),
            },
            errors: RawErrors {
                guard_channel: Some(self.errors.guard_channel),
            },
            console: RawConsole {
                enabled: Some(self.console.enabled),
                idle_minutes: Some(self.console.idle_timeout.as_secs() / 60),
            },
            oauth_server: self.oauth_server.to_raw(),
            telemetry: self.telemetry.to_raw(),
            backends: self.backends.iter().map(BackendConfig::to_raw).collect(),
            policy: self.policy.to_raw(),
        }
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(path) => writeln!(f, "# effective configuration (file: {})", path.display())?,
            None => writeln!(f, "# effective configuration (no config file; defaults)")?,
        }
        if self.locale.is_none() {
            writeln!(f, "# locale: not set; error hints use the company's locale")?;
        }
        match toml::to_string(&self.to_raw()) {
            Ok(text) => f.write_str(&text),
            Err(_) => write!(f, "{self:#?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pairs` as the environment `Config::load` reads (shared with the sections' tests).
    pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn write_config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    fn load_err(file: Option<&Path>, vars: &[(&str, &str)], flags: &Overrides) -> String {
        Config::load(file, &env(vars), flags)
            .expect_err("should fail")
            .to_string()
    }

    #[test]
    fn the_state_directory_is_the_databases_or_the_working_directory() {
        let with = |database: &str| Config {
            database: Database::parse(database).expect("database"),
            ..Config::default()
        };
        assert_eq!(
            with("/var/lib/tollgate/tollgate.db").state_dir(),
            PathBuf::from("/var/lib/tollgate")
        );
        assert_eq!(with("tollgate.db").state_dir(), PathBuf::from("."));
        assert_eq!(with("data/t.db").state_dir(), PathBuf::from("data"));
        assert_eq!(
            with("postgres://tollgate@db.internal/tollgate").state_dir(),
            PathBuf::from(".")
        );
    }

    #[test]
    fn defaults_with_no_file() {
        let config = Config::load(None, &[], &Overrides::default()).expect("load");
        assert_eq!(config, Config::default());
        assert_eq!(
            config.database,
            Database::Sqlite(PathBuf::from("tollgate.db"))
        );
        assert_eq!(config.http.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(config.stdio.max_line_bytes, 4_194_304);
        assert_eq!(config.http.workers, 16);
        assert_eq!(config.http.error_status, ErrorStatusMode::Compatible);
        assert_eq!(config.store.busy_timeout, Duration::from_secs(5));
        assert_eq!(config.store.pool_size, 8);
        assert!(!config.tools.conformance_pack);
        assert_eq!(config.dev.unauthenticated_credential, None);
        assert_eq!(config.locale, None);
        assert_eq!(config.auth.argon2_per_second, 20);
        assert!(config.http.trusted_proxies.is_empty());
        assert_eq!(
            config.http.client_address_header,
            ClientAddressHeader::XForwardedFor
        );
    }

    #[test]
    fn trusted_proxies_and_the_argon2_ceiling_are_validated() {
        let (_dir, path) = write_config(
            "[http]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"fd00::/8\"]\n\
             client_address_header = \"forwarded\"\n[auth]\nargon2_per_second = 5\n",
        );
        let config = Config::load(Some(&path), &[], &Overrides::default()).expect("load");
        assert_eq!(config.auth.argon2_per_second, 5);
        assert_eq!(
            config.http.client_address_header,
            ClientAddressHeader::Forwarded
        );
        let proxies = &config.http.trusted_proxies;
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        let trusted = |s: &str| proxies.iter().any(|r| r.contains(ip(s)));
        assert!(trusted("127.0.0.1") && trusted("::ffff:127.0.0.1"));
        assert!(trusted("10.200.3.4") && trusted("fd12::1"));
        assert!(!trusted("127.0.0.2") && !trusted("11.0.0.1") && !trusted("fe80::1"));
        let shown = config.describe();
        assert!(shown.contains("\"10.0.0.0/8\""), "{shown}");
        assert!(shown.contains("\"127.0.0.1\""), "{shown}");

        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_TRUSTED_PROXIES", "10.0.0.0/33")],
            &Overrides::default(),
        );
        assert!(
            message.starts_with("http.trusted_proxies: invalid entry"),
            "{message}"
        );
        let vars = env(&[("TOLLGATE_HTTP_TRUSTED_PROXIES", "192.168.1.0/24, ::1")]);
        let config = Config::load(None, &vars, &Overrides::default()).expect("env");
        assert_eq!(config.http.trusted_proxies.len(), 2);
        let message = load_err(
            None,
            &[("TOLLGATE_AUTH_ARGON2_PER_SECOND", "0")],
            &Overrides::default(),
        );
        assert!(
            message.contains("auth.argon2_per_second = 0 is out of range"),
            "{message}"
        );
    }

    #[test]
    fn file_values_are_read() {
        let (_dir, path) = write_config(
            r#"
            database = "/var/lib/tollgate/t.db"
            locale = "es"
            [stdio]
            max_line_bytes = 2048
            [http]
            listen = "0.0.0.0:9000"
            allow_non_loopback = true
            allowed_origins = ["HTTPS://App.Example.com"]
            workers = 16
            public_base_url = "https://mcp.example.com/"
            error_status = "semantic"
            [log]
            level = "debug"
            format = "json"
            [tools]
            conformance_pack = true
            [store]
            busy_timeout_ms = 250
            pool_size = 2
            "#,
        );
        let config = Config::load(Some(&path), &[], &Overrides::default()).expect("load");
        assert_eq!(config.file.as_deref(), Some(path.as_path()));
        assert_eq!(
            config.database,
            Database::Sqlite(PathBuf::from("/var/lib/tollgate/t.db"))
        );
        assert_eq!(config.locale, Some(Locale::Es));
        assert_eq!(config.stdio.max_line_bytes, 2048);
        assert_eq!(config.http.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(config.http.allowed_origins, vec!["https://app.example.com"]);
        assert_eq!(config.http.workers, 16);
        assert_eq!(
            config.http.public_base_url.as_deref(),
            Some("https://mcp.example.com")
        );
        assert_eq!(config.http.error_status, ErrorStatusMode::Semantic);
        assert_eq!(config.log.level, LogLevel::Debug);
        assert_eq!(config.log.format, LogFormat::Json);
        assert!(config.tools.conformance_pack);
        assert_eq!(config.store.busy_timeout, Duration::from_millis(250));
        assert_eq!(config.store.pool_size, 2);
    }

    #[test]
    fn env_overrides_file_and_flags_override_env() {
        let (_dir, path) = write_config("locale = \"en\"\n[log]\nlevel = \"warn\"\n");
        let vars = env(&[
            ("TOLLGATE_LOCALE", "es"),
            ("TOLLGATE_LOG_LEVEL", "trace"),
            ("TOLLGATE_HTTP_WORKERS", "8"),
            ("TOLLGATE_DATABASE", "from-env.db"),
        ]);
        let config = Config::load(Some(&path), &vars, &Overrides::default()).expect("load");
        assert_eq!(config.locale, Some(Locale::Es));
        assert_eq!(config.log.level, LogLevel::Trace);
        assert_eq!(config.http.workers, 8);
        assert_eq!(
            config.database,
            Database::Sqlite(PathBuf::from("from-env.db"))
        );

        let flags = Overrides {
            database: Some(PathBuf::from("from-flag.db")),
            locale: Some("en".into()),
            log_level: Some("error".into()),
            ..Overrides::default()
        };
        let config = Config::load(Some(&path), &vars, &flags).expect("load");
        assert_eq!(config.locale, Some(Locale::En));
        assert_eq!(config.log.level, LogLevel::Error);
        assert_eq!(
            config.database,
            Database::Sqlite(PathBuf::from("from-flag.db"))
        );
        assert_eq!(
            config.http.workers, 8,
            "env still applies where no flag is given"
        );
    }

    #[test]
    fn listener_limits_have_defaults_and_are_validated() {
        let config = Config::load(None, &[], &Overrides::default()).expect("defaults");
        assert_eq!(config.http.max_connections, 512);
        assert_eq!(config.http.head_timeout, Duration::from_secs(10));
        assert_eq!(config.http.body_timeout, Duration::from_secs(30));
        assert_eq!(config.http.idle_timeout, Duration::from_secs(60));
        let (_dir, path) = write_config(
            "[http]\nmax_connections = 8\nhead_timeout_ms = 1000\nbody_timeout_ms = 2000\n",
        );
        let vars = env(&[("TOLLGATE_HTTP_IDLE_TIMEOUT_MS", "3000")]);
        let config = Config::load(Some(&path), &vars, &Overrides::default()).expect("load");
        assert_eq!(config.http.max_connections, 8);
        assert_eq!(config.http.head_timeout, Duration::from_secs(1));
        assert_eq!(config.http.body_timeout, Duration::from_secs(2));
        assert_eq!(config.http.idle_timeout, Duration::from_secs(3));
        for (var, value, key) in [
            (
                "TOLLGATE_HTTP_MAX_CONNECTIONS",
                "0",
                "http.max_connections = 0",
            ),
            (
                "TOLLGATE_HTTP_HEAD_TIMEOUT_MS",
                "5",
                "http.head_timeout_ms = 5",
            ),
            (
                "TOLLGATE_HTTP_BODY_TIMEOUT_MS",
                "99",
                "http.body_timeout_ms = 99",
            ),
        ] {
            let message = Config::load(None, &env(&[(var, value)]), &Overrides::default())
                .expect_err("out of range")
                .to_string();
            assert!(message.contains(key), "{message}");
            assert!(message.contains(var), "{message}");
        }
    }

    #[test]
    fn tollgate_config_env_names_the_file() {
        let (_dir, path) = write_config("[http]\nworkers = 3\n");
        let vars = env(&[("TOLLGATE_CONFIG", path.to_str().expect("utf-8"))]);
        let config = Config::load(None, &vars, &Overrides::default()).expect("load");
        assert_eq!(config.http.workers, 3);
        assert_eq!(config.file.as_deref(), Some(path.as_path()));
    }

    #[test]
    fn missing_named_file_is_an_error() {
        let message = load_err(
            Some(Path::new("/nonexistent/tollgate.toml")),
            &[],
            &Overrides::default(),
        );
        assert_eq!(
            message,
            "config file /nonexistent/tollgate.toml does not exist"
        );
    }

    #[test]
    fn unknown_key_names_the_key_and_the_valid_ones() {
        let (_dir, path) = write_config("[http]\nlisten = \"127.0.0.1:1\"\nworker = 3\n");
        let message = load_err(Some(&path), &[], &Overrides::default());
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("line 3"), "{message}");
        assert!(message.contains("unknown field `worker`"), "{message}");
        for valid in [
            "`listen`",
            "`workers`",
            "`max_body_bytes`",
            "`error_status`",
        ] {
            assert!(message.contains(valid), "{message}");
        }

        let (_dir, path) = write_config("databse = \"x.db\"\n");
        let message = load_err(Some(&path), &[], &Overrides::default());
        assert!(message.contains("unknown field `databse`"), "{message}");
        assert!(message.contains("`database`"), "{message}");
        assert!(message.contains("`store`"), "{message}");
    }

    #[test]
    fn unknown_tollgate_env_var_is_rejected() {
        let message = load_err(None, &[("TOLLGATE_WORKERS", "2")], &Overrides::default());
        assert!(
            message.starts_with("unknown environment variable TOLLGATE_WORKERS; known: "),
            "{message}"
        );
        assert!(message.contains("TOLLGATE_HTTP_WORKERS"), "{message}");
        assert!(message.contains("TOLLGATE_TOKEN_FILE"), "{message}");
        let ok = env(&[("TOLLGATE_TOKEN", "tg_live_x_y"), ("OTHER_VAR", "1")]);
        assert!(Config::load(None, &ok, &Overrides::default()).is_ok());
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_WORKERS", "many")],
            &Overrides::default(),
        );
        assert_eq!(
            message,
            "TOLLGATE_HTTP_WORKERS: expected a non-negative integer, got \"many\""
        );
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_ALLOW_NON_LOOPBACK", "maybe")],
            &Overrides::default(),
        );
        assert!(
            message.starts_with("TOLLGATE_HTTP_ALLOW_NON_LOOPBACK: "),
            "{message}"
        );
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_WORKERS", "0")],
            &Overrides::default(),
        );
        assert!(
            message.contains("http.workers = 0 is out of range"),
            "{message}"
        );
        assert!(message.contains("TOLLGATE_HTTP_WORKERS"), "{message}");
    }

    #[test]
    fn non_loopback_listen_needs_the_allow_flag() {
        let flags = Overrides {
            listen: Some("0.0.0.0:8787".into()),
            ..Overrides::default()
        };
        let message = load_err(None, &[], &flags);
        assert!(message.contains("not a loopback address"), "{message}");
        assert!(message.contains("allow_non_loopback"), "{message}");

        let allowed = Overrides {
            allow_non_loopback: Some(true),
            ..flags.clone()
        };
        let config = Config::load(None, &[], &allowed).expect("allowed");
        assert_eq!(config.http.listen.to_string(), "0.0.0.0:8787");

        let ipv6 = Overrides {
            listen: Some("[::1]:9000".into()),
            ..Overrides::default()
        };
        assert!(Config::load(None, &[], &ipv6).is_ok());
    }

    #[test]
    fn dev_mode_is_refused_off_loopback() {
        let vars = [
            (
                "TOLLGATE_DEV_UNAUTHENTICATED_CREDENTIAL",
                "abcd1234efgh5678",
            ),
            ("TOLLGATE_HTTP_LISTEN", "10.0.0.5:8787"),
            ("TOLLGATE_HTTP_ALLOW_NON_LOOPBACK", "true"),
        ];
        let message = load_err(None, &vars, &Overrides::default());
        assert!(
            message.contains("development mode only runs on loopback"),
            "{message}"
        );

        let local = env(&vars[..1]);
        let config = Config::load(None, &local, &Overrides::default()).expect("local");
        assert_eq!(
            config.dev.unauthenticated_credential.as_deref(),
            Some("abcd1234efgh5678")
        );
        let token = [(
            "TOLLGATE_DEV_UNAUTHENTICATED_CREDENTIAL",
            "tg_live_abc_secret",
        )];
        let message = load_err(None, &token, &Overrides::default());
        assert!(message.contains("not a full token"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn locale_fr_is_rejected_everywhere() {
        let expected = "invalid locale \"fr\": expected one of en, es";
        let (_dir, path) = write_config("locale = \"fr\"\n");
        let message = load_err(Some(&path), &[], &Overrides::default());
        assert!(message.contains(expected), "{message}");
        assert!(message.contains("line 1"), "{message}");

        let message = load_err(None, &[("TOLLGATE_LOCALE", "fr")], &Overrides::default());
        assert_eq!(message, format!("TOLLGATE_LOCALE: {expected}"));

        let flags = Overrides {
            locale: Some("fr".into()),
            ..Overrides::default()
        };
        assert_eq!(load_err(None, &[], &flags), format!("--locale: {expected}"));
    }

    #[test]
    fn size_limits_are_checked() {
        let (_dir, path) = write_config("[stdio]\nmax_line_bytes = 100\n");
        let message = load_err(Some(&path), &[], &Overrides::default());
        assert!(
            message.contains("stdio.max_line_bytes = 100 is out of range"),
            "{message}"
        );
        assert!(message.contains("at least 1024"), "{message}");
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_MAX_BODY_BYTES", "1023")],
            &Overrides::default(),
        );
        assert!(message.contains("http.max_body_bytes = 1023"), "{message}");
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_WORKERS", "257")],
            &Overrides::default(),
        );
        assert!(message.contains("between 1 and 256"), "{message}");
    }

    #[test]
    fn metrics_switch_is_off_by_default_and_set_by_file_or_env() {
        let config = Config::load(None, &[], &Overrides::default()).expect("load");
        assert!(!config.http.metrics);
        let (_dir, path) = write_config("[http]\nmetrics = true\n");
        let config = Config::load(Some(&path), &[], &Overrides::default()).expect("load");
        assert!(config.http.metrics);
        assert!(
            config.describe().contains("metrics = true"),
            "{}",
            config.describe()
        );
        let off = env(&[("TOLLGATE_HTTP_METRICS", "off")]);
        let config = Config::load(Some(&path), &off, &Overrides::default()).expect("load");
        assert!(!config.http.metrics, "the environment overrides the file");
        let message = load_err(
            None,
            &[("TOLLGATE_HTTP_METRICS", "sometimes")],
            &Overrides::default(),
        );
        assert_eq!(
            message,
            "TOLLGATE_HTTP_METRICS: expected true or false, got \"sometimes\""
        );
        let (_dir, path) = write_config("[http]\nmetrics = \"yes\"\n");
        let message = load_err(Some(&path), &[], &Overrides::default());
        assert!(message.contains("metrics"), "{message}");
    }

    #[test]
    fn describe_round_trips_through_load() {
        let flags = Overrides {
            locale: Some("es".into()),
            conformance_pack: Some(true),
            ..Overrides::default()
        };
        let vars = env(&[("TOLLGATE_HTTP_PUBLIC_BASE_URL", "https://mcp.example.com")]);
        let config = Config::load(None, &vars, &flags).expect("load");
        let text = config.describe();
        assert!(text.contains("conformance_pack = true"), "{text}");
        let (_dir, path) = write_config(&text);
        let reloaded = Config::load(Some(&path), &[], &Overrides::default()).expect("reload");
        assert_eq!(
            Config {
                file: None,
                ..reloaded
            },
            config
        );
    }

    #[test]
    fn describe_round_trips_backends_of_both_kinds() {
        let (_dir, path) = write_config(
            "[[backends]]\nname = \"erp\"\nkind = \"openapi\"\nspec = \"erp.yaml\"\n\
             auth = { bearer_file = \"erp.token\" }\n\
             [backends.tools.erp_purge]\nenabled = false\n\n\
             [[backends]]\nname = \"files\"\nkind = \"mcp\"\ncommand = \"node\"\n\n\
             [[backends]]\nname = \"vendor\"\nkind = \"mcp\"\nurl = \"https://v.example.com/mcp\"\n\
             headers = { Authorization = { file = \"vendor.auth\" } }\n",
        );
        let config = Config::load(Some(&path), &[], &Overrides::default()).expect("load");
        let text = config.describe();
        assert!(
            text.contains("[[backends]]\nkind = \"openapi\"\nname = \"erp\""),
            "{text}"
        );
        let (_dir, again) = write_config(&text);
        let reloaded = Config::load(Some(&again), &[], &Overrides::default()).expect("reload");
        assert_eq!(reloaded.backends, config.backends);
    }

    #[test]
    fn audit_retention_defaults_to_90_days_and_0_keeps_forever() {
        let config = Config::load(None, &[], &Overrides::default()).expect("defaults");
        assert_eq!(config.audit.retention_days, 90);
        let forever = env(&[("TOLLGATE_AUDIT_RETENTION_DAYS", "0")]);
        let config = Config::load(None, &forever, &Overrides::default()).expect("0");
        assert_eq!(config.audit.retention_days, 0);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[audit]\nretention_days = 400000\n").expect("write");
        let err = Config::load(Some(&path), &[], &Overrides::default()).expect_err("too long");
        assert!(
            err.message()
                .starts_with("audit.retention_days = 400000 is out of range"),
            "{err}"
        );
        assert!(
            err.message().contains("TOLLGATE_AUDIT_RETENTION_DAYS"),
            "{err}"
        );
    }

    #[test]
    fn the_guard_channel_defaults_to_jsonrpc_and_takes_two_words() {
        let config = Config::load(None, &[], &Overrides::default()).expect("defaults");
        assert_eq!(config.errors.guard_channel, GuardChannel::JsonRpc);
        let result = env(&[("TOLLGATE_ERRORS_GUARD_CHANNEL", "tool_result")]);
        let config = Config::load(None, &result, &Overrides::default()).expect("tool_result");
        assert_eq!(config.errors.guard_channel, GuardChannel::ToolResult);
        assert!(
            config
                .describe()
                .contains("[errors]\nguard_channel = \"tool_result\"")
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[errors]\nguard_channel = \"result\"\n").expect("write");
        let err = Config::load(Some(&path), &[], &Overrides::default()).expect_err("bad word");
        assert!(
            err.message()
                .contains("invalid guard_channel \"result\": expected one of jsonrpc, tool_result"),
            "{err}"
        );
    }
}
