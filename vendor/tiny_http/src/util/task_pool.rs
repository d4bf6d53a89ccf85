use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::Duration;
use std::time::Instant;

/// Manages a collection of threads.
///
/// A new thread is created every time all the existing threads are full.
/// Any idle thread will automatically die after a few seconds.
///
/// Patched for tollgate: a thread that cannot be created is reported to the caller
/// (`std::thread::Builder::spawn`) instead of panicking while the queue's lock is held,
/// and no lock is unwrapped, so a poisoned lock cannot kill the other threads of the pool.
pub struct TaskPool {
    sharing: Arc<Sharing>,
}

type Task = Box<dyn FnOnce() + Send>;

struct Sharing {
    // the tasks to be done by worker threads, and the idle threads
    todo: Mutex<Todo>,

    // condvar that will be notified whenever a task is added to `todo`
    condvar: Condvar,

    // number of total worker threads running
    active_tasks: AtomicUsize,

    // the number of the next task
    next_task: AtomicUsize,
}

/// Patched for tollgate: the idle threads are counted under the queue's lock. Upstream
/// counted them apart, so a thread woken for one task still counted as idle for the next
/// one, which then waited in the queue until some busy thread finished (forever, when the
/// busy threads serve slow clients).
struct Todo {
    // the tasks, each with its number
    tasks: VecDeque<(u64, Task)>,
    // threads waiting for a task; each one takes one task when it wakes
    idle: usize,
}

impl Sharing {
    fn lock(&self) -> MutexGuard<'_, Todo> {
        self.todo.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Minimum number of active threads.
static MIN_THREADS: usize = 4;

/// A task that waits in the queue because no thread could be created for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued(u64);

struct Registration<'a> {
    nb: &'a AtomicUsize,
}

impl<'a> Registration<'a> {
    fn new(nb: &'a AtomicUsize) -> Registration<'a> {
        nb.fetch_add(1, Ordering::Release);
        Registration { nb }
    }
}

impl<'a> Drop for Registration<'a> {
    fn drop(&mut self) {
        self.nb.fetch_sub(1, Ordering::Release);
    }
}

impl TaskPool {
    /// A pool with its minimum of threads, or the error of the first thread that could
    /// not be created.
    pub fn new() -> std::io::Result<TaskPool> {
        let pool = TaskPool {
            sharing: Arc::new(Sharing {
                todo: Mutex::new(Todo {
                    tasks: VecDeque::new(),
                    idle: 0,
                }),
                condvar: Condvar::new(),
                active_tasks: AtomicUsize::new(0),
                next_task: AtomicUsize::new(0),
            }),
        };

        for _ in 0..MIN_THREADS {
            pool.add_thread()?;
        }

        Ok(pool)
    }

    /// Executes a function in a thread. When every thread is busy and no new one can be
    /// created, the task stays queued (it runs when a thread becomes free) and `Err`
    /// names it, so that the caller can free a thread or [`TaskPool::withdraw`] it.
    pub fn spawn(&self, code: Task) -> Result<(), Queued> {
        let id = self.sharing.next_task.fetch_add(1, Ordering::Relaxed) as u64;
        let mut queue = self.sharing.lock();
        queue.tasks.push_back((id, code));
        if queue.tasks.len() <= queue.idle {
            self.sharing.condvar.notify_one();
            return Ok(());
        }
        drop(queue);
        match self.add_thread() {
            Ok(()) => Ok(()),
            Err(e) => {
                log_spawn_failure(&e);
                Err(Queued(id))
            }
        }
    }

    /// Takes a queued task back out (dropping it); `false` when a thread has taken it.
    pub fn withdraw(&self, queued: Queued) -> bool {
        let mut queue = self.sharing.lock();
        match queue.tasks.iter().position(|(id, _)| *id == queued.0) {
            Some(index) => {
                let task = queue.tasks.remove(index);
                drop(queue);
                drop(task);
                true
            }
            None => false,
        }
    }

