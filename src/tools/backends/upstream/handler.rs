//! tollgate as the upstream's MCP client ([`Handler`]): what it declares at the handshake,
//! and what it does with the upstream's notifications: progress routed to the calls
//! waiting for it ([`ProgressRoutes`]), a list marked as due to be read again
//! ([`super::relist`]), a resource's update passed on to the sessions subscribed to it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};

use super::Shared;
use super::progress::{LatestProgress, Progress};
use super::relist::ListChanges;

/// Progress notifications kept while their call is being registered.
const EARLY_PROGRESS: usize = 32;

/// Routes the upstream's progress notifications to the calls waiting for them, by the
/// progress token rmcp put on each request. Each call holds only the newest notification
/// ([`LatestProgress`]): a flood of them costs the memory of one.
#[derive(Default)]
pub(super) struct ProgressRoutes {
    inner: Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, Arc<LatestProgress>>,
    /// Notifications that arrived before their call registered (a fast upstream).
    early: VecDeque<ProgressNotificationParam>,
}

impl ProgressRoutes {
    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        match self.inner.lock() {
            Ok(routes) => routes,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Sends the progress of `token` to `latest` from now on (and what already came).
    pub(super) fn register(&self, token: ProgressToken, latest: Arc<LatestProgress>) {
        let mut routes = self.routes();
        for params in routes.early.iter().filter(|p| p.progress_token == token) {
            latest.offer(Progress::from(params));
        }
        routes.early.retain(|p| p.progress_token != token);
        routes.calls.insert(token, latest);
    }

    /// Stops routing `token`.
    pub(super) fn unregister(&self, token: &ProgressToken) {
        self.routes().calls.remove(token);
    }

    fn deliver(&self, params: ProgressNotificationParam) {
        let mut routes = self.routes();
        if let Some(latest) = routes.calls.get(&params.progress_token) {
            latest.offer(Progress::from(&params));
            return;
        }
        if routes.early.len() >= EARLY_PROGRESS {
            routes.early.pop_front();
        }
        routes.early.push_back(params);
    }
}

/// tollgate as an MCP client: relays progress and resource updates, marks the lists as
/// changed.
pub(super) struct Handler {
    pub(super) shared: Weak<Shared>,
    pub(super) progress: Arc<ProgressRoutes>,
    pub(super) changes: Arc<ListChanges>,
    pub(super) offer_changes: Arc<ListChanges>,
}

impl Handler {
    /// Marks the lists `changes` follows as due to be read again.
    fn mark(&self, changes: &ListChanges) -> std::future::Ready<()> {
        if let Some(shared) = self.shared.upgrade() {
            changes.notified(&shared);
        }
        std::future::ready(())
    }
}

impl ClientHandler for Handler {
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.progress.deliver(params);
        std::future::ready(())
    }

    /// Only marks the list as due to be read again: the session's reader reads it, at its
    /// own pace, however many notifications come.
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.mark(&self.changes)
    }

    /// Its resources and prompts are read again together, at the same pace.
    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.mark(&self.offer_changes)
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.mark(&self.offer_changes)
    }

    fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if let Some(shared) = self.shared.upgrade() {
            shared.resource_updated(&params.uri);
        }
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("tollgate", env!("CARGO_PKG_VERSION")),
        );
        // The handshake era: the newest revision that still has `initialize`.
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_that_comes_before_its_call_registered_is_kept_for_it() {
        let routes = ProgressRoutes::default();
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        let params = |progress: u32| -> ProgressNotificationParam {
            serde_json::from_value(serde_json::json!({
                "progressToken": 7, "progress": progress, "total": 10
            }))
            .expect("params")
        };
        routes.deliver(params(1));
        let latest = Arc::new(LatestProgress::default());
        routes.register(token.clone(), Arc::clone(&latest));
        assert_eq!(latest.take().map(|p| p.progress), Some(1.0));
        for progress in 2..=9 {
            routes.deliver(params(progress));
        }
        // Only the newest is held.
        assert_eq!(latest.take().map(|p| p.progress), Some(9.0));
        assert_eq!(latest.take(), None);
        routes.unregister(&token);
        assert!(routes.routes().calls.is_empty() && routes.routes().early.is_empty());
    }
}
