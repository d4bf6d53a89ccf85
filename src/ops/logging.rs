//! Process logging with `tracing`: human or JSON lines, always on stderr, so that stdout
//! stays reserved for MCP messages on the stdio transport.
//!
//! Logging never blocks a call. Each formatted line goes to `tracing-appender`'s
//! non-blocking writer: a bounded queue ([`BUFFERED_LINES`]) that one thread empties into
//! stderr. When the queue is full — stderr is a pipe nobody reads, a stalled journal — the
//! line is dropped and counted ([`dropped_lines`], `tollgate_log_lines_dropped_total` in
//! `/metrics`), as is a line stderr refuses; the next line written is preceded by one
//! saying how many were dropped. The [`LogGuard`] that [`init`] returns flushes what is
//! queued when it is dropped (a clean exit), waiting at most [`FLUSH_WAIT`] for a reader
//! that does not read.
//!
//! Around the library's writer, a `Tally` counts the lines handed over and written. The
//! guard waits on it rather than dropping the library's `WorkerGuard` while lines are
//! queued: that guard, unable to queue its shutdown message behind a full queue, prints to
//! stdout — on the stdio transport, the MCP stream. So the guard stops the intake first,
//! and hands over the library's guard only once the queue is empty (then its shutdown is
//! taken at once); past [`FLUSH_WAIT`] it lets the process end without it.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// Lines queued for stderr at most; past it, lines are dropped (a few MiB at most).
pub const BUFFERED_LINES: usize = 8192;
/// Longest a clean exit waits for the queued lines to be written.
pub const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// How many log lines this process has dropped so far (a full queue, or stderr failing);
/// the count is kept with the other process counters, in [`crate::guards::metrics`].
pub fn dropped_lines() -> u64 {
    crate::guards::metrics::log_lines_dropped()
}

/// The counts of the lines through one writer, shared by the threads that log and the
/// writer thread.
#[derive(Default)]
struct Tally {
    /// Lines handed to the queue (taken or refused by it).
    sent: AtomicU64,
    /// Lines the writer thread is done with (written, or refused by stderr).
    done: AtomicU64,
    /// Lines dropped in all: refused by the queue, by stderr, or after the intake closed.
    dropped: AtomicU64,
    /// The queue's own count of the lines it refused, as far as `dropped` has taken it in.
    queue_refusals_counted: AtomicU64,
    /// Set by the guard: from then on every line is dropped, so that the queue empties.
    closed: AtomicBool,
}

impl Tally {
    /// Counts `lines` more dropped lines, here and in the process metrics.
    fn count_dropped(&self, lines: u64) {
        if lines > 0 {
            self.dropped.fetch_add(lines, Ordering::AcqRel);
            crate::guards::metrics::count_dropped_log_lines(lines);
        }
    }

    /// Takes in the lines the queue refused since last asked (`refused`, its total).
    fn count_queue_refusals(&self, refused: u64) {
        let counted = self
            .queue_refusals_counted
            .fetch_max(refused, Ordering::AcqRel);
        self.count_dropped(refused.saturating_sub(counted));
    }

    /// Whether every line the queue took is written (`refused`: the queue's total).
    fn drained(&self, refused: u64) -> bool {
        let sent = self.sent.load(Ordering::Acquire);
        self.done.load(Ordering::Acquire) + refused >= sent
    }
}

/// The `MakeWriter` of the subscriber: every event is one line handed to the queue.
struct Sink {
    queue: NonBlocking,
    refusals: ErrorCounter,
    tally: Arc<Tally>,
}

/// The writer of one event: hands its line over and never waits.
struct SinkWriter<'a> {
    queue: NonBlocking,
    sink: &'a Sink,
}

impl Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let tally = &self.sink.tally;
        if tally.closed.load(Ordering::Acquire) {
            tally.count_dropped(1);
            return Ok(buf.len());
        }
        // Counted before it is queued: the guard may think a line still queued, never
        // the queue empty while a line is in it.
        tally.sent.fetch_add(1, Ordering::AcqRel);
        let written = self.queue.write(buf);
        tally.count_queue_refusals(refusals(&self.sink.refusals));
        written
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter<'a>;

    fn make_writer(&'a self) -> SinkWriter<'a> {
        SinkWriter {
            queue: self.queue.clone(),
            sink: self,
        }
    }
}

/// The queue's count of refused lines.
fn refusals(counter: &ErrorCounter) -> u64 {
    u64::try_from(counter.dropped_lines()).unwrap_or(u64::MAX)
}

/// What the writer thread writes to: `out` (stderr), each line preceded by the count of
/// the lines dropped since the last one written, when there are any.
struct Lines<W> {
    out: W,
    tally: Arc<Tally>,
    format: LogFormat,
    /// The dropped lines already reported.
    reported: u64,
}

