//! Outbound exchanges run on the thread that waits for them.
//!
//! Handed to the shared outbound runtime, a forwarded call costs two thread hand-offs: the
//! request's thread spawns the exchange and sleeps, a runtime worker runs it (with hyper's
//! connection task, woken by the network), then wakes the request's thread with the answer.
//! Measured under load, those sleeps and wake-ups were about a tenth of the gate's CPU per
//! forwarded call. [`Lanes`] runs the exchange on the caller's own thread instead: each
//! thread that forwards has a single-threaded tokio runtime of its own, and each backend a
//! client per such thread (`reqwest`'s, or hyper-util's for a plain-http MCP upstream; a
//! client's pooled connections belong to the runtime they were opened on), so writing the
//! request, waiting on the socket and reading the answer are one thread's work, and a
//! thread keeps its connections to a backend open between calls.
//!
//! Making a thread's reqwest client costs a few milliseconds (the platform's root
//! certificates are loaded), once per thread and backend. A thread that lives for one call
//! only (the extra calls of a request run side by side, [`passing`]) would pay it on every
//! call, so it is kept off the lanes; so is a thread already inside an async context, which
//! cannot block on a runtime. There [`Lanes::run`] gives the exchange back, and the caller
//! uses the shared runtime.
//!
//! A thread's runtime is driven only during its exchanges, so what happened to its
//! connections meanwhile is not known when the next exchange starts: a connection the
//! backend closed while it lay idle (a server's keep-alive timeout, say) still looks open,
//! and a request written on it fails. An exchange on a lane that has been idle for
//! [`IDLE_TURN`] or more therefore begins by letting the connections' tasks act on what
//! arrived meanwhile ([`turn_connections`]): a closed connection leaves the pool, and the
//! request goes on a new one (a test below holds that for reqwest's client, and one in
//! `upstream/poster.rs` for both clients a direct call posts with). Servers close idle
//! connections after a keep-alive timeout of seconds; a lane in use more often than
//! [`IDLE_TURN`] has its runtime driven often enough to see such a close during its
//! exchanges, and skips the turn, which costs four system calls. For the same reason an exchange given up (past its deadline, or
//! cancelled by the caller) ends with the same turn, so that its connection is closed then
//! and the backend learns at once that nobody waits for its answer.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use thread_local::ThreadLocal;
use tokio::time::Instant;

/// Makes a backend's client, configured as its shared one (`None` when it cannot be made).
type MakeClient<C> = Box<dyn Fn() -> Option<C> + Send + Sync>;

/// This thread's runtime for outbound exchanges, made on its first exchange (`None` when it
/// could not be started: the shared runtime serves the thread then).
struct Lane {
    runtime: tokio::runtime::Runtime,
    /// Which lane this is, so that a client made for a thread that has ended (its slot
    /// handed to a new thread) is never used on another lane's runtime.
    token: u64,
    /// When its last exchange ended.
    idle_since: Cell<Option<std::time::Instant>>,
}

/// An exchange on a lane idle this long first turns its connections ([`turn_connections`]).
const IDLE_TURN: Duration = Duration::from_millis(100);

/// Whether a lane whose last exchange ended at `idle_since` turns its connections `now`.
fn turns(idle_since: Option<std::time::Instant>, now: std::time::Instant) -> bool {
    idle_since.is_none_or(|since| now.saturating_duration_since(since) >= IDLE_TURN)
}

static NEXT_LANE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread lives for one call ([`passing`]).
    static PASSING: Cell<bool> = const { Cell::new(false) };

    static LANE: Option<Rc<Lane>> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("tollgate-lane")
        .build()
        .ok()
        .map(|runtime| {
            Rc::new(Lane {
                runtime,
                token: NEXT_LANE.fetch_add(1, Ordering::Relaxed),
                idle_since: Cell::new(None),
            })
        });
}

