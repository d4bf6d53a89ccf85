//! An upstream call's progress on its way to the caller, at the gate's pace: the newest
//! notification is kept ([`LatestProgress`], filled by the session as notifications come)
//! and passed on ([`Relay`], by the call's waiting thread) at most once per
//! [`PROGRESS_EVERY`], only when it is higher than the last one passed on. Also how much of
//! an upstream's own message text is kept ([`cut`]), in a progress message or an error.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::ProgressNotificationParam;

/// The shortest time between two progress notifications relayed to the caller.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How much of the upstream's own message `details.message` (and a progress message) keeps.
const MESSAGE_MAX_CHARS: usize = 300;

/// One upstream progress notification, as relayed to the caller (its message cut to
/// [`MESSAGE_MAX_CHARS`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Progress {
    /// How far the call got.
    pub(super) progress: f64,
    /// Out of how much, when the upstream says.
    pub(super) total: Option<f64>,
    /// What the upstream says it is doing.
    pub(super) message: Option<String>,
}

impl From<&ProgressNotificationParam> for Progress {
    fn from(params: &ProgressNotificationParam) -> Progress {
        Progress {
            progress: params.progress,
            total: params.total,
            message: params.message.as_deref().map(cut),
        }
    }
}

/// The newest progress of one call not yet taken: the upstream's notifications replace it
/// as they come (on the runtime), the waiting thread takes it at its own pace.
#[derive(Debug, Default)]
pub(super) struct LatestProgress {
    newest: Mutex<Option<Progress>>,
}

impl LatestProgress {
    fn newest(&self) -> std::sync::MutexGuard<'_, Option<Progress>> {
        match self.newest.lock() {
            Ok(newest) => newest,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Keeps `progress` unless a higher one is already waiting (notifications are handled
    /// concurrently, so one may arrive behind a later one).
    pub(super) fn offer(&self, progress: Progress) {
        let mut newest = self.newest();
        if newest
            .as_ref()
            .is_none_or(|waiting| progress.progress > waiting.progress)
        {
            *newest = Some(progress);
        }
    }

    /// The progress waiting, if any.
    pub(super) fn take(&self) -> Option<Progress> {
        self.newest().take()
    }
}

/// What of a call's progress goes to the caller, and when.
pub(super) struct Relay<'a> {
    latest: &'a LatestProgress,
    every: Duration,
    last_at: Option<Instant>,
    last_value: Option<f64>,
}

impl<'a> Relay<'a> {
    /// A relay of `latest` that passes progress on at most once per `every`.
    pub(super) fn new(latest: &'a LatestProgress, every: Duration) -> Relay<'a> {
        Relay {
            latest,
            every,
            last_at: None,
            last_value: None,
        }
    }

    /// The progress to relay at `now`: the newest that came, when `every` has passed since
    /// the last one relayed and it is higher than that one.
    pub(super) fn poll(&mut self, now: Instant) -> Option<Progress> {
        if self.last_at.is_some_and(|at| now < at + self.every) {
            return None;
        }
        let progress = self.higher(self.latest.take()?)?;
        self.last_at = Some(now);
        Some(progress)
    }

    /// The progress to relay before the result, however soon after the last one: the
    /// newest, when it is higher than the last one relayed.
    pub(super) fn last(&mut self) -> Option<Progress> {
        self.higher(self.latest.take()?)
    }

    fn higher(&mut self, progress: Progress) -> Option<Progress> {
        if self
            .last_value
            .is_some_and(|last| progress.progress <= last)
        {
            return None;
        }
        self.last_value = Some(progress.progress);
        Some(progress)
    }
}

/// `text` cut to [`MESSAGE_MAX_CHARS`] characters.
pub(super) fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(MESSAGE_MAX_CHARS).collect();
    if text.chars().count() > MESSAGE_MAX_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn progress(value: f64) -> Progress {
        Progress {
            progress: value,
            total: Some(100.0),
            message: None,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_newest_progress_is_kept_unless_a_higher_one_waits() {
        let latest = LatestProgress::default();
        latest.offer(progress(1.0));
        latest.offer(progress(3.0));
        latest.offer(progress(2.0));
        assert_eq!(latest.take(), Some(progress(3.0)));
        assert_eq!(latest.take(), None);
        latest.offer(progress(1.0));
        assert_eq!(latest.take(), Some(progress(1.0)));
    }

    #[test]
    fn progress_is_relayed_at_most_once_per_interval_and_only_increasing() {
        let latest = LatestProgress::default();
        let mut relay = Relay::new(&latest, PROGRESS_EVERY);
        let start = Instant::now();
        assert_eq!(relay.poll(start), None, "nothing came yet");
        latest.offer(progress(1.0));
        assert_eq!(relay.poll(start), Some(progress(1.0)));
        latest.offer(progress(2.0));
        assert_eq!(relay.poll(start + ms(100)), None, "too soon");
        latest.offer(progress(5.0));
        assert_eq!(relay.poll(start + ms(250)), Some(progress(5.0)));
        // Lower than the last relayed: dropped, even when due.
        latest.offer(progress(4.0));
        assert_eq!(relay.poll(start + ms(600)), None);
        assert_eq!(latest.take(), None);
    }

    #[test]
    fn a_flood_is_relayed_a_few_times_a_second_and_its_last_value_before_the_result() {
        let latest = LatestProgress::default();
        let mut relay = Relay::new(&latest, PROGRESS_EVERY);
        let start = Instant::now();
        let mut relayed = Vec::new();
        // 100 notifications between two looks of the waiting thread, every 50 ms, for 2 s.
        let mut value = 0.0;
        for turn in 0..40 {
            for _ in 0..100 {
                value += 1.0;
                latest.offer(progress(value));
            }
            relayed.extend(relay.poll(start + ms(turn * 50)));
        }
        assert_eq!(relayed.len(), 8, "one per 250 ms over 2 s");
        assert!(relayed.windows(2).all(|w| w[0].progress < w[1].progress));
        assert_eq!(
            relay.last(),
            Some(progress(value)),
            "the newest, before the result"
        );
        assert_eq!(relay.last(), None, "and only once");
    }

    #[test]
    fn a_progress_message_is_cut() {
        let params: ProgressNotificationParam = serde_json::from_value(json!({
            "progressToken": 1, "progress": 1, "message": "m".repeat(10_000)
        }))
        .expect("params");
        let relayed = Progress::from(&params);
        assert_eq!(
            relayed.message.map(|m| m.chars().count()),
            Some(MESSAGE_MAX_CHARS + 1)
        );
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(MESSAGE_MAX_CHARS + 10);
        let kept = cut(&long);
        assert_eq!(kept.chars().count(), MESSAGE_MAX_CHARS + 1);
        assert!(kept.ends_with('…'));
        assert_eq!(cut("short"), "short");
    }
}
