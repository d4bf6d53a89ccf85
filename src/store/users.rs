//! The `users` table and its only writer: the people and service accounts of the company's
//! identity provider who have called tollgate with one of its tokens. A user is a principal
//! of its own, like an API key: its rate buckets, its limit overrides, its audit rows and
//! its idempotency keys are under its id.
//!
//! A user's id is `u` and 24 lowercase hex digits of the SHA-256 of its issuer URL, a NUL and
//! its subject ([`user_id`]): every node derives the same id from the same token without a
//! read, and the id never collides with a credential's public id (those are hex only). The
//! row is written when a token of the user is first verified (and its name and client kept
//! up to date then); `last_seen_at` is written at most once a minute by the calls;
//! `blocked_at` is set by the operator and read by every call inside its charging
//! transaction, so a block applies to the next call on every node.

use sha2::{Digest, Sha256};

use super::plans::{PerMinute, to_count};
use super::sql::{Param, Row, args};
use super::{Conn, Store, StoreError, Tx};

/// Step 9 of SQLite's schema: the `users` table.
pub(super) const SQLITE_SCHEMA_STEP: &str = "
CREATE TABLE users (
    id                     TEXT    PRIMARY KEY CHECK (id GLOB 'u[0-9a-f]*' AND length(id) = 25),
    issuer                 TEXT    NOT NULL,
    subject                TEXT    NOT NULL,
    display_name           TEXT,
    client_id              TEXT,
    first_seen_at          INTEGER NOT NULL,
    last_seen_at           INTEGER NOT NULL,
    blocked_at             INTEGER,
    read_per_minute        INTEGER CHECK (read_per_minute IS NULL OR read_per_minute >= 0),
    write_per_minute       INTEGER CHECK (write_per_minute IS NULL OR write_per_minute >= 0),
    destructive_per_minute INTEGER CHECK (destructive_per_minute IS NULL
                                          OR destructive_per_minute >= 0),
    send_per_minute        INTEGER CHECK (send_per_minute IS NULL OR send_per_minute >= 0),
    generate_per_minute    INTEGER CHECK (generate_per_minute IS NULL OR generate_per_minute >= 0),
    UNIQUE (issuer, subject)
);
";

/// Step 9 of PostgreSQL's schema: the same table in its types.
pub(super) const POSTGRES_SCHEMA_STEP: &str = r#"
CREATE TABLE users (
    id                     TEXT COLLATE "C" PRIMARY KEY CHECK (id ~ '^u[0-9a-f]{24}$'),
    issuer                 TEXT COLLATE "C" NOT NULL,
    subject                TEXT COLLATE "C" NOT NULL,
    display_name           TEXT,
    client_id              TEXT COLLATE "C",
    first_seen_at          BIGINT NOT NULL,
    last_seen_at           BIGINT NOT NULL,
    blocked_at             BIGINT,
    read_per_minute        BIGINT CHECK (read_per_minute IS NULL OR read_per_minute >= 0),
    write_per_minute       BIGINT CHECK (write_per_minute IS NULL OR write_per_minute >= 0),
    destructive_per_minute BIGINT CHECK (destructive_per_minute IS NULL
                                         OR destructive_per_minute >= 0),
    send_per_minute        BIGINT CHECK (send_per_minute IS NULL OR send_per_minute >= 0),
    generate_per_minute    BIGINT CHECK (generate_per_minute IS NULL OR generate_per_minute >= 0),
    UNIQUE (issuer, subject)
);
"#;

/// The id of the user `subject` of the provider whose issuer URL is `issuer`.
pub fn user_id(issuer: &str, subject: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(issuer.as_bytes());
    hasher.update([0]);
    hasher.update(subject.as_bytes());
    let digest = hasher.finalize();
    format!("u{}", &hex::encode(digest)[..24])
}

/// Whether `id` has the shape of a user's id (not a credential's public id).
pub fn is_user_id(id: &str) -> bool {
    id.len() == 25
        && id.starts_with('u')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a verified token says of its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenUser<'a> {
    /// The provider's issuer URL.
    pub issuer: &'a str,
    /// The user's subject at the provider.
    pub subject: &'a str,
    /// The name the token gives, if any.
    pub display_name: Option<&'a str>,
    /// The OAuth client the token was issued to, if it says.
    pub client_id: Option<&'a str>,
}

/// What every call reads of its user, in its charging transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStanding {
    /// When the operator blocked the user, if they did.
    pub blocked_at: Option<i64>,
    /// Unix seconds of the last recorded call (written at most once a minute).
    pub last_seen_at: i64,
    /// The installation's mode (`company.mode`), `None` before `tollgate init`.
    pub installation_mode: Option<String>,
}

/// A user as the operator's commands and the console list them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// `u` and 24 hex digits.
    pub id: String,
    /// The provider's issuer URL.
    pub issuer: String,
    /// The subject at the provider.
    pub subject: String,
    /// The last name a token gave.
    pub display_name: Option<String>,
    /// The last OAuth client a token named.
    pub client_id: Option<String>,
    /// Unix seconds.
    pub first_seen_at: i64,
    /// Unix seconds (at most a minute behind).
    pub last_seen_at: i64,
    /// Unix seconds, when blocked.
    pub blocked_at: Option<i64>,
    /// Overrides by category (read, write, destructive, send, generate); `None` inherits.
    pub per_minute: [Option<u64>; 5],
}

