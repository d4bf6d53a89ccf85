//! Process logging with `tracing`: human or JSON lines, always on stderr, so that stdout
//! stays reserved for MCP messages on the stdio transport.
//!
//! Logging never blocks a call. A formatted line goes into a bounded queue
//! ([`BUFFERED_LINES`]) that one writer thread empties into stderr; when the queue is full
//! — stderr is a pipe nobody reads, a stalled journal — the line is dropped and counted
//! ([`dropped_lines`], `tollgate_log_lines_dropped_total` in `/metrics`), and the next line
//! the writer manages to write is preceded by one saying how many were dropped. The
//! [`LogGuard`] that [`init`] returns flushes what is queued when it is dropped (a clean
//! exit), waiting at most [`FLUSH_WAIT`] for a reader that does not read.

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::config::{LogConfig, LogFormat};

/// Lines queued for stderr at most; past it, lines are dropped (a few MiB at most).
pub const BUFFERED_LINES: usize = 8192;
/// Longest a clean exit waits for the queued lines to be written.
pub const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// How many log lines this process has dropped so far (a full queue, or stderr failing);
/// the count is kept with the other process counters, in [`crate::guards::metrics`].
pub fn dropped_lines() -> u64 {
    crate::guards::metrics::log_lines_dropped()
}

/// What the writer thread is handed.
enum Message {
    /// One formatted line (newline included).
    Line(Vec<u8>),
    /// Write everything before this, then answer.
    Flush(SyncSender<()>),
}

/// The `MakeWriter` of the subscriber: every event is one message on the queue.
struct Sink {
    queue: SyncSender<Message>,
}

/// The writer of one event: queues what it is given, never waits.
struct QueueWriter<'a>(&'a SyncSender<Message>);

impl Write for QueueWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.0.try_send(Message::Line(buf.to_vec()))
        {
            crate::guards::metrics::count_dropped_log_lines(1);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = QueueWriter<'a>;

    fn make_writer(&'a self) -> QueueWriter<'a> {
        QueueWriter(&self.queue)
    }
}

/// Keeps the log writer going; dropping it flushes the queued lines (bounded by
/// [`FLUSH_WAIT`]). Hold it for as long as the process logs.
#[must_use = "dropping the guard flushes the log at once"]
pub struct LogGuard {
    queue: Option<SyncSender<Message>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        let deadline = Instant::now() + FLUSH_WAIT;
        let (done, flushed) = sync_channel(1);
        let mut message = Message::Flush(done);
        loop {
            match queue.try_send(message) {
                Ok(()) => {
                    let _ =
                        flushed.recv_timeout(deadline.saturating_duration_since(Instant::now()));
                    return;
                }
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return,
            }
        }
    }
}

/// Installs the global subscriber; `RUST_LOG` refines the configured level when set.
pub fn init(config: &LogConfig) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // The MCP client library logs every message of an upstream session at info: at the
        // default level only its warnings are kept.
        match config.level.as_str() {
            "info" => EnvFilter::new("info,rmcp=warn"),
            level => EnvFilter::new(level),
        }
    });
    let (queue, lines) = sync_channel(BUFFERED_LINES);
    let format = config.format;
    let writer = std::thread::Builder::new()
        .name("log-writer".to_owned())
        .spawn(move || write_loop(&lines, &mut io::stderr(), format));
    if let Err(e) = writer {
        // Without the thread nothing would empty the queue: log straight to stderr.
        eprintln!("tollgate: cannot start the log writer ({e}); logging directly to stderr");
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(io::stderr)
            .with_target(false);
        let _ = match format {
            LogFormat::Json => builder.json().try_init(),
            LogFormat::Human => builder.try_init(),
        };
        return LogGuard { queue: None };
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Sink {
            queue: queue.clone(),
        })
        // Colour codes only for a person at a terminal, never into the journal or a file.
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .with_target(false);
    // A second init (tests embedding the library) keeps the first subscriber.
    let installed = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Human => builder.try_init(),
    };
    LogGuard {
        queue: installed.is_ok().then_some(queue),
    }
}

/// The writer thread: writes each queued line to `out`, preceded by the count of lines
/// dropped since the last one it wrote, until every sender is gone.
fn write_loop(lines: &Receiver<Message>, out: &mut dyn Write, format: LogFormat) {
    let mut reported = 0;
    for message in lines {
        match message {
            Message::Line(line) => {
                report_drops(out, &mut reported, format);
                if out.write_all(&line).is_err() {
                    crate::guards::metrics::count_dropped_log_lines(1);
                }
            }
            Message::Flush(done) => {
                report_drops(out, &mut reported, format);
                let _ = out.flush();
                let _ = done.send(());
            }
        }
    }
}

/// Writes the "N log lines dropped" line when lines were dropped since `reported`.
fn report_drops(out: &mut dyn Write, reported: &mut u64, format: LogFormat) {
    let dropped = dropped_lines();
    if dropped == *reported {
        return;
    }
    let notice = drop_notice(dropped - *reported, format, SystemTime::now());
    if out.write_all(notice.as_bytes()).is_ok() {
        *reported = dropped;
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

    #[test]
    fn a_full_queue_drops_without_waiting_and_the_next_line_reports_it() {
        let (queue, lines) = sync_channel(2);
        let mut writer = QueueWriter(&queue);
        let before = dropped_lines();
        for line in ["one\n", "two\n", "three\n", "four\n"] {
            assert_eq!(
                writer.write(line.as_bytes()).expect("never fails"),
                line.len()
            );
        }
        assert!(dropped_lines() >= before + 2);
        drop(queue);
        let mut out = Vec::new();
        let mut reported = before;
        for message in lines.try_iter() {
            if let Message::Line(line) = message {
                report_drops(&mut out, &mut reported, LogFormat::Human);
                out.extend_from_slice(&line);
            }
        }
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains(" log lines dropped"), "{text}");
        assert_eq!(&lines[1..], ["one", "two"], "{text}");
    }
}
