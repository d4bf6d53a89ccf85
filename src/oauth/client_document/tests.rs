//! The fetcher against clients' servers on 127.0.0.1 over real TLS: the URL rules, the
//! address checks, each bound of the fetch, the document's rules and the cache, read on a
//! manual clock.

mod server;

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::clock::ManualClock;
use server::{Pki, Reply, TlsServer};

const NOW: i64 = 1_780_000_000;

/// A minimal valid document for `client_id`.
fn document(client_id: &str) -> Value {
    json!({
        "client_id": client_id,
        "client_name": "Example Agent",
        "redirect_uris": ["https://agent.example.com/callback"],
    })
}

/// A server answering every path with the minimal document of that path's URL.
fn serving(pki: &Pki) -> TlsServer {
    TlsServer::start(pki, |path, base| {
        Reply::json(document(&format!("{base}{path}")).to_string())
    })
}

/// Settings that trust `pki`'s authority and allow `allow_hosts`.
fn settings(pki: &Pki, allow_hosts: &[String]) -> DocumentSettings {
    DocumentSettings {
        allow_hosts: allow_hosts.to_vec(),
        ca_file: Some(pki.ca_file.clone()),
        ..DocumentSettings::default()
    }
}

fn fetcher(settings: DocumentSettings) -> (DocumentFetcher, ManualClock) {
    let clock = ManualClock::at_unix_secs(NOW);
    let fetcher = DocumentFetcher::start(settings, clock.clock()).expect("fetcher starts");
    (fetcher, clock)
}

/// A fetcher that allows the test server's `localhost:PORT`.
fn allowing(pki: &Pki, server: &TlsServer) -> (DocumentFetcher, ManualClock) {
    fetcher(settings(pki, &[format!("localhost:{}", server.port())]))
}

fn bad_url(client_id: &str) -> Option<&'static str> {
    match Target::parse(client_id, &[]) {
        Err(DocumentError::BadUrl(why)) => Some(why),
        _ => None,
    }
}

#[test]
fn a_document_client_id_is_an_https_url() {
    assert!(is_document_client_id(
        "https://agent.example.com/client.json"
    ));
    assert!(!is_document_client_id(
        "http://agent.example.com/client.json"
    ));
    assert!(!is_document_client_id("c_01hxyz"));
    assert!(!is_document_client_id(""));
}

#[test]
fn the_client_id_url_rules_are_checked_before_anything_is_sent() {
    let refused = [
        ("http://agent.example.com/client.json", "https"),
        ("ftp://agent.example.com/client.json", "https"),
        ("HTTPS://agent.example.com/client.json", "https"),
        ("agent.example.com/client.json", "https"),
        ("https://user:secret@agent.example.com/c", "user name"),
        ("https://user@agent.example.com/c", "user name"),
        ("https://@agent.example.com/c", "user name"),
        ("https://agent.example.com/c#x", "fragment"),
        ("https://agent.example.com/c#", "fragment"),
        ("https://agent.example.com", "path"),
        ("https://agent.example.com/", "path"),
        ("https://agent.example.com/?client=1", "path"),
        ("https://agent.example.com/a/../c", ". or .."),
        ("https://agent.example.com/./c", ". or .."),
        ("https://agent.example.com/c/..", ". or .."),
        ("https://agent.example.com/%2e%2E/c", ". or .."),
        ("https://agent.example.com/.%2e/c", ". or .."),
        ("https://agent.example.com/%2e/c", ". or .."),
        ("https://agent.example.com/a\\..\\c", ". or .."),
        ("https://agent.example.com/c d", "spaces"),
        ("https://agent.exam\tple.com/c", "spaces"),
        ("https://agent.example.com/c\n", "spaces"),
        ("https:///agent.example.com/c", "no host"),
        ("https://?q/c", "no host"),
        ("https://exa mple.com/c", "spaces"),
        ("https://[::1/c", "not a valid URL"),
    ];
    for (client_id, why) in refused {
        let refusal = bad_url(client_id).unwrap_or_else(|| panic!("{client_id} is refused"));
        assert!(refusal.contains(why), "{client_id}: {refusal}");
    }
    let too_long = format!("https://agent.example.com/{}", "a".repeat(2048));
    assert_eq!(bad_url(&too_long), Some("the client_id URL is too long"));
    let longest = format!("https://agent.example.com/{}", "a".repeat(2048 - 26));
    assert_eq!(longest.len(), 2048);
    assert!(Target::parse(&longest, &[]).is_ok());
    for accepted in [
        "https://agent.example.com/client.json",
        "https://agent.example.com/oauth/client?version=2",
        "https://agent.example.com:8443/c",
        "https://agent.example.com/.well-known/client",
        "https://agent.example.com/a.b/..c/c..",
    ] {
        let target = Target::parse(accepted, &[]).expect(accepted);
        assert_eq!(target.client_id, accepted);
        assert!(!target.allowed);
    }
}

