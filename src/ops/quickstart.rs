//! What `tollgate quickstart` tells a new user: the text printed once the listener
//! answers (where MCP and the console are, the binary and the database, a client
//! configuration to copy for HTTP and for stdio, how to give an agent its own key and how
//! to get back in after losing the admin key), and the refusal of a busy address.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{Config, Database};

/// Placeholder shown where the admin key goes when quickstart did not create one.
const KEY_PLACEHOLDER: &str = "<your key>";

/// Why quickstart cannot listen on `addr`, and what to do instead.
pub fn busy_address(addr: SocketAddr, error: &std::io::Error) -> String {
    let next = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1).max(1024));
    match error.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "cannot listen on {addr}: another program (perhaps another tollgate) already \
             listens there; stop it, or choose another address: tollgate quickstart --listen {next}"
        ),
        _ => format!(
            "cannot listen on {addr}: {error}; choose another address with --listen, \
             e.g. tollgate quickstart --listen {next}"
        ),
    }
}

/// The text printed once the server answers on `addr`; `admin_key` is the key quickstart
/// just created (shown in the configurations to copy), if it created one.
pub fn ready_text(config: &Config, addr: SocketAddr, admin_key: Option<&str>) -> String {
    let base = format!("http://{addr}");
    let key = admin_key.unwrap_or(KEY_PLACEHOLDER);
    let binary = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "tollgate".to_owned());
    let database = database_argument(&config.database);
    let tollgate = format!(
        "{} --database {}",
        shell_word(&binary),
        shell_word(&database)
    );
    let mut text = String::new();
    let _ = writeln!(text);
    let _ = writeln!(text, "tollgate is serving (Ctrl-C to stop).");
    let _ = writeln!(text, "  MCP endpoint  {base}/mcp");
    if config.console.enabled {
        let _ = writeln!(
            text,
            "  Console       {base}/console  (sign in with the admin key)"
        );
    } else {
        let _ = writeln!(
            text,
            "  Console       off on this address (set [console] enabled = true to serve it)"
        );
    }
    let _ = writeln!(text, "  Binary        {binary}");
    let _ = writeln!(text, "  Database      {database}");
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "Connect a client over HTTP (Claude Code shown; any client that sends a header works):"
    );
    let _ = writeln!(
        text,
        "  claude mcp add --transport http tollgate {base}/mcp --header \"Authorization: Bearer {key}\""
    );
    let _ = writeln!(
        text,
        "Or let the client start tollgate over stdio (Claude Desktop's claude_desktop_config.json, and most clients):"
    );
    let _ = writeln!(text, "  {}", stdio_configuration(&binary, &database, key));
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "Give each agent its own key, with only the scopes it needs (`tollgate tools` lists them):"
    );
    let _ = writeln!(
        text,
        "  {tollgate} key create --name my-agent --scopes clients:read,invoices:read"
    );
    let _ = writeln!(
        text,
        "Lost the admin key? On this machine, as the owner of the database:"
    );
    let _ = writeln!(
        text,
        "  {tollgate} key create --name operator --scopes '*,admin'"
    );
    text
}

/// The `mcpServers` entry that starts tollgate over stdio on this database.
fn stdio_configuration(binary: &str, database: &str, key: &str) -> String {
    serde_json::json!({
        "mcpServers": {
            "tollgate": {
                "command": binary,
                "args": ["--database", database, "stdio"],
                "env": {"TOLLGATE_TOKEN": key}
            }
        }
    })
    .to_string()
}

/// The database as `--database` takes it from any directory: an SQLite file's absolute
/// path, or the PostgreSQL URL without its password.
fn database_argument(database: &Database) -> String {
    match database.file() {
        Some(path) => absolute(path).display().to_string(),
        None => database.to_string(),
    }
}

fn absolute(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned())
}

/// `word` as one shell word: unchanged when it holds only safe characters, else in single
/// quotes.
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-:+=@,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("/usr/bin/tollgate"), "/usr/bin/tollgate");
        assert_eq!(shell_word("/home/a b/t.db"), "'/home/a b/t.db'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn the_stdio_configuration_names_the_database_and_the_key() {
        let text = stdio_configuration("/bin/tollgate", "/srv/t.db", "tg_live_x");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        let server = &value["mcpServers"]["tollgate"];
        assert_eq!(server["command"], "/bin/tollgate");
        assert_eq!(
            server["args"],
            serde_json::json!(["--database", "/srv/t.db", "stdio"])
        );
        assert_eq!(server["env"]["TOLLGATE_TOKEN"], "tg_live_x");
    }

    #[test]
    fn a_busy_address_suggests_the_next_port() {
        let addr: SocketAddr = "127.0.0.1:8787".parse().expect("addr");
        let busy = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let text = busy_address(addr, &busy);
        assert!(text.contains("--listen 127.0.0.1:8788"), "{text}");
        assert!(text.contains("already listens"), "{text}");
    }
}
