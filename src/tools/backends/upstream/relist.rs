//! Reading an upstream's tools again after `notifications/tools/list_changed`, at a pace the
//! gate sets rather than the upstream.
//!
//! A notification only marks the list as due to be read again; one reader per session does
//! the reading, one read at a time, and at most one every [`RELIST_EVERY`]. Notifications
//! that arrive while a read is already due are folded into it (counted as coalesced), and
//! those that arrive while a read runs make at most one more. So a storm of notifications
//! costs a few reads, however long it lasts, instead of one read each.
//!
//! [`Pace`] is the decision alone, with the time passed in; [`ListChanges`] shares it
//! between the session's notification handler and its reader, [`follow`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{PaginatedRequestParams, Tool as UpstreamTool};
use rmcp::{Peer, RoleClient};
use tokio::sync::Notify;

use super::Shared;

/// The shortest time between two reads of an upstream's list (the session's first read
/// included).
pub(super) const RELIST_EVERY: Duration = Duration::from_secs(1);

/// What the reader does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing is due: wait for a notification.
    Idle,
    /// A read is due, but not before this much time has passed.
    Wait(Duration),
    /// Read the list now.
    Read,
}

/// When the list is read again: the decision, with the time passed in.
#[derive(Debug)]
pub(super) struct Pace {
    every: Duration,
    /// A notification came that no read started since then covers.
    due: bool,
    /// When the last read started.
    last_read: Instant,
}

impl Pace {
    /// A session whose list was read at `read_at`; reads at most one per `every`.
    pub(super) fn new(read_at: Instant, every: Duration) -> Pace {
        Pace {
            every,
            due: false,
            last_read: read_at,
        }
    }

    /// A notification arrived. True when it made a read due; false when one already was
    /// (it is folded into that one).
    pub(super) fn notified(&mut self) -> bool {
        !std::mem::replace(&mut self.due, true)
    }

    /// What the reader does at `now`. [`Step::Read`] takes the due read: notifications
    /// from then on make the next one due.
    pub(super) fn next(&mut self, now: Instant) -> Step {
        if !self.due {
            return Step::Idle;
        }
        let allowed = self.last_read + self.every;
        if now < allowed {
            return Step::Wait(allowed - now);
        }
        self.due = false;
        self.last_read = now;
        Step::Read
    }
}

/// Which of an upstream's lists a [`ListChanges`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lists {
    /// Its tools (`notifications/tools/list_changed`), counted for `/metrics`.
    Tools,
    /// Its resources, resource templates and prompts (`notifications/resources/list_changed`,
    /// `notifications/prompts/list_changed`), read again together.
    Offer,
}

/// One session's [`Pace`], shared by its notification handler and its reader.
pub(super) struct ListChanges {
    lists: Lists,
    pace: Mutex<Pace>,
    wake: Notify,
}

impl ListChanges {
    /// The changes of a session whose `lists` are being read now.
    pub(super) fn new(lists: Lists) -> ListChanges {
        ListChanges {
            lists,
            pace: Mutex::new(Pace::new(Instant::now(), RELIST_EVERY)),
            wake: Notify::new(),
        }
    }