impl<W: Write> Write for Lines<W> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.write_all(line).map(|()| line.len())
    }

    /// Writes one line (the writer thread hands over one at a time).
    fn write_all(&mut self, line: &[u8]) -> io::Result<()> {
        self.report_drops();
        let written = self.out.write_all(line);
        if written.is_err() {
            self.tally.count_dropped(1);
        }
        self.tally.done.fetch_add(1, Ordering::AcqRel);
        written
    }

    // stderr is not buffered: there is nothing to flush (and a failed flush would only
    // make the library print to stderr).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Lines<W> {
    /// Writes the "N log lines dropped" line when lines were dropped since the last one.
    fn report_drops(&mut self) {
        let dropped = self.tally.dropped.load(Ordering::Acquire);
        if dropped == self.reported {
            return;
        }
        let notice = drop_notice(dropped - self.reported, self.format, SystemTime::now());
        if self.out.write_all(notice.as_bytes()).is_ok() {
            self.reported = dropped;
        }
    }
}

/// Keeps the log writer going; dropping it flushes the queued lines (bounded by
/// [`FLUSH_WAIT`]). Hold it for as long as the process logs.
#[must_use = "dropping the guard flushes the log at once"]
pub struct LogGuard {
    writer: Option<(WorkerGuard, ErrorCounter)>,
    tally: Arc<Tally>,
    /// How long the drop waits for the queue to empty ([`FLUSH_WAIT`]).
    flush_wait: Duration,
    /// The span exporter, flushed first when the guard is dropped.
    exporting: Option<crate::telemetry::Exporting>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        // The last spans first: the exporter may log that it could not send them.
        drop(self.exporting.take());
        let Some((worker, refusals)) = self.writer.take() else {
            return;
        };
        self.tally.closed.store(true, Ordering::Release);
        let deadline = Instant::now() + self.flush_wait;
        while !self.tally.drained(self::refusals(&refusals)) {
            if Instant::now() >= deadline {
                // stderr does not take the lines: end without the library's guard, whose
                // shutdown message would find the queue full (see the module's header).
                std::mem::forget(worker);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(worker);
    }
}

/// Installs the global subscriber; `RUST_LOG` refines the configured level when set. With
/// `telemetry` naming an endpoint, the spans of requests are exported too (the guard keeps
/// the exporter running, and flushes it when dropped); an exporter that cannot start is
/// reported and the process logs without it.
pub fn init(config: &LogConfig, telemetry: Option<&TelemetryConfig>) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // The MCP client library logs every message of an upstream session at info: at the
        // default level only its warnings are kept.
        match config.level.as_str() {
            "info" => EnvFilter::new("info,rmcp=warn"),
            level => EnvFilter::new(level),
        }
    });
    let tally = Arc::new(Tally::default());
    let Some((queue, worker)) = start_writer(Lines {
        out: io::stderr(),
        tally: Arc::clone(&tally),
        format: config.format,
        reported: 0,
    }) else {
        return log_directly(filter, config.format);
    };
    let refusals = queue.error_counter();
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(Sink {
            queue,
            refusals: refusals.clone(),
            tally: Arc::clone(&tally),
        })
        // Colour codes only for a person at a terminal, never into the journal or a file.
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .with_target(false);
    let mut layers: Vec<Box<dyn Layer<Filtered> + Send + Sync>> = vec![match config.format {
        LogFormat::Json => lines.json().boxed(),
        LogFormat::Human => lines.boxed(),
    }];
    let (exporting, failure) = match telemetry.map(crate::telemetry::start::<Filtered>) {
        Some(Ok(Some((layer, exporting)))) => {
            layers.push(layer);
            (Some(exporting), None)
        }
        Some(Err(e)) => (None, Some(e)),
        Some(Ok(None)) | None => (None, None),
    };
    // A second init (tests embedding the library) keeps the first subscriber.
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(layers)
        .try_init();
    if let Some(e) = failure {
        tracing::error!("{e}; spans are not exported");
    }
    LogGuard {
        writer: installed.is_ok().then_some((worker, refusals)),
        tally,
        flush_wait: FLUSH_WAIT,
        exporting,
    }
}

/// The subscriber under the log formatter and the span exporter: the registry behind the
/// level filter.
type Filtered = tracing_subscriber::layer::Layered<EnvFilter, tracing_subscriber::Registry>;

/// The lossy queue and its writer thread, writing to `lines`; `None` when no thread can
/// be started (the library then panics, which is caught here).
fn start_writer(lines: Lines<io::Stderr>) -> Option<(NonBlocking, WorkerGuard)> {
    let builder = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("log-writer");
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.finish(lines))).ok()
}

/// Without a writer thread nothing would empty a queue: log straight to stderr.
fn log_directly(filter: EnvFilter, format: LogFormat) -> LogGuard {
    eprintln!("tollgate: cannot start the log writer; logging directly to stderr");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Human => builder.try_init(),
    };
    LogGuard {
        writer: None,
        tally: Arc::default(),
        flush_wait: FLUSH_WAIT,
        exporting: None,
    }
}

