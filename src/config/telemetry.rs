//! `[telemetry]`: traces exported over OTLP/HTTP (protobuf), configured by the file or by the
//! standard OpenTelemetry variables, which win over the file as `TOLLGATE_*` ones do:
//! `OTEL_SDK_DISABLED`, `OTEL_EXPORTER_OTLP_ENDPOINT` (the base; `/v1/traces` is added),
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is), `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`http/protobuf` only), `OTEL_EXPORTER_OTLP_HEADERS` / `…_TRACES_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT` / `…_TRACES_TIMEOUT`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` / `_ARG`, `OTEL_BSP_SCHEDULE_DELAY`,
//! `OTEL_BSP_MAX_QUEUE_SIZE`.
//!
//! Off unless an endpoint is given (and not disabled): nothing is exported by default.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, in_range};

/// The typed `[telemetry]` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Where spans are sent (the full URL of the traces endpoint); `None`: not exported.
    pub endpoint: Option<String>,
    /// Headers sent with every export (an API key of the collector: never shown).
    pub headers: BTreeMap<String, String>,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Further resource attributes.
    pub resource_attributes: BTreeMap<String, String>,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// The deadline of one export.
    pub timeout: Duration,
    /// Spans waiting for export at most; past it, spans are dropped and counted.
    pub queue: usize,
    /// How long spans wait to be sent in a batch.
    pub schedule_delay: Duration,
    /// Whether a tool call's arguments and result are recorded on its span (secrets of the
    /// call's backend are never recorded): opt-in, as they may hold personal data.
    pub record_arguments: bool,
}

/// `OTEL_TRACES_SAMPLER`, with its argument where it takes one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// This share of traces, chosen by trace id.
    TraceIdRatio(f64),
    /// As the caller's trace says; a new trace always.
    ParentBasedAlwaysOn,
    /// As the caller's trace says; a new trace never.
    ParentBasedAlwaysOff,
    /// As the caller's trace says; this share of new traces.
    ParentBasedTraceIdRatio(f64),
}

// A ratio is checked to be within 0..=1 when read, so it is never NaN.
impl Eq for Sampler {}

impl Sampler {
    /// Its name in `OTEL_TRACES_SAMPLER`.
    pub fn name(self) -> &'static str {
        match self {
            Sampler::AlwaysOn => "always_on",
            Sampler::AlwaysOff => "always_off",
            Sampler::TraceIdRatio(_) => "traceidratio",
            Sampler::ParentBasedAlwaysOn => "parentbased_always_on",
            Sampler::ParentBasedAlwaysOff => "parentbased_always_off",
            Sampler::ParentBasedTraceIdRatio(_) => "parentbased_traceidratio",
        }
    }

    /// Its ratio, for the samplers that take one.
    pub fn ratio(self) -> Option<f64> {
        match self {
            Sampler::TraceIdRatio(r) | Sampler::ParentBasedTraceIdRatio(r) => Some(r),
            _ => None,
        }
    }

    fn parse(name: &str, arg: Option<f64>) -> Result<Sampler, String> {
        let ratio = || {
            let r = arg.unwrap_or(1.0);
            if (0.0..=1.0).contains(&r) {
                Ok(r)
            } else {
                Err(format!("the sampler's ratio {r} must be between 0 and 1"))
            }
        };
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatio(ratio()?),
            "parentbased_always_on" => Sampler::ParentBasedAlwaysOn,
            "parentbased_always_off" => Sampler::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => Sampler::ParentBasedTraceIdRatio(ratio()?),
            other => {
                return Err(format!(
                    "unknown sampler {other:?}; known: always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        })
    }
}

const DEFAULT_SERVICE_NAME: &str = "tollgate";
const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_QUEUE: u64 = 2048;
const DEFAULT_SCHEDULE_DELAY_MS: u64 = 5_000;

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            endpoint: None,
            headers: BTreeMap::new(),
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            resource_attributes: BTreeMap::new(),
            sampler: Sampler::ParentBasedAlwaysOn,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            queue: DEFAULT_QUEUE as usize,
            schedule_delay: Duration::from_millis(DEFAULT_SCHEDULE_DELAY_MS),
            record_arguments: false,
        }
    }
}

impl TelemetryConfig {
    /// Whether spans are exported.
    pub fn enabled(&self) -> bool {
        self.endpoint.is_some()
    }

