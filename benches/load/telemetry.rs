//! The `telemetry` scenario: what exporting traces costs a call, and that an exporter that
//! cannot deliver costs it nothing more. The guarded HTTP load of `http` (`tools/call
//! test_simple_text`, every guard on, the admin key) on four `tollgate serve
//! --conformance-pack` gates that differ only in their OTLP exporter:
//!
//! - export off (no `OTEL_*` variable);
//! - export on to a closed port (a listener bound, its port noted, the listener dropped):
//!   every export is refused at once;
//! - export on to a receiver that accepts TCP connections and never answers, with
//!   `OTEL_EXPORTER_OTLP_TIMEOUT` at [`EXPORT_TIMEOUT_MS`]: every export hangs until its
//!   deadline, so the queue fills and the spans past it are dropped;
//! - export on to a receiver that answers every export `200` at once (an empty
//!   `application/x-protobuf` body, an empty `ExportTraceServiceResponse`): the cost of
//!   export that succeeds (printed, no goal).
//!
//! Both receivers are the bench's own threads on 127.0.0.1, in this process (their CPU is
//! not the gate's), started once for the scenario and stopped at its end. Each run starts
//! every gate afresh on a fresh database, one at a time, in an order that rotates from run
//! to run. After each load the gate's `/metrics` is read for its span counts (exported,
//! dropped, failed exports): the two failing exporters must have dropped spans. Prints
//! calls/s, p50, p99 and server CPU per call of each, the span counts, and the goal: each
//! failing exporter's CPU per call over export off's (target ≤ 1.05).

use std::net::TcpListener;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;

use super::*;

/// A failing exporter's CPU per call may be this much of export off's at most.
pub(super) const TARGET_TELEMETRY_CPU_RATIO: f64 = 1.05;
/// The export deadline of every gate that exports (`OTEL_EXPORTER_OTLP_TIMEOUT`, ms).
const EXPORT_TIMEOUT_MS: u64 = 3000;

/// The four gates, by where their spans go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exporter {
    Off,
    ClosedPort,
    Silent,
    Answering,
}

impl Exporter {
    const ALL: [Exporter; 4] = [
        Exporter::Off,
        Exporter::ClosedPort,
        Exporter::Silent,
        Exporter::Answering,
    ];

    fn label(self) -> &'static str {
        match self {
            Exporter::Off => "export off",
            Exporter::ClosedPort => "export on, closed port",
            Exporter::Silent => "export on, receiver never answers",
            Exporter::Answering => "export on, receiver answers 200",
        }
    }

    /// Whether every export of this gate fails (its spans must be dropped and counted).
    fn fails(self) -> bool {
        matches!(self, Exporter::ClosedPort | Exporter::Silent)
    }
}

/// A gate's span counts, from its `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
struct Spans {
    exported: u64,
    dropped: u64,
    failed_exports: u64,
}

impl Spans {
    /// The counts on `addr`'s `/metrics`; `None` when the page or the families are missing
    /// (export is off, or the page could not be read).
    fn read(addr: SocketAddr) -> Option<Spans> {
        let page = http_get(addr, "/metrics")?;
        let value = |name: &str| -> Option<u64> {
            page.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| v as u64)
        };
        Some(Spans {
            exported: value("tollgate_spans_exported_total")?,
            dropped: value("tollgate_spans_dropped_total")?,
            failed_exports: value("tollgate_span_export_failures_total")?,
        })
    }
}

/// One exporter's runs: the load's figures and the span counts after each.
struct Variant {
    exporter: Exporter,
    series: Series,
    spans: Vec<Option<Spans>>,
}

/// The medians of every gate, and the span counts of each run.
pub(super) struct TelemetryFigures {
    variants: Vec<(Exporter, RunFigures, Vec<Option<Spans>>)>,
}

impl TelemetryFigures {
    fn of(&self, exporter: Exporter) -> Option<&(Exporter, RunFigures, Vec<Option<Spans>>)> {
        self.variants.iter().find(|(e, _, _)| *e == exporter)
    }

    /// `exporter`'s server CPU per call over export off's.
    fn cpu_ratio(&self, exporter: Exporter) -> Option<f64> {
        // Under `TG_BENCH_WRAP` the process measured is the wrapper's: no ratio.
        let off = self.of(Exporter::Off)?.1.cpu_us.filter(|us| *us > 0.0)?;
        Some(self.of(exporter)?.1.cpu_us? / off)
    }