/// One backend's clients (`reqwest`'s, or the client `C` its calls post with), one per
/// thread that has called it.
pub(crate) struct Lanes<C: Send = reqwest::Client> {
    make: MakeClient<C>,
    clients: ThreadLocal<RefCell<Option<(u64, C)>>>,
}

impl<C: Send> std::fmt::Debug for Lanes<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes").finish_non_exhaustive()
    }
}

impl<C: Clone + Send> Lanes<C> {
    /// Lanes whose clients `make` builds (as the backend's shared client is built).
    pub(crate) fn new<E>(make: impl Fn() -> Result<C, E> + Send + Sync + 'static) -> Lanes<C> {
        Lanes {
            make: Box::new(move || make().ok()),
            clients: ThreadLocal::new(),
        }
    }

    /// Runs the future `exchange` makes with this thread's client to its end on this
    /// thread; gives `exchange` back unrun when the thread cannot (it is inside an async
    /// context, or has no runtime, or the client could not be made).
    pub(crate) fn run<G, F>(&self, exchange: G) -> Result<F::Output, G>
    where
        G: FnOnce(C) -> F,
        F: Future,
    {
        if PASSING.with(Cell::get) || tokio::runtime::Handle::try_current().is_ok() {
            return Err(exchange);
        }
        let Some(lane) = LANE.try_with(Option::clone).ok().flatten() else {
            return Err(exchange);
        };
        let Some(client) = self.client_for(lane.token) else {
            return Err(exchange);
        };
        let turn = turns(lane.idle_since.get(), std::time::Instant::now());
        let output = lane.runtime.block_on(async {
            if turn {
                turn_connections().await;
            }
            exchange(client).await
        });
        lane.idle_since.set(Some(std::time::Instant::now()));
        Ok(output)
    }

    /// This thread's client, made on the thread's first exchange with the backend.
    fn client_for(&self, token: u64) -> Option<C> {
        let slot = self.clients.get_or(|| RefCell::new(None));
        let mut slot = slot.borrow_mut();
        match &*slot {
            Some((made_for, client)) if *made_for == token => Some(client.clone()),
            _ => {
                let client = (self.make)()?;
                *slot = Some((token, client.clone()));
                Some(client)
            }
        }
    }
}

/// Makes this thread's lane act as if it had been idle for [`IDLE_TURN`] (a test's
/// stand-in for waiting that long).
#[cfg(test)]
pub(crate) fn as_if_idle() {
    if let Ok(Some(lane)) = LANE.try_with(Option::clone) {
        lane.idle_since.set(None);
    }
}

/// Runs `f` on a thread started for it alone, which ends with it: its backend calls use
/// the shared outbound runtime rather than setting a lane up for one call.
pub fn passing<T>(f: impl FnOnce() -> T) -> T {
    PASSING.with(|passing| passing.set(true));
    f()
}

/// Why [`supervise`] gave an exchange up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// Its deadline passed.
    Deadline,
    /// Its caller cancelled it.
    Cancelled,
}

/// Runs `exchange` until it ends or `timeout` passes, calling `look` every `every` (with
/// the time), which says whether the caller cancelled it (and may relay progress). An
/// exchange given up is dropped, and its connection closed ([`let_go`]), before this
/// returns. One timer serves the deadline and the looks, so a quick exchange registers one.
pub(crate) async fn supervise<T>(
    exchange: impl Future<Output = T>,
    timeout: Duration,
    every: Duration,
    mut look: impl FnMut(std::time::Instant) -> bool,
) -> Result<T, GaveUp> {
    // The exchange is dropped when this block ends.
    let waited = async {
        let deadline = Instant::now() + timeout;
        tokio::pin!(exchange);
        let check = tokio::time::sleep_until((Instant::now() + every).min(deadline));
        tokio::pin!(check);
        loop {
            tokio::select! {
                biased;
                done = &mut exchange => return Ok(done),
                () = &mut check => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(GaveUp::Deadline);
                    }
                    if look(now.into_std()) {
                        return Err(GaveUp::Cancelled);
                    }
                    check.as_mut().reset((now + every).min(deadline));
                }
            }
        }
    }
    .await;
    if waited.is_err() {
        // The dropped exchange woke its connection's task.
        turn_connections().await;
    }
    waited
}