    /// The settings as written back (`config show`): header values are never shown.
    pub(super) fn to_raw(&self) -> RawTelemetry {
        RawTelemetry {
            enabled: Some(self.enabled()),
            endpoint: None,
            traces_endpoint: self.endpoint.clone(),
            headers: self
                .headers
                .keys()
                .map(|name| (name.clone(), "(hidden)".to_owned()))
                .collect(),
            service_name: Some(self.service_name.clone()),
            resource_attributes: self.resource_attributes.clone(),
            sampler: Some(self.sampler.name().to_owned()),
            sampler_arg: self.sampler.ratio(),
            timeout_ms: Some(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)),
            queue: Some(self.queue as u64),
            schedule_delay_ms: Some(
                u64::try_from(self.schedule_delay.as_millis()).unwrap_or(u64::MAX),
            ),
            record_arguments: Some(self.record_arguments),
        }
    }
}

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    /// `false` turns export off even with an endpoint (`OTEL_SDK_DISABLED=true`).
    pub(super) enabled: Option<bool>,
    /// The collector's base URL; `/v1/traces` is added.
    pub(super) endpoint: Option<String>,
    /// The traces endpoint's full URL.
    pub(super) traces_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) service_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) resource_attributes: BTreeMap<String, String>,
    pub(super) sampler: Option<String>,
    pub(super) sampler_arg: Option<f64>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) queue: Option<u64>,
    pub(super) schedule_delay_ms: Option<u64>,
    pub(super) record_arguments: Option<bool>,
}

/// Lays the `OTEL_*` variables of `env` over `raw`.
pub(super) fn apply_otel_env(
    raw: &mut RawTelemetry,
    env: &[(String, String)],
) -> Result<(), ConfigError> {
    let var = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    let fail = |name: &str, why: String| ConfigError::new(format!("{name}: {why}"));
    let millis = |name: &str| -> Result<Option<u64>, ConfigError> {
        var(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| fail(name, format!("{v:?} is not a count of milliseconds")))
            })
            .transpose()
    };
    if let Some(v) = var("OTEL_SDK_DISABLED") {
        match v.to_ascii_lowercase().as_str() {
            "true" => raw.enabled = Some(false),
            "false" => {}
            _ => {
                return Err(fail(
                    "OTEL_SDK_DISABLED",
                    format!("{v:?} is not true or false"),
                ));
            }
        }
    }
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or(var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if let Some(v) = protocol.filter(|v| *v != "http/protobuf") {
        return Err(fail(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            format!("{v:?} is not supported; tollgate exports over http/protobuf"),
        ));
    }
    if let Some(v) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        raw.endpoint = Some(v.to_owned());
        raw.traces_endpoint = None;
    }
    if let Some(v) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        raw.traces_endpoint = Some(v.to_owned());
    }
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(v) = var(name) {
            raw.headers
                .extend(key_values(v).map_err(|why| fail(name, why))?);
        }
    }
    if let Some(v) = var("OTEL_SERVICE_NAME") {
        raw.service_name = Some(v.to_owned());
    }
    if let Some(v) = var("OTEL_RESOURCE_ATTRIBUTES") {
        let pairs = key_values(v).map_err(|why| fail("OTEL_RESOURCE_ATTRIBUTES", why))?;
        raw.resource_attributes.extend(pairs);
    }
    if let Some(v) = var("OTEL_TRACES_SAMPLER") {
        raw.sampler = Some(v.to_owned());
    }
    if let Some(v) = var("OTEL_TRACES_SAMPLER_ARG") {
        let ratio = v
            .parse::<f64>()
            .map_err(|_| fail("OTEL_TRACES_SAMPLER_ARG", format!("{v:?} is not a number")))?;
        raw.sampler_arg = Some(ratio);
    }
    if let Some(ms) =
        millis("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")?.or(millis("OTEL_EXPORTER_OTLP_TIMEOUT")?)
    {
        raw.timeout_ms = Some(ms);
    }
    if let Some(ms) = millis("OTEL_BSP_SCHEDULE_DELAY")? {
        raw.schedule_delay_ms = Some(ms);
    }
    if let Some(v) = var("OTEL_BSP_MAX_QUEUE_SIZE") {
        let size = v
            .parse::<u64>()
            .map_err(|_| fail("OTEL_BSP_MAX_QUEUE_SIZE", format!("{v:?} is not a count")))?;
        raw.queue = Some(size);
    }
    Ok(())
}

/// `key=value,key2=value2`, values percent-decoded (the W3C Baggage form the variables use).
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| format!("the value of {:?} is not UTF-8", key.trim()))?;
            Ok((key.trim().to_owned(), value.into_owned()))
        })
        .collect()
}