    /// Whether every run of `exporter` reported dropped spans.
    fn dropped_every_run(&self, exporter: Exporter) -> bool {
        self.of(exporter).is_some_and(|(_, _, spans)| {
            !spans.is_empty() && spans.iter().all(|s| s.is_some_and(|s| s.dropped > 0))
        })
    }

    /// Dropped spans per run, as text: `1 234, 2 345`.
    fn dropped_text(&self, exporter: Exporter) -> String {
        self.of(exporter).map_or_else(
            || "–".to_owned(),
            |(_, _, spans)| {
                spans
                    .iter()
                    .map(|s| s.map_or("–".to_owned(), |s| thousands(s.dropped as f64)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        )
    }

    /// The summary's rows: the goal of each failing exporter, and the cost of successful
    /// export.
    pub(super) fn goals(&self) -> Vec<[String; 4]> {
        let mut rows = Vec::new();
        let off_us = self.of(Exporter::Off).and_then(|v| v.1.cpu_us);
        for exporter in Exporter::ALL.into_iter().filter(|e| *e != Exporter::Off) {
            let Some((_, f, _)) = self.of(exporter) else {
                continue;
            };
            let ratio = self.cpu_ratio(exporter);
            let measured = format!(
                "{} ({} µs vs {} µs; {} calls/s, p99 {:.3} ms; dropped spans per run: {}){}",
                ratio.map_or_else(|| "–".to_owned(), |r| format!("×{r:.3}")),
                us_or_dash(f.cpu_us),
                us_or_dash(off_us),
                thousands(f.calls_per_sec),
                ms(f.p99),
                self.dropped_text(exporter),
                errors_note(f)
            );
            let figure = format!(
                "HTTP, guarded tools/call, {}: server CPU per call, to export off's",
                exporter.label()
            );
            if exporter.fails() {
                let ok = f.errors == 0
                    && self.dropped_every_run(exporter)
                    && ratio.is_some_and(|r| r <= TARGET_TELEMETRY_CPU_RATIO);
                rows.push([
                    figure,
                    measured,
                    format!("≤ ×{TARGET_TELEMETRY_CPU_RATIO:.2}, spans dropped"),
                    met(ok).to_owned(),
                ]);
            } else {
                rows.push([figure, measured, "–".to_owned(), "–".to_owned()]);
            }
        }
        rows
    }
}

/// A receiver thread of the bench's, stopped (and joined) when dropped.
struct Receiver {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Exports answered (the answering receiver) or connections held (the silent one).
    count: Arc<AtomicU64>,
}

impl Receiver {
    /// Accepts connections on a fresh loopback port, handing each to `serve`, until
    /// dropped.
    fn start(serve: fn(TcpStream, &Arc<AtomicU64>, &mut Vec<TcpStream>)) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a receiver");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let addr = listener.local_addr().expect("the receiver's address");
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, count) = (Arc::clone(&stop), Arc::clone(&count));
            std::thread::spawn(move || {
                // The silent receiver's connections, held open until the end.
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).expect("blocking stream");
                            serve(stream, &count, &mut held);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Receiver {
            addr,
            stop,
            thread: Some(thread),
            count,
        }
    }

    /// Accepts connections and never reads from them nor answers.
    fn silent() -> Receiver {
        Receiver::start(|stream, count, held| {
            count.fetch_add(1, Ordering::Relaxed);
            held.push(stream);
        })
    }

    /// Answers every request `200` with an empty protobuf body, on a thread per connection
    /// (which ends when the gate closes the connection).
    fn answering() -> Receiver {
        Receiver::start(|stream, count, _| {
            let count = Arc::clone(count);
            std::thread::spawn(move || answer_exports(stream, &count));
        })
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves one connection of the answering receiver: reads each request (head and
/// `Content-Length` body) and answers `200` with an empty `application/x-protobuf` body,
/// until the gate closes the connection.
fn answer_exports(stream: TcpStream, answered: &AtomicU64) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        let mut length = 0usize;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        answered.fetch_add(1, Ordering::Relaxed);
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\
                      Content-Length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A loopback port nothing listens on: a listener is bound, its port noted, the listener
/// dropped.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    listener.local_addr().expect("its address").port()
}

pub(super) fn telemetry_scenario(dir: &Path, s: &Settings) -> TelemetryFigures {
    println!(
        "\n== telemetry: tollgate serve --conformance-pack, its OTLP exporter off, to a closed port, \
         to a receiver that never answers ({} s deadline) and to one that answers 200; \
         {} keep-alive connections; {}",
        EXPORT_TIMEOUT_MS / 1000,
        s.connections,
        s.timing()
    );
    let closed = format!("http://127.0.0.1:{}", closed_port());
    let silent = Receiver::silent();
    let answering = Receiver::answering();
    let mut variants: Vec<Variant> = Exporter::ALL
        .into_iter()
        .map(|exporter| Variant {
            exporter,
            series: Series::new(format!("tools/call, {}", exporter.label())),
            spans: Vec::new(),
        })
        .collect();
    // The CPU per call of each gate in each run, to show each run's ratios.
    let mut per_run: Vec<Vec<Option<f64>>> = Vec::new();
    for run in 1..=s.runs {
        let mut cpu = vec![None; variants.len()];
        // Each run starts with another gate, so none always comes first.
        let mut order: Vec<usize> = (0..variants.len()).collect();
        order.rotate_left((run - 1) % variants.len());
        for i in order {
            let variant = &mut variants[i];
            let endpoint = match variant.exporter {
                Exporter::Off => None,
                Exporter::ClosedPort => Some(closed.clone()),
                Exporter::Silent => Some(silent.endpoint()),
                Exporter::Answering => Some(answering.endpoint()),
            };
            let env: Vec<(&str, String)> = endpoint.map_or_else(Vec::new, |endpoint| {
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", EXPORT_TIMEOUT_MS.to_string()),
                ]
            });
            let db = dir.join(format!("telemetry-{run}-{i}.db"));
            let admin = prepare_database(&db);
            let server = HttpServer::start_env(&db, &["--conformance-pack"], None, &env, s);
            let figures =
                http_load(&server, &Requests::fixed(&admin.token, &guarded_call()), s).summarise();
            cpu[i] = figures.cpu_us;
            variant.series.record(figures);
            if variant.exporter != Exporter::Off {
                let spans = Spans::read(server.addr);
                match spans {
                    Some(n) => println!(
                        "  {:<46} {:<9} spans exported {}, dropped {}, failed exports {}",
                        "",
                        "",
                        thousands(n.exported as f64),
                        thousands(n.dropped as f64),
                        thousands(n.failed_exports as f64)
                    ),
                    None => println!("  warning: no span counts on the gate's /metrics"),
                }
                variant.spans.push(spans);
            }
            drop(server);
            remove_database(&db);
        }
        per_run.push(cpu);
    }
    for variant in &variants {
        variant.series.print_median();
    }
    println!(
        "  the receiver that answers took {} exports; the one that never answers held {} connections",
        answering.count.load(Ordering::Relaxed),
        silent.count.load(Ordering::Relaxed)
    );
    drop((silent, answering));
    let figures = TelemetryFigures {
        variants: variants
            .into_iter()
            .map(|v| (v.exporter, v.series.median(), v.spans))
            .collect(),
    };
    for (i, exporter) in Exporter::ALL.into_iter().enumerate().skip(1) {
        let Some(ratio) = figures.cpu_ratio(exporter) else {
            continue;
        };
        let runs: Vec<String> = per_run
            .iter()
            .map(|cpu| match (cpu[i], cpu[0]) {
                (Some(on), Some(off)) if off > 0.0 => format!("{:.3}", on / off),
                _ => "–".to_owned(),
            })
            .collect();
        let target = if exporter.fails() {
            format!(" (target ≤ {TARGET_TELEMETRY_CPU_RATIO:.2})")
        } else {
            String::new()
        };
        println!(
            "  {} / export off, server CPU per call: {ratio:.3}{target}; by run: {}; dropped spans by run: {}",
            exporter.label(),
            runs.join(", "),
            figures.dropped_text(exporter)
        );
    }
    figures.print_table();
    figures
}

impl TelemetryFigures {
    /// The scenario's medians as a markdown table, to paste into a note.
    fn print_table(&self) {
        println!();
        println!(
            "| exporter | calls/s | p50 | p99 | server CPU per call | / export off | dropped spans by run |"
        );
        println!("|---|---:|---:|---:|---:|---:|---|");
        for (exporter, f, _) in &self.variants {
            let ratio = match exporter {
                Exporter::Off => "1".to_owned(),
                other => self
                    .cpu_ratio(*other)
                    .map_or_else(|| "–".to_owned(), |r| format!("{r:.3}")),
            };
            let dropped = match exporter {
                Exporter::Off => "–".to_owned(),
                other => self.dropped_text(*other),
            };
            println!(
                "| {} | {} | {:.3} ms | {:.3} ms | {} µs | {ratio} | {dropped} |",
                exporter.label(),
                thousands(f.calls_per_sec),
                ms(f.p50),
                ms(f.p99),
                us_or_dash(f.cpu_us)
            );
        }
    }
}