#[test]
fn ip_address_hosts_that_are_not_public_are_refused_in_every_spelling() {
    for client_id in [
        "https://127.0.0.1/c",
        "https://127.0.0.1./c",
        "https://127.1/c",
        "https://2130706433/c",
        "https://0177.0.0.1/c",
        "https://0x7f.0.0.1/c",
        "https://0x7f000001/c",
        "https://169.254.169.254/latest/meta-data",
        "https://0xa9fea9fe/c",
        "https://10.0.0.1/c",
        "https://192.168.1.1/c",
        "https://100.64.0.1/c",
        "https://0.0.0.0/c",
        "https://[::1]/c",
        "https://[::]/c",
        "https://[::ffff:127.0.0.1]/c",
        "https://[::ffff:a9fe:a9fe]/c",
        "https://[64:ff9b::7f00:1]/c",
        "https://[fd00::1]/c",
        "https://[fe80::1]/c",
    ] {
        assert_eq!(
            Target::parse(client_id, &[]).err(),
            Some(DocumentError::ForbiddenAddress),
            "{client_id}"
        );
    }
    assert!(Target::parse("https://93.184.215.14/c", &[]).is_ok());
    assert!(Target::parse("https://[2606:4700::1111]/c", &[]).is_ok());
}

#[test]
fn allow_hosts_names_a_host_alone_or_with_its_port() {
    let allow = |entries: &[&str], client_id: &str| {
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_owned()).collect();
        Target::parse(client_id, &entries).map(|t| t.allowed)
    };
    assert_eq!(allow(&["127.0.0.1"], "https://127.0.0.1:9/c"), Ok(true));
    assert_eq!(allow(&["127.0.0.1:9"], "https://127.0.0.1:9/c"), Ok(true));
    assert_eq!(
        allow(&["127.0.0.1:10"], "https://127.0.0.1:9/c"),
        Err(DocumentError::ForbiddenAddress)
    );
    assert_eq!(
        allow(&["localhost"], "https://127.0.0.1/c"),
        Err(DocumentError::ForbiddenAddress)
    );
    assert_eq!(allow(&["[::1]:443"], "https://[::1]/c"), Ok(true));
    assert_eq!(allow(&["dev.test:443"], "https://dev.test/c"), Ok(true));
    assert_eq!(allow(&["dev.test:8443"], "https://dev.test/c"), Ok(false));
    assert_eq!(allow(&["other.test"], "https://dev.test/c"), Ok(false));
    // Allowing a host never lets plain http through.
    assert_eq!(
        allow(&["127.0.0.1"], "http://127.0.0.1/c"),
        Err(DocumentError::BadUrl("the client_id must be an https URL"))
    );
}

#[test]
fn an_allowed_host_is_served_and_the_document_read_with_its_defaults() {
    let pki = Pki::new();
    let server = serving(&pki);
    let (fetcher, _clock) = allowing(&pki, &server);
    let client_id = server.url("/client.json");
    let document = fetcher.get(&client_id).expect("served");
    assert_eq!(
        *document,
        ClientDocument {
            client_id: client_id.clone(),
            client_name: Some("Example Agent".to_owned()),
            client_uri: None,
            logo_uri: None,
            redirect_uris: vec!["https://agent.example.com/callback".to_owned()],
            grant_types: vec!["authorization_code".to_owned()],
            response_types: vec!["code".to_owned()],
            token_endpoint_auth_method: "none".to_owned(),
            scope: None,
        }
    );
    assert_eq!(server.hits("/client.json"), 1);
}

