//! Per-call authentication cost: a token already in the verified-token cache (one indexed
//! read of the credential row, no argon2) against a first presentation (the same read plus
//! one argon2id verification with the OWASP parameters).
//!
//! Run with `cargo bench --bench auth`; it prints nanoseconds per call. Optional arguments:
//! `--cached N` and `--uncached N` (iterations, default 20000 and 20).

use std::time::Instant;

use tollgate::guards::auth::{self, Authenticator, Mode, NewKey};
use tollgate::store::{Company, Store, StoreOptions};

fn arg(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let cached_iterations = arg("--cached", 20_000);
    let uncached_iterations = arg("--uncached", 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        create: true,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("bench.db"), &opts).expect("open");
    let company = Company {
        name: "Bench".into(),
        tax_id: None,
        plan_slug: "pro".into(),
        locale: "en".into(),
        country: "ES".into(),
    };
    store.set_company(&company).expect("company");
    let new = NewKey {
        name: "bench".into(),
        scopes: vec!["*".into()],
        expires_in: None,
        client_id: None,
        mode: Mode::Live,
        guard_channel: None,
    };
    let key = auth::create_key(&store, &new).expect("key");
    let token = key.token.expose();

    let authenticator = Authenticator::new(store.clone(), tollgate::clock::Clock::System);
    authenticator
        .authenticate(Some(token), "bench")
        .expect("first call");
    let started = Instant::now();
    for _ in 0..cached_iterations {
        authenticator
            .authenticate(Some(token), "bench")
            .expect("cached call");
    }
    let cached_ns = started.elapsed().as_nanos() / u128::from(cached_iterations);
    assert_eq!(
        authenticator.argon2_runs(),
        1,
        "the cached loop must not run argon2"
    );

    let started = Instant::now();
    for _ in 0..uncached_iterations {
        let cold = Authenticator::new(store.clone(), tollgate::clock::Clock::System);
        cold.authenticate(Some(token), "bench")
            .expect("uncached call");
    }
    let uncached_ns = started.elapsed().as_nanos() / u128::from(uncached_iterations);

    println!(
        "authentication, cached token:      {cached_ns:>12} ns/call ({cached_iterations} calls)"
    );
    println!(
        "authentication, one argon2 verify: {uncached_ns:>12} ns/call ({uncached_iterations} calls)"
    );
    println!(
        "ratio: {:.0}x",
        uncached_ns as f64 / cached_ns.max(1) as f64
    );
}
