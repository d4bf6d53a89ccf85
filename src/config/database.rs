//! Where the state lives: the `database` setting read into an SQLite file or a PostgreSQL
//! URL, which displays (and prints in the effective configuration) without its password.

use std::path::{Path, PathBuf};

/// Where the state lives: the `database` setting (`--database`, `TOLLGATE_DATABASE`, or
/// `[store] url`). A path, or `sqlite:<path>`, is an SQLite file; `postgres://…` or
/// `postgresql://…` a PostgreSQL database.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// One SQLite file: the embedded default.
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by several nodes (the URL, password included).
    Postgres(PostgresUrl),
}

impl Database {
    /// Reads a `database` value: a PostgreSQL URL, `sqlite:<path>`, or a path.
    pub fn parse(text: &str) -> Result<Database, String> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Database::Postgres(PostgresUrl(text.to_owned())));
        }
        let path = text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"));
        let path = path.unwrap_or(text);
        if path.is_empty() {
            return Err("the path must not be empty".to_owned());
        }
        Ok(Database::Sqlite(PathBuf::from(path)))
    }

    /// The SQLite file, when the database is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(path) => Some(path),
            Database::Postgres(_) => None,
        }
    }
}

impl std::fmt::Display for Database {
    /// The path, or the URL with its password replaced by `***`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => url.fmt(f),
        }
    }
}

impl serde::Serialize for Database {
    /// As it displays: a PostgreSQL URL without its password.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({self})")
    }
}

/// A PostgreSQL connection URL. It displays without its password; only
/// [`PostgresUrl::secret_text`] gives the whole text, to connect with.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// The URL as given, password included (only for connecting).
    pub fn secret_text(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_password(&self.0))
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresUrl({self})")
    }
}

/// `scheme://user:secret@host…` → `scheme://user:***@host…`; a `password=` parameter too.
fn redact_password(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    if let Some(start) = out.find("password=") {
        let value_start = start + "password=".len();
        let end = out[value_start..]
            .find('&')
            .map_or(out.len(), |i| value_start + i);
        out.replace_range(value_start..end, "***");
    }
    out
}
