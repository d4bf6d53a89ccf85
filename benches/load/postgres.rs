//! The `postgres` scenario: the guarded HTTP load of `http` on the embedded SQLite file,
//! then on a PostgreSQL database with one node, then with two nodes on one database (the
//! connections split between them), in the same run so the three lines compare.
//!
//! The server is `TG_BENCH_POSTGRES` (a URL without a database name) when set; otherwise a
//! private one started for the scenario by `tests/postgres/cluster.sh` (Debian's packages;
//! fsync off, as its data is throwaway — the figures measure tollgate's work and the round
//! trips, not a disk). Each run gets fresh databases, dropped afterwards.

use super::*;

/// The three medians, for the summary.
pub(super) struct PostgresFigures {
    pub(super) sqlite: RunFigures,
    pub(super) one_node: RunFigures,
    pub(super) two_nodes: RunFigures,
}

/// A PostgreSQL server for the scenario: the configured one, or a private one stopped on
/// drop.
struct Server {
    url: String,
    private_dir: Option<PathBuf>,
}

impl Server {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/cluster.sh")
    }

    fn find_or_start() -> Option<Server> {
        if let Ok(url) = std::env::var("TG_BENCH_POSTGRES") {
            return Some(Server {
                url: url.trim_end_matches('/').to_owned(),
                private_dir: None,
            });
        }
        let dir = std::env::temp_dir().join(format!("tollgate-bench-pg-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(Self::script())
            .arg("start")
            .arg(&dir)
            .output()
            .ok()?;
        if !out.status.success() {
            println!(
                "  no PostgreSQL server: {} (set TG_BENCH_POSTGRES, or install Debian's postgresql)",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Server {
            url: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            private_dir: Some(dir),
        })
    }

    fn admin(&self) -> ::postgres::Client {
        ::postgres::Client::connect(&format!("{}/postgres", self.url), ::postgres::NoTls)
            .expect("connect to the PostgreSQL server")
    }

    /// A fresh database; its URL.
    fn database(&self, name: &str) -> String {
        let mut admin = self.admin();
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .expect("drop a leftover bench database");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the bench database");
        format!("{}/{name}", self.url)
    }

    fn drop_database(&self, name: &str) {
        let _ = self
            .admin()
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(dir) = &self.private_dir {
            let _ = Command::new("bash")
                .arg(Self::script())
                .arg("stop")
                .arg(dir)
                .output();
        }
    }
}

pub(super) fn postgres_scenario(dir: &Path, s: &Settings) -> Option<PostgresFigures> {
    println!(
        "\n== postgres: tools/call test_simple_text, all guards, over HTTP: SQLite, then PostgreSQL \
         with one node and with two nodes on one database; {} keep-alive connections in all; {}",
        s.connections,
        s.timing()
    );
    let server = Server::find_or_start()?;
    let mut sqlite = Series::new("SQLite file, one node");
    let mut one_node = Series::new("PostgreSQL, one node");
    let mut two_nodes = Series::new("PostgreSQL, two nodes");
    for run in 1..=s.runs {
        let file = dir.join(format!("postgres-sqlite-{run}.db"));
        let admin = prepare_database(&file);
        let node = HttpServer::start(&file, &["--conformance-pack"], None, s);
        let call = Requests::fixed(&admin.token, &guarded_call());
        sqlite.record(http_load(&node, &call, s).summarise());
        drop(node);
        remove_database(&file);

        let name = format!("tg_bench_one_{run}");
        let url = server.database(&name);
        let db = Path::new(&url);
        let admin = prepare_database(db);
        let node = HttpServer::start(db, &["--conformance-pack"], None, s);
        let call = Requests::fixed(&admin.token, &guarded_call());
        one_node.record(http_load(&node, &call, s).summarise());
        print_group_commit(node.addr);
        drop(node);
        server.drop_database(&name);

        let name = format!("tg_bench_two_{run}");
        let url = server.database(&name);
        let db = Path::new(&url);
        let admin = prepare_database(db);
        let a = HttpServer::start(db, &["--conformance-pack"], None, s);
        let b = HttpServer::start(db, &["--conformance-pack"], None, s);
        let call = Requests::fixed(&admin.token, &guarded_call());
        two_nodes.record(http_load_spread(&[&a, &b], &call, s, &[]).0.summarise());
        drop((a, b));
        server.drop_database(&name);
    }
    sqlite.print_median();
    one_node.print_median();
    two_nodes.print_median();
    Some(PostgresFigures {
        sqlite: sqlite.median(),
        one_node: one_node.median(),
        two_nodes: two_nodes.median(),
    })
}