#[test]
fn an_ip_address_host_is_served_only_when_allowed() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| {
        let own_url = format!("{}{path}", base.replace("localhost", "127.0.0.1"));
        Reply::json(document(&own_url).to_string())
    });
    let client_id = format!("https://127.0.0.1:{}/client.json", server.port());
    let (refusing, _clock) = fetcher(settings(&pki, &[]));
    assert_eq!(
        refusing.get(&client_id).err(),
        Some(DocumentError::ForbiddenAddress)
    );
    assert_eq!(server.hits("/client.json"), 0, "nothing was sent");
    let allowed = format!("127.0.0.1:{}", server.port());
    let (allowing, _clock) = fetcher(settings(&pki, &[allowed]));
    let document = allowing.get(&client_id).expect("served");
    assert_eq!(document.client_id, client_id);
    assert_eq!(server.hits("/client.json"), 1);
}

#[test]
fn a_host_name_that_resolves_to_loopback_is_refused_unless_allowed() {
    let pki = Pki::new();
    let server = serving(&pki);
    let client_id = server.url("/client.json");
    let other_port = format!("localhost:{}", server.port().wrapping_add(1));
    for allow_hosts in [vec![], vec![other_port], vec!["127.0.0.1".to_owned()]] {
        let (refusing, _clock) = fetcher(settings(&pki, &allow_hosts));
        assert_eq!(
            refusing.get(&client_id).err(),
            Some(DocumentError::ForbiddenAddress),
            "allowing {allow_hosts:?}"
        );
    }
    assert_eq!(server.hits("/client.json"), 0, "nothing was sent");
    let (allowing, _clock) = fetcher(settings(&pki, &["LocalHost".to_owned()]));
    assert!(allowing.get(&client_id).is_ok());
    assert_eq!(server.hits("/client.json"), 1);
}

#[test]
fn the_checked_lookup_refuses_an_answer_with_any_forbidden_address() {
    let refusal = http::lookup("localhost").expect_err("loopback refused");
    assert_eq!(
        refusal.to_string(),
        "the host resolves to an address that is not public"
    );
}

#[test]
fn a_body_past_max_bytes_is_refused_with_or_without_a_content_length() {
    let pki = Pki::new();
    let max_bytes = 512;
    let server = TlsServer::start(&pki, move |path, base| {
        let mut body = document(&format!("{base}{path}")).to_string();
        let size = if path.starts_with("/over") {
            max_bytes + 1
        } else {
            max_bytes
        };
        body.push_str(&" ".repeat(size - body.len()));
        let reply = Reply::json(body);
        if path.ends_with("-unframed") {
            reply.without_length()
        } else {
            reply
        }
    });
    let (fetcher, _clock) = fetcher(DocumentSettings {
        max_bytes,
        ..settings(&pki, &[format!("localhost:{}", server.port())])
    });
    assert!(fetcher.get(&server.url("/exact")).is_ok());
    assert!(fetcher.get(&server.url("/exact-unframed")).is_ok());
    for path in ["/over", "/over-unframed"] {
        assert_eq!(
            fetcher.get(&server.url(path)).err(),
            Some(DocumentError::TooLarge),
            "{path}"
        );
        assert_eq!(server.hits(path), 1);
    }
}

#[test]
fn a_server_that_stalls_after_its_headers_is_cut_off_by_the_deadline() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| {
        Reply::json(document(&format!("{base}{path}")).to_string()).stalling_after(10)
    });
    let (fetcher, _clock) = fetcher(DocumentSettings {
        timeout: Duration::from_secs(1),
        ..settings(&pki, &[format!("localhost:{}", server.port())])
    });
    assert_eq!(
        fetcher.get(&server.url("/slow.json")).err(),
        Some(DocumentError::Timeout)
    );
    assert_eq!(server.hits("/slow.json"), 1);
}

#[test]
fn a_document_naming_another_client_id_is_refused() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| {
        let spoofed = format!("{base}/someone-else.json");
        let mut body = document(&spoofed);
        if path == "/reworded.json" {
            // The same URL written otherwise is not the same client_id.
            body["client_id"] = json!(format!(
                "{}/reworded.json",
                base.replace("localhost", "LOCALHOST")
            ));
        }
        Reply::json(body.to_string())
    });
    let (fetcher, _clock) = allowing(&pki, &server);
    for path in ["/client.json", "/reworded.json"] {
        assert_eq!(
            fetcher.get(&server.url(path)).err(),
            Some(DocumentError::WrongClientId),
            "{path}"
        );
    }
}

