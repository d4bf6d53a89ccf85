//! The protocol side of a running tool's link to its client
//! ([`crate::tools::ClientLink`]): progress and log messages become JSON-RPC
//! notifications on the request's stream, a changed resource is queued for its
//! subscribers, and a server→client request (handshake era only) is sent on the stream and
//! its answer awaited through the connection's [`Session`].

use std::time::Duration;

use serde_json::{Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::protocol::jsonrpc;
use crate::protocol::revisions::{Era, Session, Subscribers};
use crate::tools::{ClientLink, LogLevel};

/// How often a wait for the client's answer looks whether to give up.
const ANSWER_POLL: Duration = Duration::from_millis(100);

/// Where the messages of a request go besides its response. Each transport implements
/// it for the stream of the request being served.
pub trait Notifier: Send + Sync {
    /// Sends one JSON-RPC message related to the current request.
    fn notify(&self, message: Value);

    /// Whether what [`Notifier::notify`] is given reaches the client: false for a request
    /// that cannot stream, which drops it.
    fn delivers(&self) -> bool {
        true
    }

    /// The request starts waiting on another system: it gives up the place the transport
    /// keeps for requests being worked on (where it has such places), so that a slow
    /// system never stops the server working on other requests.
    fn step_away(&self) {}

    /// The wait [`Notifier::step_away`] began is over: the request takes a place again.
    fn step_back(&self) {}
}

/// The client of one request, as its tool reaches it.
pub struct RequestClient<'a> {
    /// The connection state (handshake era), for requests to the client.
    pub session: &'a Session,
    /// The sessions subscribed to resources, told when a tool changes one.
    pub subscribers: &'a Subscribers,
    /// The stream of the request.
    pub notifier: &'a dyn Notifier,
    /// The protocol era of the request.
    pub era: Era,
}

impl ClientLink for RequestClient<'_> {
    fn progress(&self, token: &Value, progress: f64, total: Option<f64>, message: Option<&str>) {
        let mut params = json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        self.notifier
            .notify(jsonrpc::notification("notifications/progress", params));
    }

    fn log(&self, level: LogLevel, data: Value) {
        let mut params = json!({ "level": level.as_str(), "logger": "tollgate" });
        params["data"] = data;
        self.notifier
            .notify(jsonrpc::notification("notifications/message", params));
    }

    fn resource_updated(&self, uri: &str) {
        self.subscribers.changed(uri);
    }

    fn can_ask(&self, capability: &str) -> bool {
        !self.era.is_modern() && self.session.client_supports(capability)
    }

    fn step_away(&self) {
        self.notifier.step_away();
    }

    fn step_back(&self) {
        self.notifier.step_back();
    }

    fn ask(
        &self,
        method: &str,
        params: Value,
        give_up: &dyn Fn() -> Option<McpError>,
    ) -> Result<Value, McpError> {
        let (id, answer) = self.session.expect_response();
        self.notifier
            .notify(jsonrpc::request(id.clone(), method, params));
        let outcome = loop {
            if let Some(err) = give_up() {
                break Err(err);
            }
            if let Ok(message) = answer.recv_timeout(ANSWER_POLL) {
                break Ok(message);
            }
        };
        self.session.abandon(&id);
        let message = outcome?;
        match message.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(McpError::new(ErrorKind::AdapterError).detail(
                "original_error",
                message
                    .pointer("/error/code")
                    .cloned()
                    .unwrap_or(Value::Null),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::protocol::revisions::LATEST_LEGACY;

    /// Records every message sent on the stream.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Value>>);

    impl Notifier for Recorder {
        fn notify(&self, message: Value) {
            self.0.lock().expect("recorder lock").push(message);
        }
    }

    #[test]
    fn progress_and_log_messages_are_notifications_on_the_stream() {
        let (session, subscribers, recorder) =
            (Session::new(), Subscribers::default(), Recorder::default());
        let client = RequestClient {
            session: &session,
            subscribers: &subscribers,
            notifier: &recorder,
            era: Era::Legacy(LATEST_LEGACY),
        };
        client.progress(&json!("t"), 50.0, Some(100.0), None);
        client.log(LogLevel::Info, json!("ran"));
        let sent = recorder.0.lock().expect("recorder lock").clone();
        assert_eq!(
            sent,
            [
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "t", "progress": 50.0, "total": 100.0}}),
                json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "logger": "tollgate", "data": "ran"}}),
            ]
        );
    }

    #[test]
    fn a_changed_resource_queues_one_update_per_subscribed_session() {
        let subscribers = Subscribers::default();
        let (caller, watcher, bystander) = (Session::new(), Session::new(), Session::new());
        watcher.subscribe("test://watched-resource", &subscribers);
        let recorder = Recorder::default();
        let client = RequestClient {
            session: &caller,
            subscribers: &subscribers,
            notifier: &recorder,
            era: Era::Legacy(LATEST_LEGACY),
        };
        client.resource_updated("test://watched-resource");
        client.resource_updated("test://watched-resource");
        assert!(recorder.0.lock().expect("recorder lock").is_empty());
        assert_eq!(
            watcher.take_updates(),
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                        "params": {"uri": "test://watched-resource"}})
            ]
        );
        assert!(caller.take_updates().is_empty() && bystander.take_updates().is_empty());
    }

    #[test]
    fn only_the_handshake_era_asks_and_only_for_declared_capabilities() {
        let (session, subscribers, recorder) =
            (Session::new(), Subscribers::default(), Recorder::default());
        assert!(session.initialize(LATEST_LEGACY, json!({"sampling": {}})));
        let client = |era| RequestClient {
            session: &session,
            subscribers: &subscribers,
            notifier: &recorder,
            era,
        };
        assert!(client(Era::Legacy(LATEST_LEGACY)).can_ask("sampling"));
        assert!(!client(Era::Legacy(LATEST_LEGACY)).can_ask("elicitation"));
        assert!(!client(Era::Modern("2026-07-28")).can_ask("sampling"));
    }
}