/// Lets this thread's connection tasks act on what they were woken for: what the network
/// brought while the runtime was not driven (the first yield has the runtime poll its I/O
/// driver and wake them), or an exchange just given up (its future dropped). The second
/// yield lets those tasks run before the caller goes on: a connection its backend closed
/// leaves the pool, and one whose exchange was given up is closed. About four system calls
/// (`epoll_wait` without waiting, and the tasks' reads), measured under load.
async fn turn_connections() {
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::mpsc;

    fn lanes() -> Lanes {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Lanes::new(|| reqwest::Client::builder().no_proxy().build())
    }

    /// Reads one request head (the requests here have no body).
    fn read_head(reader: &mut BufReader<TcpStream>) -> bool {
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return false,
                Ok(_) if line == "\r\n" => return true,
                Ok(_) => {}
            }
        }
    }

    /// A server that answers each connection's first request (keeping it alive, as far as
    /// the client knows), then, once `close` says so, closes it and says so; `rounds`
    /// connections.
    fn closing_server(rounds: usize) -> (String, mpsc::Sender<()>, mpsc::Receiver<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let (closed, closings) = mpsc::channel();
        let (close, close_now) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            for round in 0..rounds {
                let (stream, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
                assert!(read_head(&mut reader));
                let mut writer = stream;
                let body = format!("round {round}");
                write!(
                    writer,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .expect("answer");
                writer.flush().expect("flush");
                if close_now.recv().is_err() {
                    return;
                }
                writer.shutdown(Shutdown::Both).expect("close");
                // Whatever the client still sends is read and dropped, then the socket closes.
                let _ = reader.read_to_end(&mut Vec::new());
                drop(writer);
                closed.send(round).expect("tell the test");
            }
        });
        (url, close, closings)
    }

    async fn get(client: reqwest::Client, url: &str) -> Result<String, reqwest::Error> {
        client.get(url).send().await?.text().await
    }

    #[test]
    fn an_exchange_runs_on_the_calling_thread_and_keeps_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let server = std::thread::spawn(move || {
            // One connection serves both requests.
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let mut writer = stream;
            for n in 0..2 {
                assert!(read_head(&mut reader));
                write!(writer, "HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{n}").expect("answer");
                writer.flush().expect("flush");
            }
        });
        let lanes = lanes();
        let caller = std::thread::current().id();
        for n in 0..2 {
            let (body, ran_on) = lanes
                .run(|client| {
                    let url = url.clone();
                    async move { (get(client, &url).await, std::thread::current().id()) }
                })
                .ok()
                .expect("a plain thread runs its exchanges");
            assert_eq!(body.expect("an answer"), n.to_string());
            assert_eq!(ran_on, caller);
        }
        server.join().expect("the server ends");
    }

    #[test]
    fn only_an_exchange_after_an_idle_spell_turns_the_connections() {
        let start = std::time::Instant::now();
        assert!(turns(None, start), "a lane's first exchange");
        assert!(!turns(Some(start), start));
        assert!(!turns(
            Some(start),
            start + IDLE_TURN - Duration::from_millis(1)
        ));
        assert!(turns(Some(start), start + IDLE_TURN));
        // A clock that went back says nothing about idleness: no turn.
        assert!(!turns(Some(start + IDLE_TURN), start));
    }

    #[test]
    fn a_connection_the_backend_closed_while_idle_is_not_used_again() {
        let (url, close, closings) = closing_server(3);
        let lanes = lanes();
        for round in 0..3 {
            let body = lanes
                .run(|client| {
                    let url = url.clone();
                    async move { get(client, &url).await }
                })
                .ok()
                .expect("a plain thread runs its exchanges");
            assert_eq!(body.expect("an answer"), format!("round {round}"));
            // The server closes that connection while the thread's runtime is not driven
            // (closed on loopback, its end has reached this side when `closings` hears).
            close.send(()).expect("the server waits");
            assert_eq!(closings.recv().expect("the server closed it"), round);
            as_if_idle();
        }
    }

    #[test]
    fn an_exchange_given_up_closes_its_connection_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let (seen, events) = mpsc::channel();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream);
            assert!(read_head(&mut reader));
            seen.send("request").expect("tell the test");
            // Never answers; reads until the client closes the connection.
            let _ = reader.read_to_end(&mut Vec::new());
            seen.send("closed").expect("tell the test");
        });
        let lanes = lanes();
        let (give_up, gave_up) = tokio::sync::oneshot::channel::<()>();
        let waiter = std::thread::spawn(move || {
            // Gives the exchange up once the server has it.
            assert_eq!(events.recv().expect("the request"), "request");
            give_up.send(()).expect("the exchange waits");
            events
        });
        let outcome = lanes
            .run(|client| async move {
                let abandoned = async {
                    tokio::select! {
                        _ = get(client, &url) => "answered",
                        _ = gave_up => "given up",
                    }
                }
                .await;
                turn_connections().await;
                abandoned
            })
            .ok()
            .expect("a plain thread runs its exchanges");
        assert_eq!(outcome, "given up");
        let events = waiter.join().expect("the waiter ends");
        // Bounded only so that a failing test ends; the close is immediate.
        let closed = events.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(closed, Ok("closed"));
    }

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
    }

    #[test]
    fn supervision_ends_an_exchange_at_its_deadline_and_looks_meanwhile() {
        // A paused clock: the runtime moves it on to the next timer when it would park.
        let looks = std::cell::Cell::new(0);
        let waited = paused_runtime().block_on(supervise(
            std::future::pending::<()>(),
            Duration::from_millis(120),
            Duration::from_millis(50),
            |_| {
                looks.set(looks.get() + 1);
                false
            },
        ));
        assert_eq!(waited, Err(GaveUp::Deadline));
        assert_eq!(looks.get(), 2, "at 50 and 100 ms");
    }

    #[test]
    fn supervision_gives_up_when_the_caller_cancels() {
        let waited = paused_runtime().block_on(supervise(
            std::future::pending::<()>(),
            Duration::from_secs(30),
            Duration::from_millis(50),
            |_| true,
        ));
        assert_eq!(waited, Err(GaveUp::Cancelled));
    }

    #[test]
    fn supervision_returns_what_the_exchange_gives() {
        let waited = paused_runtime().block_on(supervise(
            async { 7 },
            Duration::from_secs(30),
            Duration::from_millis(50),
            |_| true,
        ));
        assert_eq!(waited, Ok(7));
    }

    #[test]
    fn inside_an_async_context_the_caller_is_told_to_use_the_shared_runtime() {
        let lanes = lanes();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let ran = runtime.block_on(async { lanes.run(|_client| async { 1 }).ok() });
        assert_eq!(ran, None);
    }

    #[test]
    fn a_thread_that_lives_for_one_call_is_kept_off_the_lanes() {
        let mut lanes = lanes();
        std::thread::scope(|s| {
            s.spawn(|| {
                passing(|| assert!(lanes.run(|_client| async {}).is_err()));
            });
        });
        let made = lanes.clients.iter_mut().count();
        assert_eq!(made, 0);
    }

    #[test]
    fn each_thread_has_its_own_client_made_once() {
        let mut lanes = lanes();
        let made = |lanes: &mut Lanes| {
            let clients = lanes.clients.iter_mut();
            clients.filter_map(|c| c.get_mut().as_ref()).count()
        };
        lanes.run(|_client| async {}).ok().expect("runs here");
        lanes.run(|_client| async {}).ok().expect("runs here");
        assert_eq!(made(&mut lanes), 1);
        std::thread::scope(|s| {
            s.spawn(|| lanes.run(|_client| async {}).ok().expect("runs there"));
        });
        assert_eq!(made(&mut lanes), 2);
    }
}