#[test]
fn a_redirect_is_not_followed() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| match path {
        "/moved.json" => Reply::json("")
            .untyped()
            .status(302)
            .header("Location", &format!("{base}/client.json")),
        _ => Reply::json(document(&format!("{base}/moved.json")).to_string()),
    });
    let (fetcher, _clock) = allowing(&pki, &server);
    let refusal = fetcher
        .get(&server.url("/moved.json"))
        .expect_err("refused");
    assert_eq!(refusal, DocumentError::Status(302));
    assert_eq!(
        refusal.to_string(),
        "the client_id URL answered HTTP 302; redirects are not followed"
    );
    assert_eq!(server.hits("/client.json"), 0);
}

#[test]
fn only_a_200_served_as_json_is_read() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| {
        let reply = Reply::json(document(&format!("{base}{path}")).to_string());
        match path {
            "/missing.json" => reply.status(404),
            "/created.json" => reply.status(201),
            "/html.json" => reply.untyped().header("Content-Type", "text/html"),
            "/text-json.json" => reply.untyped().header("Content-Type", "text/json"),
            "/untyped.json" => reply.untyped(),
            "/charset.json" => reply
                .untyped()
                .header("Content-Type", "Application/JSON; charset=utf-8"),
            "/specific.json" => reply
                .untyped()
                .header("Content-Type", "application/oauth-client+json"),
            _ => reply,
        }
    });
    let (fetcher, _clock) = allowing(&pki, &server);
    let outcome = |path: &str| fetcher.get(&server.url(path)).err();
    assert_eq!(outcome("/missing.json"), Some(DocumentError::Status(404)));
    assert_eq!(outcome("/created.json"), Some(DocumentError::Status(201)));
    assert_eq!(outcome("/html.json"), Some(DocumentError::NotJson));
    assert_eq!(outcome("/text-json.json"), Some(DocumentError::NotJson));
    assert_eq!(outcome("/untyped.json"), Some(DocumentError::NotJson));
    assert_eq!(outcome("/charset.json"), None);
    assert_eq!(outcome("/specific.json"), None);
}

#[test]
fn a_server_that_cannot_be_reached_or_trusted_is_unreachable() {
    let pki = Pki::new();
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let (fetcher, _clock) = fetcher(settings(&pki, &[format!("localhost:{closed_port}")]));
    assert_eq!(
        fetcher
            .get(&format!("https://localhost:{closed_port}/client.json"))
            .err(),
        Some(DocumentError::Unreachable)
    );
    // The server's certificate is issued by an authority the fetcher was not told of.
    let server = serving(&pki);
    let (untrusting, _clock) = fetcher_without_ca(&server);
    assert_eq!(
        untrusting.get(&server.url("/client.json")).err(),
        Some(DocumentError::Unreachable)
    );
}

fn fetcher_without_ca(server: &TlsServer) -> (DocumentFetcher, ManualClock) {
    fetcher(DocumentSettings {
        allow_hosts: vec![format!("localhost:{}", server.port())],
        ..DocumentSettings::default()
    })
}

#[test]
fn a_document_is_cached_for_its_lifetime_on_the_clock_then_fetched_again() {
    let pki = Pki::new();
    let server = serving(&pki);
    let (fetcher, clock) = allowing(&pki, &server);
    let client_id = server.url("/client.json");
    let first = fetcher.get(&client_id).expect("served");
    clock.advance(Duration::from_secs(3599));
    let again = fetcher.get(&client_id).expect("cached");
    assert!(Arc::ptr_eq(&first, &again), "the cached document");
    assert_eq!(server.hits("/client.json"), 1);
    clock.advance(Duration::from_secs(1));
    fetcher.get(&client_id).expect("fetched again");
    assert_eq!(server.hits("/client.json"), 2);
}