/// Checks `[telemetry]`.
pub(super) fn validate_telemetry(raw: RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    let key = |name: &str| format!("telemetry.{name}");
    let endpoint = match (raw.traces_endpoint, raw.endpoint) {
        (Some(url), _) => Some(url),
        (None, Some(base)) => Some(format!("{}/v1/traces", base.trim_end_matches('/'))),
        (None, None) => None,
    };
    if let Some(url) = &endpoint {
        match url::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
            _ => {
                return Err(ConfigError::new(format!(
                    "{}: {url:?} is not an http:// or https:// URL",
                    key("endpoint")
                )));
            }
        }
    }
    if raw.enabled == Some(true) && endpoint.is_none() {
        return Err(ConfigError::new(format!(
            "{} = true needs an endpoint: telemetry.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT",
            key("enabled")
        )));
    }
    let sampler = match raw.sampler {
        Some(name) => Sampler::parse(&name, raw.sampler_arg)
            .map_err(|why| ConfigError::new(format!("{}: {why}", key("sampler"))))?,
        None => Sampler::ParentBasedAlwaysOn,
    };
    let service_name = raw
        .service_name
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    if service_name.trim().is_empty() {
        return Err(ConfigError::new(format!(
            "{} must not be empty",
            key("service_name")
        )));
    }
    let millis = |name: &str, value, default, range| {
        in_range(&key(name), None, value, default, range).map(Duration::from_millis)
    };
    Ok(TelemetryConfig {
        endpoint: endpoint.filter(|_| raw.enabled != Some(false)),
        headers: raw.headers,
        service_name,
        resource_attributes: raw.resource_attributes,
        sampler,
        timeout: millis(
            "timeout_ms",
            raw.timeout_ms,
            DEFAULT_TIMEOUT_MS,
            (100, 600_000),
        )?,
        queue: usize::try_from(in_range(
            &key("queue"),
            None,
            raw.queue,
            DEFAULT_QUEUE,
            (16, 1 << 20),
        )?)
        .unwrap_or(usize::MAX),
        schedule_delay: millis(
            "schedule_delay_ms",
            raw.schedule_delay_ms,
            DEFAULT_SCHEDULE_DELAY_MS,
            (10, 600_000),
        )?,
        record_arguments: raw.record_arguments.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::env;

    fn from_env(pairs: &[(&str, &str)]) -> Result<TelemetryConfig, String> {
        let mut raw = RawTelemetry::default();
        apply_otel_env(&mut raw, &env(pairs)).map_err(|e| e.to_string())?;
        validate_telemetry(raw).map_err(|e| e.to_string())
    }

    #[test]
    fn off_unless_an_endpoint_is_given() {
        let config = from_env(&[]).expect("valid");
        assert!(!config.enabled());
        assert_eq!(config.sampler, Sampler::ParentBasedAlwaysOn);
        assert_eq!(config.service_name, "tollgate");
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_signal_endpoint_is_kept() {
        let base =
            from_env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).expect("valid");
        assert_eq!(
            base.endpoint.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let signal = from_env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9999/custom"),
        ])
        .expect("valid");
        assert_eq!(signal.endpoint.as_deref(), Some("http://b:9999/custom"));
    }

    #[test]
    fn the_sdk_can_be_disabled_with_an_endpoint_set() {
        let config = from_env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ])
        .expect("valid");
        assert!(!config.enabled());
    }

    #[test]
    fn headers_attributes_and_sampler_are_read() {
        let config = from_env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=se%20cret, x-team=ops",
            ),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"),
            ("OTEL_SERVICE_NAME", "gate-eu"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .expect("valid");
        assert_eq!(
            config.headers.get("api-key").map(String::as_str),
            Some("se cret")
        );
        assert_eq!(
            config.headers.get("x-team").map(String::as_str),
            Some("ops")
        );
        assert_eq!(
            config
                .resource_attributes
                .get("deployment.environment")
                .map(String::as_str),
            Some("prod")
        );
        assert_eq!(config.service_name, "gate-eu");
        assert_eq!(config.sampler, Sampler::ParentBasedTraceIdRatio(0.25));
        assert_eq!(config.timeout, Duration::from_millis(2500));
        assert!(!format!("{:?}", config.to_raw().headers).contains("se cret"));
    }

    #[test]
    fn wrong_values_name_their_variable() {
        let err = from_env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).expect_err("grpc");
        assert!(err.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{err}");
        let err = from_env(&[("OTEL_TRACES_SAMPLER", "sometimes")]).expect_err("sampler");
        assert!(
            err.contains("telemetry.sampler") && err.contains("always_on"),
            "{err}"
        );
        let err = from_env(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ])
        .expect_err("ratio");
        assert!(err.contains("between 0 and 1"), "{err}");
        let err = from_env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).expect_err("url");
        assert!(err.contains("telemetry.endpoint"), "{err}");
        let err = from_env(&[("OTEL_BSP_MAX_QUEUE_SIZE", "2")]).expect_err("queue");
        assert!(err.contains("telemetry.queue"), "{err}");
    }
}