impl UserRow {
    /// The name to show: the token's display name, else the subject.
    pub fn label(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.subject)
    }
}

/// The most ids one statement of [`Store::users_among`] binds (well under either engine's
/// limit on parameters).
const IDS_PER_READ: usize = 500;

const RECORD_SQL: &str = "\
    INSERT INTO users (id, issuer, subject, display_name, client_id, first_seen_at, last_seen_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
    ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name,
                                   client_id = excluded.client_id,
                                   last_seen_at = excluded.last_seen_at";
const STANDING_SQL: &str = "\
    SELECT u.blocked_at, u.last_seen_at, (SELECT mode FROM company WHERE id = 1)
      FROM users u WHERE u.id = ?1";
const USER_COLUMNS: &str = "SELECT id, issuer, subject, display_name, client_id, first_seen_at, \
     last_seen_at, blocked_at, read_per_minute, write_per_minute, destructive_per_minute, \
     send_per_minute, generate_per_minute FROM users";

fn standing_of(row: &Row<'_>) -> Result<UserStanding, StoreError> {
    Ok(UserStanding {
        blocked_at: row.get(0)?,
        last_seen_at: row.get(1)?,
        installation_mode: row.get(2)?,
    })
}

fn user_of(row: &Row<'_>) -> Result<UserRow, StoreError> {
    let limit = |i: usize| -> Result<Option<u64>, StoreError> {
        Ok(row.get::<Option<i64>>(i)?.map(to_count))
    };
    Ok(UserRow {
        id: row.get(0)?,
        issuer: row.get(1)?,
        subject: row.get(2)?,
        display_name: row.get(3)?,
        client_id: row.get(4)?,
        first_seen_at: row.get(5)?,
        last_seen_at: row.get(6)?,
        blocked_at: row.get(7)?,
        per_minute: [limit(8)?, limit(9)?, limit(10)?, limit(11)?, limit(12)?],
    })
}

/// The standing of user `id` inside a transaction (`None`: never seen).
pub fn user_standing_on(conn: &Conn<'_>, id: &str) -> Result<Option<UserStanding>, StoreError> {
    conn.query_opt(STANDING_SQL, args![id], standing_of)
}

/// Records a call of user `id` at `now` inside the charging transaction (the caller writes
/// at most once a minute).
pub fn touch_user(tx: &Tx<'_>, id: &str, now: i64) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE users SET last_seen_at = ?2 WHERE id = ?1 AND last_seen_at < ?2",
        args![id, now],
    )
    .map(|_| ())
}

impl Store {
    /// Records a user whose token was just verified (created on first sight, its name and
    /// client brought up to date otherwise) and returns its id and standing.
    pub fn record_user(
        &self,
        seen: &SeenUser<'_>,
        now: i64,
    ) -> Result<(String, UserStanding), StoreError> {
        let id = user_id(seen.issuer, seen.subject);
        self.in_transaction(|tx| {
            tx.execute(
                RECORD_SQL,
                args![
                    id,
                    seen.issuer,
                    seen.subject,
                    seen.display_name,
                    seen.client_id,
                    now
                ],
            )?;
            let standing = tx.query_one(STANDING_SQL, args![id], standing_of)?;
            Ok((id.clone(), standing))
        })
    }

    /// The standing of user `id` (`None`: never seen).
    pub fn user_standing(&self, id: &str) -> Result<Option<UserStanding>, StoreError> {
        self.with_conn(|conn| user_standing_on(conn, id))
    }

