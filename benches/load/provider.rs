//! The `provider` scenario: the guarded HTTP load of `http` on one server, with an API key
//! and with an access token of the company's identity provider (a JWT signed ES256, the
//! issuer's keys in a local JWKS file, so no network is involved), rotating which goes
//! first from run to run. Like for like, the token names no OAuth client (the key belongs
//! to none): its server CPU per call as a ratio to the key's is the figure beside the
//! target (≤ 1.10). A third load uses a token that names its OAuth client (`azp`), as most
//! providers' tokens do: its calls charge that client's bucket too, one more counter than
//! the key's.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use super::*;

/// The issuer the benchmark's tokens name (never contacted: its keys are a file).
const ISSUER: &str = "https://idp.bench.invalid";
/// The audience the server is configured with.
const AUDIENCE: &str = "https://tollgate.bench/mcp";
/// The user the token names.
const SUBJECT: &str = "bench-user";
/// The token's CPU per call may be this much of the key's at most.
pub(super) const TARGET_PROVIDER_CPU_RATIO: f64 = 1.10;

/// The medians with the key, the provider's token, and one naming its client.
pub(super) struct ProviderFigures {
    pub(super) key: RunFigures,
    pub(super) token: RunFigures,
    pub(super) with_client: RunFigures,
}

impl ProviderFigures {
    /// The token's server CPU per call over the key's.
    pub(super) fn cpu_ratio(&self) -> Option<f64> {
        Some(self.token.cpu_us? / self.key.cpu_us?)
    }
}

/// An ES256 signing key and its public JWK.
struct Signer {
    pkcs8: Vec<u8>,
    jwk: Value,
}

impl Signer {
    fn new() -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("an ES256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the key reads back");
        // An uncompressed P-256 point: 0x04, then x and y (32 bytes each).
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": "bench-1",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        Signer {
            pkcs8: pkcs8.as_ref().to_vec(),
            jwk,
        }
    }

    /// A token for [`SUBJECT`], valid for an hour, granting the fixtures' scope, naming
    /// `client` as its `azp` when given.
    fn token(&self, client: Option<&str>) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let mut claims = json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": SUBJECT,
            "iat": now, "exp": now + 3600, "scope": "conformance:use",
        });
        if let Some(client) = client {
            claims["azp"] = json!(client);
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("bench-1".to_owned());
        header.typ = Some("at+jwt".to_owned());
        let key = jsonwebtoken::EncodingKey::from_ec_der(&self.pkcs8);
        jsonwebtoken::encode(&header, &claims, &key).expect("sign the token")
    }
}

/// Writes the JWKS and the configuration trusting it; returns the configuration's path.
fn write_config(dir: &Path, run: usize, signer: &Signer) -> PathBuf {
    let jwks = dir.join(format!("provider-{run}.jwks.json"));
    std::fs::write(&jwks, json!({"keys": [signer.jwk]}).to_string()).expect("write the JWKS");
    let config = dir.join(format!("provider-{run}.toml"));
    std::fs::write(
        &config,
        format!(
            "[[auth.issuers]]\nname = \"bench\"\nissuer = \"{ISSUER}\"\n\
             audience = \"{AUDIENCE}\"\njwks_file = \"{}\"\nalgorithms = [\"ES256\"]\n",
            jwks.display()
        ),
    )
    .expect("write the configuration");
    config
}

/// The user's row, seeded before its first call with its read limit raised out of the way
/// (the row a first call would write, plus the override).
fn seed_user(db: &Path) {
    let id = tollgate::store::users::user_id(ISSUER, SUBJECT);
    let mut conn = sqlite(db);
    sqlite_write(&mut conn, |tx| {
        tx.execute(
            "INSERT INTO users (id, issuer, subject, first_seen_at, last_seen_at, \
             read_per_minute) VALUES (?1, ?2, ?3, 0, 0, ?4)",
            params![
                id,
                ISSUER,
                SUBJECT,
                HUGE_LIMIT.parse::<i64>().expect("a number")
            ],
        )
    })
    .expect("seed the user");
}

pub(super) fn provider_scenario(dir: &Path, s: &Settings) -> ProviderFigures {
    println!(
        "\n== provider: tollgate serve --conformance-pack with an identity provider configured, \
         {} keep-alive connections; {}",
        s.connections,
        s.timing()
    );
    let mut key = Series::new("tools/call test_simple_text, API key");
    let mut token = Series::new("tools/call test_simple_text, provider JWT");
    let mut with_client = Series::new("the same, JWT naming its OAuth client");
    for run in 1..=s.runs {
        let db = dir.join(format!("provider-{run}.db"));
        let admin = prepare_database(&db);
        run_ok(
            &db,
            &[
                "limits",
                "set",
                "--plan",
                "pro",
                "--client-per-minute",
                HUGE_LIMIT,
            ],
        );
        seed_user(&db);
        let signer = Signer::new();
        let config = write_config(dir, run, &signer);
        let config = config.to_str().expect("a UTF-8 path");
        let server = HttpServer::start(&db, &["--conformance-pack", "--config", config], None, s);
        let (jwt, jwt_with_client) = (signer.token(None), signer.token(Some("bench-agent")));
        let loads: [(&mut Series, &str); 3] = [
            (&mut key, &admin.token),
            (&mut token, &jwt),
            (&mut with_client, &jwt_with_client),
        ];
        // Each run starts with another of the three, so no load always comes first.
        let mut loads: Vec<_> = loads.into_iter().collect();
        loads.rotate_left((run - 1) % 3);
        for (series, bearer) in loads {
            series.record(
                http_load(&server, &Requests::fixed(bearer, &guarded_call()), s).summarise(),
            );
        }
        print_verifications(server.addr);
        drop(server);
        remove_database(&db);
    }
    key.print_median();
    token.print_median();
    with_client.print_median();
    let figures = ProviderFigures {
        key: key.median(),
        token: token.median(),
        with_client: with_client.median(),
    };
    if let Some(ratio) = figures.cpu_ratio() {
        println!(
            "  provider JWT / API key, server CPU per call: {ratio:.3} (target ≤ {TARGET_PROVIDER_CPU_RATIO:.2})"
        );
    }
    if let (Some(client), Some(key)) = (figures.with_client.cpu_us, figures.key.cpu_us) {
        println!(
            "  provider JWT naming its OAuth client / API key, server CPU per call: {:.3}",
            client / key
        );
    }
    figures
}

/// Prints how many tokens the server verified against the provider's keys (from its
/// `/metrics`): one per distinct token when the verified-token cache does its work.
fn print_verifications(addr: SocketAddr) {
    let Some(page) = http_get(addr, "/metrics") else {
        return;
    };
    let verified: Vec<&str> = page
        .lines()
        .filter(|line| line.starts_with("tollgate_identity_verifications_total{"))
        .collect();
    println!(
        "  tokens verified against the provider's keys: {}",
        verified.join(", ")
    );
}
