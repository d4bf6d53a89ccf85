//! Stores for the unit tests: each test that should hold on both engines runs on a fresh
//! SQLite file and, when `TOLLGATE_TEST_POSTGRES` names a server (a URL without a
//! database, e.g. `postgres://postgres@127.0.0.1:5432`), on a fresh PostgreSQL database
//! dropped afterwards.

use super::{Store, StoreOptions};

/// A scratch database on one engine; dropping it removes it.
pub(crate) struct Scratch {
    pub(crate) store: Store,
    _dir: Option<tempfile::TempDir>,
    postgres: Option<(String, String)>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some((server, name)) = self.postgres.take() {
            // FORCE ends the pool's connections still open.
            if let Ok(mut admin) =
                ::postgres::Client::connect(&format!("{server}/postgres"), ::postgres::NoTls)
            {
                let _ =
                    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }
}

/// A fresh, created store on each engine available (SQLite always).
pub(crate) fn stores() -> Vec<Scratch> {
    let opts = StoreOptions {
        create: true,
        ..StoreOptions::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("tollgate.db"), &opts).expect("open sqlite");
    let mut out = vec![Scratch {
        store,
        _dir: Some(dir),
        postgres: None,
    }];
    if let Some(scratch) = postgres_store(&opts) {
        out.push(scratch);
    }
    out
}

/// A fresh PostgreSQL store, when `TOLLGATE_TEST_POSTGRES` names a server.
pub(crate) fn postgres_store(opts: &StoreOptions) -> Option<Scratch> {
    let server = std::env::var("TOLLGATE_TEST_POSTGRES").ok()?;
    let server = server.trim_end_matches('/').to_owned();
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).expect("random");
    let name = format!("tg_unit_{}", hex::encode(bytes));
    let mut admin = ::postgres::Client::connect(&format!("{server}/postgres"), ::postgres::NoTls)
        .expect("TOLLGATE_TEST_POSTGRES: cannot connect");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create database");
    let database = crate::config::Database::parse(&format!("{server}/{name}")).expect("url");
    let store = Store::open_database(&database, opts).expect("open postgres");
    Some(Scratch {
        store,
        _dir: None,
        postgres: Some((server, name)),
    })
}