    /// Every user, most recently seen first.
    pub fn users(&self) -> Result<Vec<UserRow>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                &format!("{USER_COLUMNS} ORDER BY last_seen_at DESC, id"),
                args![],
                user_of,
            )
        })
    }

    /// The users `wanted` names: its id, or its subject or display name when exactly
    /// one user has it (every match is returned, for the caller to refuse an ambiguity).
    pub fn find_users(&self, wanted: &str) -> Result<Vec<UserRow>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                &format!(
                    "{USER_COLUMNS} WHERE id = ?1 OR subject = ?1 OR display_name = ?1 \
                     ORDER BY id"
                ),
                args![wanted],
                user_of,
            )
        })
    }

    /// The users among `ids` (any id that names no user is left out), in one read per
    /// [`IDS_PER_READ`] ids: how a listing of audit rows names the users it shows.
    pub fn users_among(&self, ids: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        let mut ids: Vec<String> = ids
            .iter()
            .filter(|id| is_user_id(id))
            .map(|id| (*id).to_owned())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.with_conn(|conn| {
            let mut found = Vec::new();
            for chunk in ids.chunks(IDS_PER_READ) {
                let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("?{i}")).collect();
                let params: Vec<&dyn Param> = chunk.iter().map(|id| id as &dyn Param).collect();
                let sql = format!(
                    "{USER_COLUMNS} WHERE id IN ({}) ORDER BY id",
                    marks.join(", ")
                );
                found.extend(conn.query_all(&sql, &params, user_of)?);
            }
            Ok(found)
        })
    }

    /// Blocks (`Some(at)`) or unblocks (`None`) user `id`; `false` when there is no such
    /// user. Blocking an already blocked user keeps the first time.
    pub fn set_user_blocked(&self, id: &str, at: Option<i64>) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute(
                // Cast: PostgreSQL cannot tell a bare parameter's type from `IS NULL`.
                "UPDATE users SET blocked_at = CASE WHEN CAST(?1 AS BIGINT) IS NULL THEN NULL
                                                    ELSE COALESCE(blocked_at, ?1) END
                  WHERE id = ?2",
                args![at, id],
            )
        })?;
        Ok(changed > 0)
    }

    /// Sets (or with `None` clears) a user's override for one category; `false` when there
    /// is no such user.
    pub fn set_user_limit(
        &self,
        id: &str,
        of: PerMinute,
        value: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql = format!("UPDATE users SET {} = ?1 WHERE id = ?2", of.column());
        let changed = self.in_transaction(|tx| tx.execute(&sql, args![value, id]))?;
        Ok(changed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn seen<'a>(subject: &'a str, name: Option<&'a str>) -> SeenUser<'a> {
        SeenUser {
            issuer: "https://idp.example.com",
            subject,
            display_name: name,
            client_id: Some("portal"),
        }
    }

    #[test]
    fn a_user_id_is_derived_from_issuer_and_subject_and_never_looks_like_a_key() {
        let a = user_id("https://idp.example.com", "alice");
        assert_eq!(a, user_id("https://idp.example.com", "alice"));
        assert_ne!(a, user_id("https://other.example.com", "alice"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(user_id("ab", "c"), user_id("a", "bc"));
        assert!(is_user_id(&a), "{a}");
        assert!(!is_user_id("0123456789abcdef0123"), "a key's public id");
        assert!(!is_user_id(&a.to_uppercase()));
    }

    #[test]
    fn a_user_is_recorded_once_kept_up_to_date_blocked_and_unblocked() {
        for scratch in stores() {
            let store = &scratch.store;
            let (id, standing) = store.record_user(&seen("alice", None), 100).expect("first");
            assert_eq!(standing.blocked_at, None);
            assert_eq!(standing.last_seen_at, 100);
            let (again, _) = store
                .record_user(&seen("alice", Some("Alice A.")), 160)
                .expect("again");
            assert_eq!(again, id);
            let listed = store.users().expect("users");
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].label(), "Alice A.");
            assert_eq!(listed[0].first_seen_at, 100);
            assert_eq!(listed[0].last_seen_at, 160);
            assert_eq!(store.find_users("Alice A.").expect("find")[0].id, id);
            assert!(store.set_user_blocked(&id, Some(200)).expect("block"));
            assert!(store.set_user_blocked(&id, Some(300)).expect("block again"));
            let standing = store.user_standing(&id).expect("read").expect("row");
            assert_eq!(standing.blocked_at, Some(200), "the first block is kept");
            assert!(store.set_user_blocked(&id, None).expect("unblock"));
            assert_eq!(
                store
                    .user_standing(&id)
                    .expect("read")
                    .expect("row")
                    .blocked_at,
                None
            );
            assert!(
                !store
                    .set_user_blocked("u000000000000000000000000", Some(1))
                    .expect("none")
            );
        }
    }

    #[test]
    fn a_users_overrides_are_set_and_cleared() {
        for scratch in stores() {
            let store = &scratch.store;
            let (id, _) = store.record_user(&seen("bob", None), 100).expect("record");
            assert!(
                store
                    .set_user_limit(&id, PerMinute::Write, Some(3))
                    .expect("set")
            );
            assert_eq!(store.users().expect("users")[0].per_minute[1], Some(3));
            assert!(
                store
                    .set_user_limit(&id, PerMinute::Write, None)
                    .expect("clear")
            );
            assert_eq!(store.users().expect("users")[0].per_minute[1], None);
        }
    }

    #[test]
    fn the_users_among_some_ids_are_read_together_and_other_ids_left_out() {
        for scratch in stores() {
            let store = &scratch.store;
            let (alice, _) = store.record_user(&seen("alice", None), 100).expect("alice");
            let (bob, _) = store
                .record_user(&seen("bob", Some("Bob")), 100)
                .expect("bob");
            store.record_user(&seen("carol", None), 100).expect("carol");
            let never = user_id("https://idp.example.com", "dave");
            let ids = [
                bob.as_str(),
                "0123456789abcdef0123",
                alice.as_str(),
                bob.as_str(),
                never.as_str(),
            ];
            let mut found: Vec<(String, String)> = store
                .users_among(&ids)
                .expect("read")
                .into_iter()
                .map(|u| (u.id.clone(), u.label().to_owned()))
                .collect();
            found.sort();
            let mut expected = vec![(alice, "alice".to_owned()), (bob, "Bob".to_owned())];
            expected.sort();
            assert_eq!(found, expected);
            assert_eq!(store.users_among(&[]).expect("none"), []);
        }
    }
}
