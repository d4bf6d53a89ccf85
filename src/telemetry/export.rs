//! The export pipeline: OpenTelemetry's SDK with the configured sampler and resource, its
//! batch processor (one thread of its own) and the OTLP/HTTP exporter (protobuf), started
//! once by [`start`] and flushed when the returned [`Exporting`] is dropped.
//!
//! Export never blocks a call. A finished span is handed to the batch processor's bounded
//! queue; when [`TelemetryConfig::queue`] spans are already waiting or being sent — the
//! collector is down, slow, or never answers within the export deadline — the span is
//! dropped and counted, as is every span of a batch the collector refused. The counts are
//! on `/metrics` ([`span_counts`]). After a failed export or a full queue, spans are not
//! recorded at all for [`PAUSE`] (each request counted as a dropped span): a collector
//! that is down costs the calls nothing, rather than the work of spans thrown away.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler as SdkSampler, SdkTracerProvider, Span,
    SpanData, SpanExporter, SpanProcessor,
};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{Sampler, TelemetryConfig};

/// How long spans are not recorded after an export failed or the queue filled: a collector
/// that cannot take them costs the calls nothing meanwhile. The first batch after the pause
/// tries again.
const PAUSE: Duration = Duration::from_secs(30);

/// Until when recording is paused, in nanoseconds since [`since_start`]'s origin; 0: not.
static PAUSED_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds since the first time this was asked (a monotonic origin of the process).
fn since_start() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Whether recording is paused now (one atomic load while it is not).
pub(super) fn paused() -> bool {
    let until = PAUSED_UNTIL.load(Ordering::Relaxed);
    until != 0 && since_start() < until
}

/// Pauses recording for [`PAUSE`] from now.
fn pause() {
    let until = since_start().saturating_add(u64::try_from(PAUSE.as_nanos()).unwrap_or(u64::MAX));
    PAUSED_UNTIL.store(until.max(1), Ordering::Relaxed);
}

/// Counts one span not recorded because recording is paused.
pub(super) fn count_unrecorded() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// Spans sent in one export at most.
const BATCH: usize = 512;
/// How long a clean exit waits for the spans still queued to be sent.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

static EXPORTED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED_EXPORTS: AtomicU64 = AtomicU64::new(0);

/// What this process has done with its spans so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanCounts {
    /// Spans the collector took.
    pub exported: u64,
    /// Spans dropped: the queue was full, or the collector refused or did not answer.
    pub dropped: u64,
    /// Exports that failed.
    pub failed_exports: u64,
}

/// The span counts of this process.
pub fn span_counts() -> SpanCounts {
    SpanCounts {
        exported: EXPORTED.load(Ordering::Relaxed),
        dropped: DROPPED.load(Ordering::Relaxed),
        failed_exports: FAILED_EXPORTS.load(Ordering::Relaxed),
    }
}

/// The running pipeline; dropping it sends what is queued (waiting at most [`FLUSH_WAIT`]).
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        super::ENABLED.store(false, Ordering::Relaxed);
        let _ = self.provider.shutdown_with_timeout(FLUSH_WAIT);
    }
}

/// The layer that turns spans into OpenTelemetry spans, for the subscriber `S`.
pub type SpanLayer<S> = Box<dyn Layer<S> + Send + Sync>;

/// The layer that turns tollgate's `request` and `backend call` spans into OpenTelemetry
/// spans (their warnings and errors become span events), and the pipeline behind it; `None`
/// when `config` names no endpoint.
pub fn start<S>(config: &TelemetryConfig) -> Result<Option<(SpanLayer<S>, Exporting)>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let Some(endpoint) = &config.endpoint else {
        return Ok(None);
    };
    let headers: HashMap<String, String> = config
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // The exporter's client speaks TLS to an https:// collector with the process's
    // provider (ring, as every other client of tollgate's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(config.timeout)
        .with_headers(headers)
        .build()
        .map_err(|e| format!("cannot start the span exporter for {endpoint}: {e}"))?;
    let in_queue = Arc::new(AtomicUsize::new(0));
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(config.queue)
        .with_max_export_batch_size(BATCH.min(config.queue))
        .with_scheduled_delay(config.schedule_delay)
        .build();
    let processor = Bounded {
        inner: BatchSpanProcessor::new(
            Counted {
                inner: exporter,
                in_queue: Arc::clone(&in_queue),
                endpoint: endpoint.clone(),
                failing: AtomicBool::new(false),
            },
            batch,
        ),
        in_queue,
        capacity: config.queue,
    };
    let mut resource = Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    for (key, value) in &config.resource_attributes {
        resource = resource.with_attribute(KeyValue::new(key.clone(), value.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(config.sampler))
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("tollgate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Nothing reads the thread's current OpenTelemetry context (spans are parented on
        // tracing's, backends get the context of their span): entering and leaving a span
        // need not switch it.
        .with_context_activation(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            if meta.is_span() {
                // The spans made to be exported: those that name their kind. A request's
                // log span without one (telemetry paused) costs the exporter nothing.
                matches!(meta.name(), "request" | "backend call")
                    && meta.fields().field("otel.kind").is_some()
            } else {
                *meta.level() <= tracing::Level::WARN
            }
        }));
    super::ENABLED.store(true, Ordering::Relaxed);
    super::spans::record_arguments(config.record_arguments);
    Ok(Some((Box::new(layer), Exporting { provider })))
}

fn sampler(sampler: Sampler) -> SdkSampler {
    match sampler {
        Sampler::AlwaysOn => SdkSampler::AlwaysOn,
        Sampler::AlwaysOff => SdkSampler::AlwaysOff,
        Sampler::TraceIdRatio(ratio) => SdkSampler::TraceIdRatioBased(ratio),
        Sampler::ParentBasedAlwaysOn => SdkSampler::ParentBased(Box::new(SdkSampler::AlwaysOn)),
        Sampler::ParentBasedAlwaysOff => SdkSampler::ParentBased(Box::new(SdkSampler::AlwaysOff)),
        Sampler::ParentBasedTraceIdRatio(ratio) => {
            SdkSampler::ParentBased(Box::new(SdkSampler::TraceIdRatioBased(ratio)))
        }
    }
}

/// The SDK's batch processor behind a bound of its own: at most `capacity` spans waiting
/// or being sent; past it a span is dropped here and counted (the SDK's own queue, of the
/// same size, then never fills, and its drops would not be counted).
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    in_queue: Arc<AtomicUsize>,
    capacity: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.in_queue.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.in_queue.fetch_sub(1, Ordering::AcqRel);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            pause();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what it sent and what it could not.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    in_queue: Arc<AtomicUsize>,
    endpoint: String,
    /// Whether the last export failed: a failure is logged once, when it starts.
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.in_queue.fetch_sub(spans, Ordering::AcqRel);
        let count = u64::try_from(spans).unwrap_or(u64::MAX);
        match &result {
            Ok(()) => {
                EXPORTED.fetch_add(count, Ordering::Relaxed);
                PAUSED_UNTIL.store(0, Ordering::Relaxed);
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint = %self.endpoint, "spans are exported again");
                }
            }
            Err(e) => {
                DROPPED.fetch_add(count, Ordering::Relaxed);
                FAILED_EXPORTS.fetch_add(1, Ordering::Relaxed);
                pause();
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        error = %e,
                        "cannot export spans; they are dropped and counted until the collector answers"
                    );
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