#[test]
fn max_age_is_held_between_cache_min_and_cache_max() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, |path, base| {
        let reply = Reply::json(document(&format!("{base}{path}")).to_string());
        match path {
            "/brief.json" => reply.header("Cache-Control", "max-age=5"),
            "/long.json" => reply.header("Cache-Control", "public, max-age=31536000"),
            "/no-store.json" => reply.header("Cache-Control", "no-store"),
            _ => reply,
        }
    });
    let (fetcher, clock) = allowing(&pki, &server);
    for path in ["/brief.json", "/long.json", "/no-store.json"] {
        fetcher.get(&server.url(path)).expect("served");
    }
    clock.advance(Duration::from_secs(59));
    for path in ["/brief.json", "/long.json", "/no-store.json"] {
        fetcher.get(&server.url(path)).expect("cached");
        assert_eq!(server.hits(path), 1, "{path} is kept at least 60 s");
    }
    clock.advance(Duration::from_secs(1));
    for path in ["/brief.json", "/no-store.json"] {
        fetcher.get(&server.url(path)).expect("fetched again");
        assert_eq!(server.hits(path), 2, "{path}");
    }
    clock.advance(Duration::from_secs(24 * 3600 - 61));
    fetcher.get(&server.url("/long.json")).expect("cached");
    assert_eq!(server.hits("/long.json"), 1, "kept until 24 h");
    clock.advance(Duration::from_secs(1));
    fetcher
        .get(&server.url("/long.json"))
        .expect("fetched again");
    assert_eq!(server.hits("/long.json"), 2, "never past 24 h");
}

#[test]
fn the_lifetime_is_read_from_cache_control() {
    let settings = DocumentSettings::default();
    let lifetime = |header: Option<&str>| cache_lifetime(header, &settings).as_secs();
    assert_eq!(lifetime(None), 3600);
    assert_eq!(lifetime(Some("")), 3600);
    assert_eq!(lifetime(Some("public")), 3600);
    assert_eq!(lifetime(Some("max-age=600")), 600);
    assert_eq!(lifetime(Some("public, MAX-AGE=600")), 600);
    assert_eq!(lifetime(Some("max-age=\"600\"")), 600);
    assert_eq!(lifetime(Some("max-age = 600")), 600);
    assert_eq!(lifetime(Some("max-age=5")), 60);
    assert_eq!(lifetime(Some("max-age=0")), 60);
    assert_eq!(lifetime(Some("max-age=86401")), 86400);
    assert_eq!(lifetime(Some("max-age=99999999999999999999999")), 86400);
    assert_eq!(lifetime(Some("max-age=-5")), 3600);
    assert_eq!(lifetime(Some("max-age=abc")), 3600);
    assert_eq!(lifetime(Some("max-age=")), 3600);
    assert_eq!(lifetime(Some("no-store")), 60);
    assert_eq!(lifetime(Some("max-age=600, no-store")), 60);
    assert_eq!(lifetime(Some("No-Cache")), 60);
    let narrow = DocumentSettings {
        cache_default: Duration::from_secs(10),
        cache_min: Duration::from_secs(30),
        cache_max: Duration::from_secs(40),
        ..DocumentSettings::default()
    };
    assert_eq!(
        cache_lifetime(None, &narrow).as_secs(),
        30,
        "default clamped"
    );
}

#[test]
fn a_failure_is_not_cached() {
    let pki = Pki::new();
    let failures = Arc::new(Mutex::new(1));
    let left = Arc::clone(&failures);
    let server = TlsServer::start(&pki, move |path, base| {
        let mut left = left.lock().unwrap_or_else(PoisonError::into_inner);
        let reply = Reply::json(document(&format!("{base}{path}")).to_string());
        if *left > 0 {
            *left -= 1;
            return reply.status(503);
        }
        reply
    });
    let (fetcher, _clock) = allowing(&pki, &server);
    let client_id = server.url("/client.json");
    assert_eq!(
        fetcher.get(&client_id).err(),
        Some(DocumentError::Status(503))
    );
    assert!(fetcher.get(&client_id).is_ok(), "tried again at once");
    assert_eq!(server.hits("/client.json"), 2);
}

#[test]
fn concurrent_first_requests_share_one_fetch() {
    let pki = Pki::new();
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let held = Arc::clone(&gate);
    let server = TlsServer::start(&pki, move |path, base| {
        let (open, opened) = &*held;
        let open = open.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = opened.wait_timeout_while(open, Duration::from_secs(10), |open| !*open);
        Reply::json(document(&format!("{base}{path}")).to_string())
    });
    // Nothing is cached, so only the shared fetch can explain a single request.
    let (fetcher, _clock) = fetcher(DocumentSettings {
        max_cached: 0,
        ..settings(&pki, &[format!("localhost:{}", server.port())])
    });
    let fetcher = Arc::new(fetcher);
    let client_id = server.url("/client.json");
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let (fetcher, client_id) = (Arc::clone(&fetcher), client_id.clone());
            std::thread::spawn(move || fetcher.get(&client_id))
        })
        .collect();
    // The flight is held by the cache, the fetching request and each waiting one.
    let holders = || {
        let cache = fetcher.lock_cache();
        cache.flights.get(&client_id).map(Arc::strong_count)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while holders() != Some(5) && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(holders(), Some(5), "one request fetches, three wait");
    let (open, opened) = &*gate;
    *open.lock().unwrap_or_else(PoisonError::into_inner) = true;
    opened.notify_all();
    for request in requests {
        let document = request.join().expect("request thread").expect("served");
        assert_eq!(document.client_id, client_id);
    }
    assert_eq!(server.hits("/client.json"), 1);
    assert!(fetcher.lock_cache().flights.is_empty());
    fetcher.get(&client_id).expect("served");
    assert_eq!(server.hits("/client.json"), 2, "nothing was cached");
}