    fn add_thread(&self) -> std::io::Result<()> {
        let sharing = self.sharing.clone();

        thread::Builder::new()
            .name("tiny-http-connection".into())
            .spawn(move || {
                let sharing = sharing;
                let _active_guard = Registration::new(&sharing.active_tasks);

                while let Some(task) = next_task(&sharing) {
                    // A panicking task ends its connection, not the thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                }
            })
            .map(|_| ())
    }
}

/// Logs a failed thread creation, at most once per [`SPAWN_LOG_WINDOW`] (with the number
/// left out), so that a flood of connections cannot flood the log.
fn log_spawn_failure(error: &std::io::Error) {
    static FIRST: OnceLock<Instant> = OnceLock::new();
    static NEXT_LOG_SECS: AtomicU64 = AtomicU64::new(0);
    static LEFT_OUT: AtomicU64 = AtomicU64::new(0);
    let now = FIRST.get_or_init(Instant::now).elapsed().as_secs();
    let next = NEXT_LOG_SECS.load(Ordering::Relaxed);
    let window = SPAWN_LOG_WINDOW.as_secs();
    if now >= next
        && NEXT_LOG_SECS
            .compare_exchange(next, now + window, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let left_out = LEFT_OUT.swap(0, Ordering::Relaxed);
        log::error!(
            "cannot create a connection thread: {} ({} more in the last {} s not logged)",
            error,
            left_out,
            window
        );
    } else {
        LEFT_OUT.fetch_add(1, Ordering::Relaxed);
    }
}

const SPAWN_LOG_WINDOW: Duration = Duration::from_secs(10);

/// Waits for the next task; `None` when this thread has been idle long enough to end.
fn next_task(sharing: &Sharing) -> Option<Task> {
    let mut todo = sharing.lock();
    loop {
        if let Some((_, task)) = todo.tasks.pop_front() {
            return Some(task);
        }
        todo.idle += 1;

        let received = if sharing.active_tasks.load(Ordering::Acquire) <= MIN_THREADS {
            todo = sharing
                .condvar
                .wait(todo)
                .unwrap_or_else(PoisonError::into_inner);
            true
        } else {
            let (new_lock, waitres) = sharing
                .condvar
                .wait_timeout(todo, Duration::from_millis(5000))
                .unwrap_or_else(PoisonError::into_inner);
            todo = new_lock;
            !waitres.timed_out()
        };
        todo.idle -= 1;

        if !received && todo.tasks.is_empty() {
            return None;
        }
    }
}

impl Drop for TaskPool {
    fn drop(&mut self) {
        self.sharing
            .active_tasks
            .store(999_999_999, Ordering::Release);
        self.sharing.condvar.notify_all();
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::{mpsc, Barrier};

    // Upstream counted a thread woken for one task as idle for the next one too: of a
    // burst of tasks, some waited until a busy thread finished. Here every task of a burst
    // larger than the idle threads must run at once (they all wait for each other).
    #[test]
    fn every_task_of_a_burst_gets_a_thread() {
        const BURST: usize = MIN_THREADS * 3;
        let pool = TaskPool::new().unwrap();
        let barrier = Arc::new(Barrier::new(BURST + 1));
        let (done, finished) = mpsc::channel();
        for _ in 0..BURST {
            let (barrier, done) = (Arc::clone(&barrier), done.clone());
            let task: Task = Box::new(move || {
                barrier.wait();
                done.send(()).unwrap();
            });
            assert!(pool.spawn(task).is_ok());
        }
        let (meet, met) = mpsc::channel();
        std::thread::spawn(move || {
            barrier.wait();
            meet.send(()).unwrap();
        });
        met.recv_timeout(Duration::from_secs(20))
            .expect("every task of the burst is running");
        for _ in 0..BURST {
            finished.recv_timeout(Duration::from_secs(20)).unwrap();
        }
    }
}
