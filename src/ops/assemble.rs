//! What assembles a server for `serve` and `stdio`: the database opened (and checked
//! writable), the clock (the database server's on PostgreSQL), the registry, the guards and
//! the backends, and the background work that keeps them current.

use std::process::ExitCode;
use std::sync::Arc;

use super::exit::{fail, refuse};
use super::registry::build_registry_with;
use crate::clock::Clock;
use crate::config::{Config, Locale};
use crate::guards::Guards;
use crate::protocol::dispatch::Server;
use crate::store::Store;

pub(super) use super::open_store;

/// Opens the existing database and assembles the server for `stdio` and `serve`.
pub(super) fn open_server(config: &Config) -> Result<Arc<Server>, ExitCode> {
    let store = open_store(config, false)?;
    // A server that cannot write refuses every call: say so, and why, before serving.
    store.ensure_writable().map_err(|e| {
        if e.is_refusal() {
            refuse(&e.to_string())
        } else {
            fail(&format!("cannot write to the database: {e}"))
        }
    })?;
    store.checkpoint_in_background();
    let server = Arc::new(build_server(config, store.clone()).map_err(|e| fail(&e))?);
    crate::guards::audit::prune_in_background(
        &store,
        config.audit.retention_days,
        server.clock().clone(),
    );
    super::backends::follow_changes(&server, config);
    Ok(server)
}

/// Builds the server for the configured database and tool packs, on the system clock — on
/// a PostgreSQL store corrected to the database server's clock, so that every node reads
/// one time ([`database_clock`]).
pub fn build_server(config: &Config, store: Store) -> Result<Server, String> {
    let clock = database_clock(&store);
    build_server_with_clock(config, store, clock)
}

/// Builds the server with every component reading the time from `clock` (tests drive
/// window edges and expiries with a [`crate::clock::ManualClock`]).
pub fn build_server_with_clock(
    config: &Config,
    store: Store,
    clock: Clock,
) -> Result<Server, String> {
    let backends = super::backends::open(config, &clock, &store)?;
    let registry =
        build_registry_with(config, &store, &clock, backends.tools())?.with_held(backends.held());
    let locale = match config.locale {
        Some(locale) => locale,
        None => company_locale(&store),
    };
    let state_key = store
        .server_secret("request_state")
        .map(crate::tools::request_state::StateKey::new)
        .map_err(|e| format!("cannot read the server secret: {e}"))?;
    let mut guards = Guards::new(store.clone(), locale, clock.clone())
        .with_guard_channel(config.errors.guard_channel)
        .with_policy(&config.policy, &console_address(config));
    if !config.auth.issuers.is_empty() {
        let identity = crate::identity::Identity::start(&config.auth.issuers, clock.clone())
            .map_err(|e| format!("cannot start verifying identity-provider tokens: {e}"))?;
        guards = guards.with_identity(Arc::new(identity));
    }
    guards
        .authenticator()
        .limit_argon2_per_second(config.auth.argon2_per_second);
    Ok(Server::new(registry, store, guards, locale, state_key, clock).with_backends(backends))
}

fn company_locale(store: &Store) -> Locale {
    store
        .company()
        .ok()
        .flatten()
        .and_then(|c| c.locale.parse().ok())
        .unwrap_or(Locale::En)
}

/// Measures the database server's clock into `shared`, warning when this machine's clock
/// is more than [`CLOCK_SKEW_WARNING_MS`] off it and the skew moved; a failed measurement
/// keeps the last correction.
fn remeasure_clock(store: &Store, shared: &crate::clock::SharedClock) {
    match store.clock_offset_millis() {
        Ok(Some(offset)) => {
            if offset.abs() > CLOCK_SKEW_WARNING_MS
                && (offset - shared.offset_millis()).abs() > CLOCK_SKEW_WARNING_MS / 2
            {
                tracing::warn!(
                    offset_ms = offset,
                    "this machine's clock is off the database server's; tollgate follows the database's"
                );
            }
            shared.set_offset_millis(offset);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            cause = %e,
            "cannot read the database server's clock; keeping the last correction"
        ),
    }
}

/// How often a node re-measures its clock against the database server's.
const CLOCK_REMEASURE: std::time::Duration = std::time::Duration::from_secs(60);

/// A node's skew beyond which it warns (windows and expiries follow the database anyway).
const CLOCK_SKEW_WARNING_MS: i64 = 1_000;

/// The system clock, or on a PostgreSQL store the system clock corrected to the database
/// server's: rate windows, leases and expiries of every node then start and end together
/// however far apart the machines' own clocks drift. The correction is measured at start
/// and again every [`CLOCK_REMEASURE`] on a thread of its own.
fn database_clock(store: &Store) -> Clock {
    if store.dialect() == crate::store::Dialect::Sqlite {
        return Clock::System;
    }
    let shared = crate::clock::SharedClock::default();
    remeasure_clock(store, &shared);
    let follow = shared.clone();
    let store = store.clone();
    let spawned = std::thread::Builder::new()
        .name("database-clock".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(CLOCK_REMEASURE);
                remeasure_clock(&store, &follow);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(cause = %e, "cannot start the clock follower; the correction measured at start stays");
    }
    shared.clock()
}

/// The console's address as a person's browser reaches it (`http.public_base_url`, else
/// the listener's address): approvals' pages are under it.
fn console_address(config: &Config) -> String {
    let base = match &config.http.public_base_url {
        Some(base) => base.trim_end_matches('/').to_owned(),
        None => format!("http://{}", config.http.listen),
    };
    format!("{base}/console")
}