#[test]
fn a_waiting_request_gives_up_at_its_limit_and_learns_of_an_abandoned_fetch() {
    let flight = Flight::default();
    assert_eq!(flight.wait(Duration::ZERO), Err(DocumentError::Timeout));
    let (fetcher, _clock) = fetcher(DocumentSettings::default());
    let flight = Arc::new(Flight::default());
    fetcher
        .lock_cache()
        .flights
        .insert("https://a.example/c".to_owned(), Arc::clone(&flight));
    drop(Landing {
        fetcher: &fetcher,
        client_id: "https://a.example/c",
        flight: Arc::clone(&flight),
        outcome: None,
    });
    assert_eq!(
        flight.wait(Duration::from_secs(1)),
        Err(DocumentError::Unreachable)
    );
    assert!(fetcher.lock_cache().flights.is_empty());
}

fn cached_document(name: &str) -> Arc<ClientDocument> {
    let client_id = format!("https://{name}.example/c");
    let body = document(&client_id).to_string();
    Arc::new(metadata::parse(body.as_bytes(), &client_id).expect("valid"))
}

#[test]
fn a_full_cache_drops_expired_documents_first_then_the_oldest() {
    let secs = Duration::from_secs;
    let mut cache = Cache::default();
    cache.store("a", cached_document("a"), secs(0), secs(100), 2);
    cache.store("b", cached_document("b"), secs(1), secs(5), 2);
    cache.store("c", cached_document("c"), secs(10), secs(100), 2);
    assert!(cache.fresh("a", secs(10)).is_some(), "a is kept");
    assert!(!cache.entries.contains_key("b"), "b had expired");
    cache.store("d", cached_document("d"), secs(11), secs(100), 2);
    assert!(!cache.entries.contains_key("a"), "a was the oldest");
    assert!(cache.fresh("c", secs(11)).is_some());
    assert!(cache.fresh("d", secs(11)).is_some());
    cache.store("d", cached_document("d"), secs(12), secs(200), 2);
    assert_eq!(cache.entries.len(), 2, "a refresh takes no room");
    assert!(cache.fresh("c", secs(12)).is_some());
    assert!(cache.fresh("d", secs(150)).is_some());
    assert!(cache.fresh("d", secs(200)).is_none(), "expired at its time");
    let mut none = Cache::default();
    none.store("a", cached_document("a"), secs(0), secs(100), 0);
    assert!(none.entries.is_empty());
}

#[test]
fn past_max_cached_the_oldest_document_is_fetched_again() {
    let pki = Pki::new();
    let server = serving(&pki);
    let (fetcher, clock) = fetcher(DocumentSettings {
        max_cached: 2,
        ..settings(&pki, &[format!("localhost:{}", server.port())])
    });
    for path in ["/a.json", "/b.json", "/c.json"] {
        fetcher.get(&server.url(path)).expect("served");
        clock.advance(Duration::from_secs(1));
    }
    for path in ["/b.json", "/c.json", "/a.json"] {
        fetcher.get(&server.url(path)).expect("served");
    }
    assert_eq!(server.hits("/a.json"), 2, "evicted");
    assert_eq!(server.hits("/b.json"), 1);
    assert_eq!(server.hits("/c.json"), 1);
}

