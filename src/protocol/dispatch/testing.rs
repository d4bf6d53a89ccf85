//! A server for the dispatcher's unit tests: a fresh database on the `pro` plan with the
//! built-in tools, resources and prompts (and the conformance fixtures when asked), a key that may call every tool, and requests
//! and environments to call the handlers with.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Env, Server, Transport};
use crate::clock::Clock;
use crate::config::Locale;
use crate::guards::Guards;
use crate::guards::auth::{Mode, Principal};
use crate::protocol::client::Notifier;
use crate::protocol::jsonrpc::Request;
use crate::protocol::revisions::Session;
use crate::tools::request_state::StateKey;
use crate::tools::{Prompt, Registry, ResourceProvider, Tool};

/// A server on a scratch database, and a token of a key with every scope.
pub(super) struct Fixture {
    pub(super) server: Server,
    pub(super) token: String,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// The built-in invoicing tools, resources and prompts.
    pub(super) fn invoicing() -> Fixture {
        Fixture::with_packs(|_| {})
    }

    /// The built-in packs and the conformance suite's fixtures (a resource that changes,
    /// tools that send log messages).
    #[cfg(feature = "conformance-pack")]
    pub(super) fn conformance() -> Fixture {
        Fixture::with_packs(|packs| {
            packs.tools.extend(crate::tools::conformance::tools());
            packs
                .resources
                .extend(crate::tools::conformance::resources());
            packs.prompts.extend(crate::tools::conformance::prompts());
        })
    }

    /// The built-in packs, with what `add` adds to them.
    fn with_packs(add: impl FnOnce(&mut Packs)) -> Fixture {
        let (dir, store) = crate::guards::auth::testing::fresh("pro");
        let clock = Clock::System;
        let mut packs = Packs {
            tools: crate::tools::invoicing::tools(),
            resources: crate::tools::invoicing::resources(),
            prompts: crate::tools::invoicing::prompts(store.clone(), clock.clone()),
        };
        add(&mut packs);
        let Packs {
            tools,
            resources,
            prompts,
        } = packs;
        let retired = crate::tools::invoicing::retired::RETIRED_TOOLS;
        let registry = Registry::new(tools, retired, resources, prompts).expect("registry");
        let token = crate::guards::auth::testing::key(&store, &["*"])
            .token
            .expose()
            .to_owned();
        let guards = Guards::new(store.clone(), Locale::En, clock.clone());
        let state_key = StateKey::new(vec![7; 32]);
        Fixture {
            server: Server::new(registry, store, guards, Locale::En, state_key, clock),
            token,
            _dir: dir,
        }
    }

    /// A live principal holding `scopes`.
    pub(super) fn principal(&self, scopes: &[&str]) -> Principal {
        Principal {
            credential_id: "unit".into(),
            client_id: None,
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            mode: Mode::Live,
            guard_channel: None,
            installation: Mode::Live,
            roles: Vec::new(),
        }
    }

    /// A stdio request's environment in `session`, presenting `token`.
    pub(super) fn env<'a>(&self, session: &'a Session, token: Option<&'a str>) -> Env<'a> {
        Env {
            session,
            notifier: &Silent,
            transport: Transport::Stdio,
            token,
            dev_credential: None,
            source: "stdio:unit".to_owned(),
            idempotency_header: None,
            http: None,
            session_id: None,
        }
    }
}

/// What a registry is built from.
struct Packs {
    tools: Vec<Arc<dyn Tool>>,
    resources: Vec<Arc<dyn ResourceProvider>>,
    prompts: Vec<Arc<dyn Prompt>>,
}

/// A request with id 1.
pub(super) fn request(method: &str, params: Value) -> Request {
    Request {
        id: Some(json!(1)),
        method: method.to_owned(),
        params: params.as_object().cloned().unwrap_or_default(),
    }
}

/// A notifier of a request that cannot stream: nothing is sent.
struct Silent;

impl Notifier for Silent {
    fn notify(&self, _message: Value) {}

    fn delivers(&self) -> bool {
        false
    }
}