/// The line reporting `count` dropped lines, in the configured format.
fn drop_notice(count: u64, format: LogFormat, now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    let stamp = crate::ops::admin::format_time(secs);
    let stamp = format!(
        "{}.{:06}Z",
        stamp.trim_end_matches('Z'),
        since.subsec_micros()
    );
    let message = "log lines dropped: the reader of the log did not keep up";
    match format {
        LogFormat::Human => format!("{stamp}  WARN {count} {message}\n"),
        LogFormat::Json => format!(
            "{}\n",
            serde_json::json!({"timestamp": stamp, "level": "WARN",
                               "fields": {"message": message, "dropped": count}})
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
    use std::sync::{Mutex, mpsc};

    #[test]
    fn the_notice_says_how_many_lines_were_dropped_in_either_format() {
        let at = UNIX_EPOCH + Duration::from_micros(1_709_210_096_000_042);
        assert_eq!(
            drop_notice(7, LogFormat::Human, at),
            "2024-02-29T12:34:56.000042Z  WARN 7 log lines dropped: the reader of the log \
             did not keep up\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&drop_notice(7, LogFormat::Json, at)).expect("one JSON line");
        assert_eq!(json["fields"]["dropped"], 7);
        assert_eq!(json["level"], "WARN");
    }

    /// An output that holds its first write until the test lets it go, as a pipe nobody
    /// reads holds the writer; it says when that write has begun.
    struct Stalled {
        written: Arc<Mutex<Vec<u8>>>,
        began: Option<SyncSender<()>>,
        release: Option<Receiver<()>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if let (Some(began), Some(release)) = (self.began.take(), self.release.take()) {
                let _ = began.send(());
                let _ = release.recv();
            }
            self.written.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_drops_without_waiting_and_the_next_line_written_reports_it() {
        let written = Arc::new(Mutex::new(Vec::new()));
        let (began, writing) = sync_channel(1);
        let (release, released) = mpsc::channel();
        let tally = Arc::new(Tally::default());
        let out = Stalled {
            written: Arc::clone(&written),
            began: Some(began),
            release: Some(released),
        };
        let lines = Lines {
            out,
            tally: Arc::clone(&tally),
            format: LogFormat::Human,
            reported: 0,
        };
        let (queue, worker) = NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(1)
            .finish(lines);
        let sink = Sink {
            refusals: queue.error_counter(),
            queue,
            tally: Arc::clone(&tally),
        };
        sink.make_writer().write_all(b"one\n").expect("queued");
        writing.recv().expect("the writer holds `one`");
        // `two` fills the queue of one; `three` and `four` find it full.
        for line in ["two\n", "three\n", "four\n"] {
            sink.make_writer()
                .write_all(line.as_bytes())
                .expect("never fails");
        }
        assert_eq!(tally.dropped.load(Ordering::Acquire), 2);
        release.send(()).expect("release");
        let guard = LogGuard {
            writer: Some((worker, sink.refusals.clone())),
            tally: Arc::clone(&tally),
            flush_wait: FLUSH_WAIT,
            exporting: None,
        };
        drop(guard);
        let text = String::from_utf8(written.lock().expect("lock").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "one");
        assert!(
            lines[1].ends_with(" WARN 2 log lines dropped: the reader of the log did not keep up"),
            "{text}"
        );
        assert_eq!(lines[2], "two");
        // After the guard, lines are dropped and counted, never queued.
        sink.make_writer()
            .write_all(b"five\n")
            .expect("never fails");
        assert_eq!(tally.dropped.load(Ordering::Acquire), 3);
    }

    #[test]
    fn the_guard_gives_up_on_a_writer_that_never_writes() {
        let (began, writing) = sync_channel(1);
        let (_release, released) = mpsc::channel::<()>();
        let tally = Arc::new(Tally::default());
        let lines = Lines {
            out: Stalled {
                written: Arc::default(),
                began: Some(began),
                release: Some(released),
            },
            tally: Arc::clone(&tally),
            format: LogFormat::Human,
            reported: 0,
        };
        let (queue, worker) = NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(1)
            .finish(lines);
        let refusals = queue.error_counter();
        let sink = Sink {
            queue,
            refusals: refusals.clone(),
            tally: Arc::clone(&tally),
        };
        sink.make_writer().write_all(b"stuck\n").expect("queued");
        writing.recv().expect("the writer holds the line");
        let guard = LogGuard {
            writer: Some((worker, refusals)),
            tally: Arc::clone(&tally),
            flush_wait: Duration::ZERO,
            exporting: None,
        };
        // Returns although the line is never written (and prints nothing).
        drop(guard);
        assert!(!tally.drained(0));
    }
}