#[test]
fn start_refuses_settings_that_cannot_work() {
    let clock = ManualClock::at_unix_secs(NOW).clock();
    let start = |settings: DocumentSettings| DocumentFetcher::start(settings, clock.clone()).err();
    let inverted = DocumentSettings {
        cache_min: Duration::from_secs(61),
        cache_max: Duration::from_secs(60),
        ..DocumentSettings::default()
    };
    assert!(start(inverted).expect("refused").contains("cache_min"));
    let no_bytes = DocumentSettings {
        max_bytes: 0,
        ..DocumentSettings::default()
    };
    assert!(start(no_bytes).expect("refused").contains("max_bytes"));
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = DocumentSettings {
        ca_file: Some(dir.path().join("missing.pem")),
        ..DocumentSettings::default()
    };
    assert!(start(missing).expect("refused").contains("missing.pem"));
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").expect("written");
    let empty = DocumentSettings {
        ca_file: Some(empty),
        ..DocumentSettings::default()
    };
    assert!(
        start(empty)
            .expect("refused")
            .contains("holds no certificate")
    );
}

#[test]
fn every_refusal_reads_as_a_short_description() {
    let texts = [
        (
            DocumentError::BadUrl("the client_id URL must have a path"),
            "the client_id URL must have a path",
        ),
        (
            DocumentError::ForbiddenAddress,
            "the client_id host is not on a public address",
        ),
        (
            DocumentError::Unreachable,
            "the client_id URL could not be reached",
        ),
        (
            DocumentError::Timeout,
            "the client metadata document took too long",
        ),
        (
            DocumentError::TooLarge,
            "the client metadata document is too large",
        ),
        (
            DocumentError::Status(404),
            "the client_id URL answered HTTP 404, not 200",
        ),
        (
            DocumentError::NotJson,
            "the client metadata document is not served as JSON",
        ),
        (
            DocumentError::Invalid("redirect_uris is missing".to_owned()),
            "the client metadata document is invalid: redirect_uris is missing",
        ),
        (
            DocumentError::WrongClientId,
            "the client metadata document's client_id is not the URL it was fetched from",
        ),
    ];
    for (error, text) in texts {
        assert_eq!(error.to_string(), text);
    }
}

mod document_rules {
    use super::*;

    const ID: &str = "https://agent.example.com/client.json";

    fn parse(document: Value) -> Result<ClientDocument, DocumentError> {
        metadata::parse(document.to_string().as_bytes(), ID)
    }