    fn pace(&self) -> MutexGuard<'_, Pace> {
        match self.pace.lock() {
            Ok(pace) => pace,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The upstream said its list changed: a read is due (and the reader woken), or the
    /// notification is folded into the read already due.
    pub(super) fn notified(&self, shared: &Shared) {
        let counted = self.lists == Lists::Tools;
        if counted {
            shared.counts.list_changed.fetch_add(1, Ordering::Relaxed);
        }
        if self.pace().notified() {
            self.wake.notify_one();
        } else if counted {
            shared.counts.coalesced.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The session's reader of `changes`' lists: reads them again whenever [`ListChanges`]
/// says so, until the session ends (the task is aborted) or the backend is gone.
pub(super) async fn follow(
    shared: Weak<Shared>,
    peer: Peer<RoleClient>,
    changes: Arc<ListChanges>,
) {
    loop {
        let step = changes.pace().next(Instant::now());
        match step {
            // A notification between the look above and this wait leaves a permit: the
            // wait then ends at once.
            Step::Idle => changes.wake.notified().await,
            Step::Wait(wait) => tokio::time::sleep(wait).await,
            Step::Read => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if changes.lists == Lists::Offer {
                    let offer = super::offer::read_offer(&shared.name, &peer, shared.exposed).await;
                    shared.replace_offer(offer);
                    continue;
                }
                shared.counts.relists.fetch_add(1, Ordering::Relaxed);
                match read_tools(&peer, shared.limits.max_tools).await {
                    Ok(tools) => shared.replace_tools(&tools),
                    Err(e) => {
                        tracing::warn!(backend = %shared.name, error = %e, "upstream tools could not be listed again");
                    }
                }
            }
        }
    }
}

/// The upstream's tools ([`super::read_pages`]; those past `keep` are left out anyway).
pub(super) async fn read_tools(
    peer: &Peer<RoleClient>,
    keep: usize,
) -> Result<Vec<UpstreamTool>, String> {
    super::read_pages("tools", keep, |cursor| async move {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer.list_tools(Some(params)).await?;
        Ok((page.tools, page.next_cursor))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nothing_is_read_until_a_notification_comes() {
        let start = Instant::now();
        let mut pace = Pace::new(start, EVERY);
        assert_eq!(pace.next(start + ms(5000)), Step::Idle);
    }

    #[test]
    fn a_storm_of_notifications_makes_one_read() {
        let start = Instant::now();
        let mut pace = Pace::new(start, EVERY);
        let fresh = (0..500).filter(|_| pace.notified()).count();
        assert_eq!(fresh, 1, "499 of 500 are folded into the first");
        assert_eq!(pace.next(start + ms(1000)), Step::Read);
        assert_eq!(pace.next(start + ms(1000)), Step::Idle);
        assert_eq!(pace.next(start + ms(9000)), Step::Idle);
    }

    #[test]
    fn reads_are_at_least_the_interval_apart() {
        let start = Instant::now();
        let mut pace = Pace::new(start, EVERY);
        assert!(pace.notified());
        // The session's own first read was at `start`.
        assert_eq!(pace.next(start + ms(300)), Step::Wait(ms(700)));
        assert_eq!(pace.next(start + ms(1000)), Step::Read);
        assert!(pace.notified());
        assert_eq!(pace.next(start + ms(1400)), Step::Wait(ms(600)));
        assert_eq!(pace.next(start + ms(2500)), Step::Read);
        assert!(pace.notified());
        assert_eq!(pace.next(start + ms(3500)), Step::Read);
    }

    #[test]
    fn notifications_during_a_read_make_at_most_one_more() {
        let start = Instant::now();
        let mut pace = Pace::new(start, EVERY);
        pace.notified();
        assert_eq!(pace.next(start + ms(1000)), Step::Read);
        // The read runs; 100 notifications arrive meanwhile.
        let fresh = (0..100).filter(|_| pace.notified()).count();
        assert_eq!(fresh, 1);
        assert_eq!(pace.next(start + ms(1200)), Step::Wait(ms(800)));
        assert_eq!(pace.next(start + ms(2000)), Step::Read);
        assert_eq!(pace.next(start + ms(2000)), Step::Idle);
    }

    #[test]
    fn over_a_long_storm_reads_are_bounded_by_the_interval() {
        // A notification every millisecond for ten seconds, the reader looking as often.
        let start = Instant::now();
        let mut pace = Pace::new(start, EVERY);
        let mut reads = 0;
        let mut coalesced = 0;
        for tick in 0..10_000 {
            if !pace.notified() {
                coalesced += 1;
            }
            if pace.next(start + ms(tick)) == Step::Read {
                reads += 1;
            }
        }
        assert_eq!(reads, 9, "one per second after the session's first read");
        assert_eq!(coalesced, 10_000 - reads - 1);
    }
}