    fn refusal(document: Value) -> String {
        match parse(document) {
            Err(DocumentError::Invalid(why)) => why,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn with(field: &str, value: Value) -> Value {
        let mut document = document(ID);
        document[field] = value;
        document
    }

    #[test]
    fn a_full_document_is_read() {
        let document = parse(json!({
            "client_id": ID,
            "client_name": "Agent",
            "client_uri": "https://agent.example.com",
            "logo_uri": "https://agent.example.com/logo.png",
            "redirect_uris": ["https://agent.example.com/cb", "http://127.0.0.1:33418/cb", "com.example.agent:/cb"],
            "grant_types": ["authorization_code", "refresh_token", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": "invoices:read invoices:write",
            "software_id": "ignored",
            "contacts": ["ops@agent.example.com"],
            "tos_uri": null,
        }))
        .expect("valid");
        assert_eq!(
            document.client_uri.as_deref(),
            Some("https://agent.example.com")
        );
        assert_eq!(document.redirect_uris.len(), 3);
        assert_eq!(
            document.grant_types,
            ["authorization_code", "refresh_token"]
        );
        assert_eq!(
            document.scope.as_deref(),
            Some("invoices:read invoices:write")
        );
    }

    #[test]
    fn the_body_must_be_a_json_object_naming_its_own_url() {
        for body in [
            "",
            "not json",
            "[1]",
            "\"https://agent.example.com/client.json\"",
            "{",
        ] {
            assert!(matches!(
                metadata::parse(body.as_bytes(), ID),
                Err(DocumentError::Invalid(_))
            ));
        }
        let mut document = document(ID);
        document
            .as_object_mut()
            .expect("object")
            .remove("client_id");
        assert_eq!(refusal(document), "client_id is missing or not a string");
        assert_eq!(
            refusal(with("client_id", json!(7))),
            "client_id is missing or not a string"
        );
        for other in [
            "https://agent.example.com/client.json/",
            "https://agent.example.com/client.json?x",
            "https://agent.example.com:443/client.json",
            "https://evil.example.com/client.json",
        ] {
            assert_eq!(
                parse(with("client_id", json!(other))),
                Err(DocumentError::WrongClientId)
            );
        }
    }

    #[test]
    fn a_document_cannot_hold_a_secret() {
        for field in ["client_secret", "client_secret_expires_at"] {
            assert!(refusal(with(field, json!("s3cret"))).contains(field));
        }
        assert!(parse(with("client_secret", Value::Null)).is_ok());
        for method in [
            "client_secret_basic",
            "client_secret_post",
            "private_key_jwt",
            "",
        ] {
            assert_eq!(
                refusal(with("token_endpoint_auth_method", json!(method))),
                "token_endpoint_auth_method must be \"none\""
            );
        }
    }

    #[test]
    fn grant_and_response_types_are_limited_to_the_code_flow() {
        for grants in [
            json!(["implicit"]),
            json!(["authorization_code", "client_credentials"]),
            json!([]),
            json!("authorization_code"),
            json!([1]),
        ] {
            assert!(
                refusal(with("grant_types", grants.clone())).starts_with("grant_types"),
                "{grants}"
            );
        }
        assert_eq!(
            refusal(with("grant_types", json!(["refresh_token"]))),
            "grant_types must include authorization_code"
        );
        let repeated: Vec<&str> = vec!["authorization_code"; 9];
        assert_eq!(
            refusal(with("grant_types", json!(repeated))),
            "grant_types has more than 8 entries"
        );
        let repeated: Vec<&str> = vec!["authorization_code"; 8];
        assert!(parse(with("grant_types", json!(repeated))).is_ok());
        for responses in [json!(["token"]), json!(["code", "id_token"]), json!([])] {
            assert!(
                refusal(with("response_types", responses.clone())).starts_with("response_types"),
                "{responses}"
            );
        }
    }

    #[test]
    fn redirect_uris_are_absolute_without_a_fragment() {
        let mut missing = document(ID);
        missing
            .as_object_mut()
            .expect("object")
            .remove("redirect_uris");
        assert_eq!(refusal(missing), "redirect_uris is missing");
        assert_eq!(
            refusal(with("redirect_uris", json!([]))),
            "redirect_uris must not be empty"
        );
        assert_eq!(
            refusal(with("redirect_uris", json!("https://a.example/cb"))),
            "redirect_uris must be an array of strings"
        );
        assert_eq!(
            refusal(with("redirect_uris", json!(["/cb"]))),
            "redirect_uris holds a URI that is not absolute"
        );
        assert_eq!(
            refusal(with("redirect_uris", json!(["https://a.example/cb#x"]))),
            "redirect_uris must not contain a fragment"
        );
        assert_eq!(
            refusal(with("redirect_uris", json!(["https://a.example/c b"]))),
            "redirect_uris holds a URI with blanks"
        );
        let many: Vec<String> = (0..21)
            .map(|i| format!("https://a.example/cb{i}"))
            .collect();
        assert_eq!(
            refusal(with("redirect_uris", json!(many))),
            "redirect_uris has more than 20 entries"
        );
        let enough: Vec<String> = (0..20)
            .map(|i| format!("https://a.example/cb{i}"))
            .collect();
        assert!(parse(with("redirect_uris", json!(enough))).is_ok());
        let long = format!("https://a.example/{}", "c".repeat(2048));
        assert!(refusal(with("redirect_uris", json!([long]))).contains("longer than 2048"));
    }

    #[test]
    fn shown_texts_are_bounded_and_links_are_https() {
        assert!(parse(with("client_name", json!("n".repeat(200)))).is_ok());
        assert_eq!(
            refusal(with("client_name", json!("n".repeat(201)))),
            "client_name is longer than 200 characters"
        );
        assert_eq!(
            refusal(with("client_name", json!("Agent\u{1b}[31m"))),
            "client_name must not contain control characters"
        );
        assert_eq!(
            refusal(with("client_name", json!(["Agent"]))),
            "client_name must be a string"
        );
        assert_eq!(
            refusal(with("client_uri", json!("javascript:alert(1)"))),
            "client_uri must be an https URL"
        );
        assert_eq!(
            refusal(with("logo_uri", json!("http://agent.example.com/logo.png"))),
            "logo_uri must be an https URL"
        );
        assert_eq!(
            refusal(with("logo_uri", json!("logo.png"))),
            "logo_uri holds a URI that is not absolute"
        );
        assert!(parse(with("scope", json!("s".repeat(1024)))).is_ok());
        assert_eq!(
            refusal(with("scope", json!("s".repeat(1025)))),
            "scope is longer than 1024 characters"
        );
    }
}
