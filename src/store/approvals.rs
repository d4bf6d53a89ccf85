//! `approvals` and its only writer: the calls a `require_approval` policy rule held until a
//! person decides. Each row is bound to who called (`principal`), the tool, the SHA-256 of
//! the call's canonical arguments and its idempotency key (empty when it had none):
//! `pending` until decided, then `approved` (the next identical call runs, once: `used`),
//! `denied`, or `expired` (read as expired as soon as its time is past, and written so when
//! a call finds it). Every node reads the same rows, so a decision applies on all of them.

use super::sql::{Row, args};
use super::{Store, StoreError, Tx};

/// Waiting for a person's decision.
pub const PENDING: &str = "pending";
/// Approved and not yet run.
pub const APPROVED: &str = "approved";
/// Approved and run once.
pub const USED: &str = "used";
/// Refused for good.
pub const DENIED: &str = "denied";
/// Undecided past its expiry.
pub const EXPIRED: &str = "expired";

/// Schema version 13 on SQLite.
pub(super) const SQLITE_SCHEMA_STEP: &str = "
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        tool TEXT NOT NULL,
        digest TEXT NOT NULL CHECK (length(digest) = 64),
        idempotency_key TEXT NOT NULL,
        rule TEXT NOT NULL,
        arguments TEXT NOT NULL,
        allow_self INTEGER NOT NULL CHECK (allow_self IN (0, 1)),
        state TEXT NOT NULL
            CHECK (state IN ('pending', 'approved', 'used', 'denied', 'expired')),
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        decided_at INTEGER,
        decided_by TEXT,
        used_at INTEGER
    );
    CREATE INDEX approvals_by_call
        ON approvals (principal, tool, digest, idempotency_key, created_at);
    CREATE INDEX approvals_by_state ON approvals (state, created_at);
";
/// Schema version 13 on PostgreSQL.
pub(super) const POSTGRES_SCHEMA_STEP: &str = "
    CREATE TABLE approvals (
        id TEXT COLLATE \"C\" PRIMARY KEY,
        principal TEXT COLLATE \"C\" NOT NULL,
        tool TEXT COLLATE \"C\" NOT NULL,
        digest TEXT COLLATE \"C\" NOT NULL CHECK (length(digest) = 64),
        idempotency_key TEXT COLLATE \"C\" NOT NULL,
        rule TEXT COLLATE \"C\" NOT NULL,
        arguments TEXT NOT NULL,
        allow_self BIGINT NOT NULL CHECK (allow_self IN (0, 1)),
        state TEXT COLLATE \"C\" NOT NULL
            CHECK (state IN ('pending', 'approved', 'used', 'denied', 'expired')),
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        decided_at BIGINT,
        decided_by TEXT COLLATE \"C\",
        used_at BIGINT
    );
    CREATE INDEX approvals_by_call
        ON approvals (principal, tool, digest, idempotency_key, created_at);
    CREATE INDEX approvals_by_state ON approvals (state, created_at);
";

/// One held call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// `apr_` and 32 hex digits.
    pub id: String,
    /// Who called: the credential's public id, or the user's id.
    pub principal: String,
    /// The tool called.
    pub tool: String,
    /// SHA-256 of the canonical arguments, lowercase hex.
    pub digest: String,
    /// The call's idempotency key; empty when it had none.
    pub idempotency_key: String,
    /// The policy rule that held it.
    pub rule: String,
    /// The arguments, canonical JSON, for the person deciding.
    pub arguments: String,
    /// Whether the caller may decide on their own call.
    pub allow_self: bool,
    /// `pending`, `approved`, `used`, `denied` or `expired`.
    pub state: String,
    /// When the call was first held, unix milliseconds.
    pub created_at: i64,
    /// Until when it waits for a decision, unix milliseconds.
    pub expires_at: i64,
    /// When it was decided.
    pub decided_at: Option<i64>,
    /// Who decided (a credential's public id, a user's id, or `cli:<user>`).
    pub decided_by: Option<String>,
    /// When the approved call ran.
    pub used_at: Option<i64>,
}

impl Approval {
    /// Its state as of `now_ms`: a pending approval past its expiry is expired.
    pub fn state_at(&self, now_ms: i64) -> &str {
        if self.state == PENDING && self.expires_at <= now_ms {
            EXPIRED
        } else {
            &self.state
        }
    }
}

macro_rules! approval_columns {
    () => {
        "id, principal, tool, digest, idempotency_key, rule, arguments, allow_self, state, \
         created_at, expires_at, decided_at, decided_by, used_at"
    };
}

/// One approval by its id.
const BY_ID: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approvals WHERE id = ?1"
);

fn approval_from_row(row: &Row<'_>) -> Result<Approval, StoreError> {
    let allow_self: i64 = row.get(7)?;
    Ok(Approval {
        id: row.get(0)?,
        principal: row.get(1)?,
        tool: row.get(2)?,
        digest: row.get(3)?,
        idempotency_key: row.get(4)?,
        rule: row.get(5)?,
        arguments: row.get(6)?,
        allow_self: allow_self != 0,
        state: row.get(8)?,
        created_at: row.get(9)?,
        expires_at: row.get(10)?,
        decided_at: row.get(11)?,
        decided_by: row.get(12)?,
        used_at: row.get(13)?,
    })
}

/// What a held call's binding is: who, which tool, which arguments, which key.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// Who called.
    pub principal: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// SHA-256 of the canonical arguments.
    pub digest: &'a str,
    /// The idempotency key, empty without one.
    pub idempotency_key: &'a str,
}

/// The newest approval of `binding`, if any.
fn latest(tx: &Tx<'_>, binding: Binding<'_>) -> Result<Option<Approval>, StoreError> {
    tx.query_opt(
        concat!(
            "SELECT ",
            approval_columns!(),
            " FROM approvals WHERE principal = ?1 AND tool = ?2 AND digest = ?3 \
             AND idempotency_key = ?4 ORDER BY created_at DESC, id DESC LIMIT 1"
        ),
        args![
            binding.principal,
            binding.tool,
            binding.digest,
            binding.idempotency_key
        ],
        approval_from_row,
    )
}

fn insert(tx: &Tx<'_>, approval: &Approval) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO approvals (id, principal, tool, digest, idempotency_key, rule, arguments, \
         allow_self, state, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        args![
            approval.id,
            approval.principal,
            approval.tool,
            approval.digest,
            approval.idempotency_key,
            approval.rule,
            approval.arguments,
            i64::from(approval.allow_self),
            approval.state,
            approval.created_at,
            approval.expires_at
        ],
    )?;
    Ok(())
}

/// What a held call finds when it comes (again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Waiting for a decision: this approval (new, or the one a retry points at).
    Pending(Approval),
    /// Approved: this call is the one that runs (the approval is now `used`).
    Run,
    /// Approved and run already: the idempotency ledger answers it.
    Ran,
    /// Denied for good.
    Denied(Approval),
    /// Not decided in time.
    Expired(Approval),
}

/// The filter of [`Store::approvals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Those waiting for a decision (not yet expired).
    Pending,
    /// Every approval, newest first.
    All,
}

/// What a decision changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The approval is now in the state decided.
    Decided(Box<Approval>),
    /// No approval has this id.
    Unknown,
    /// It is no longer pending (decided or expired): its state.
    NotPending(String),
    /// The person deciding made the call, and the rule does not let them approve it.
    OwnCall,
}

impl Store {
    /// Where a call bound to `binding` stands, at `now_ms`; `fresh` is the approval to
    /// record when none waits for it (its id, rule, arguments, expiry). One transaction,
    /// so two nodes seeing the same call at once record one approval.
    pub fn gate_call(
        &self,
        binding: Binding<'_>,
        fresh: &Approval,
        now_ms: i64,
    ) -> Result<Gate, StoreError> {
        self.in_transaction(|tx| {
            let Some(found) = latest(tx, binding)? else {
                insert(tx, fresh)?;
                return Ok(Gate::Pending(fresh.clone()));
            };
            match found.state_at(now_ms) {
                PENDING => Ok(Gate::Pending(found)),
                APPROVED => {
                    tx.execute(
                        "UPDATE approvals SET state = 'used', used_at = ?2 \
                         WHERE id = ?1 AND state = 'approved'",
                        args![found.id, now_ms],
                    )?;
                    Ok(Gate::Run)
                }
                USED if !binding.idempotency_key.is_empty() => Ok(Gate::Ran),
                USED => {
                    insert(tx, fresh)?;
                    Ok(Gate::Pending(fresh.clone()))
                }
                DENIED => Ok(Gate::Denied(found)),
                _ => {
                    tx.execute(
                        "UPDATE approvals SET state = 'expired' WHERE id = ?1 AND state = 'pending'",
                        args![found.id],
                    )?;
                    Ok(Gate::Expired(found))
                }
            }
        })
    }

    /// The approvals of `listing`, newest first, at most `limit`.
    pub fn approvals(
        &self,
        listing: Listing,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Approval>, StoreError> {
        self.with_conn(|conn| match listing {
            Listing::Pending => conn.query_all(
                concat!(
                    "SELECT ",
                    approval_columns!(),
                    " FROM approvals WHERE state = 'pending' AND expires_at > ?1 \
                     ORDER BY created_at DESC, id DESC LIMIT CAST(?2 AS BIGINT) + 0"
                ),
                args![now_ms, i64::from(limit)],
                approval_from_row,
            ),
            Listing::All => conn.query_all(
                concat!(
                    "SELECT ",
                    approval_columns!(),
                    " FROM approvals ORDER BY created_at DESC, id DESC \
                     LIMIT CAST(?1 AS BIGINT) + 0"
                ),
                args![i64::from(limit)],
                approval_from_row,
            ),
        })
    }

    /// The approval `id`.
    pub fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.with_conn(|conn| conn.query_opt(BY_ID, args![id], approval_from_row))
    }

    /// Decides on the pending approval `id` (`approve`: approved, else denied), by `by` at
    /// `now_ms`. `by_caller` says the person deciding is the one who called.
    pub fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        (by, by_caller): (&str, bool),
        now_ms: i64,
    ) -> Result<Decision, StoreError> {
        self.in_transaction(|tx| {
            let found = tx.query_opt(BY_ID, args![id], approval_from_row)?;
            let Some(found) = found else {
                return Ok(Decision::Unknown);
            };
            let state = found.state_at(now_ms);
            if state != PENDING {
                return Ok(Decision::NotPending(state.to_owned()));
            }
            if approve && by_caller && !found.allow_self {
                return Ok(Decision::OwnCall);
            }
            let state = if approve { APPROVED } else { DENIED };
            tx.execute(
                "UPDATE approvals SET state = ?2, decided_at = ?3, decided_by = ?4 \
                 WHERE id = ?1 AND state = 'pending'",
                args![id, state, now_ms, by],
            )?;
            Ok(Decision::Decided(Box::new(Approval {
                state: state.to_owned(),
                decided_at: Some(now_ms),
                decided_by: Some(by.to_owned()),
                ..found
            })))
        })
    }

    /// Deletes the approvals whose last event (run, decision, or expiry for one never
    /// decided) came before `cutoff_ms`: a held call's arguments are kept no longer than
    /// the audit log's rows. A pending approval not yet expired is never deleted. Returns
    /// how many went.
    pub fn prune_approvals(&self, cutoff_ms: i64) -> Result<usize, StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM approvals WHERE COALESCE(used_at, decided_at, expires_at) < ?1",
                args![cutoff_ms],
            )
        })
    }

    /// How many approvals are in each state at `now_ms` (`pending`, `approved` — counting
    /// the used ones — `denied`, `expired`), for `/metrics`.
    pub fn approval_counts(&self, now_ms: i64) -> Result<[(&'static str, i64); 4], StoreError> {
        self.with_conn(|conn| {
            let rows: Vec<(String, i64)> = conn.query_all(
                "SELECT CASE WHEN state = 'pending' AND expires_at <= ?1 THEN 'expired' \
                 WHEN state = 'used' THEN 'approved' ELSE state END AS s, COUNT(*) \
                 FROM approvals GROUP BY s",
                args![now_ms],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let count = |state: &str| {
                rows.iter()
                    .filter(|(s, _)| s == state)
                    .map(|(_, n)| *n)
                    .sum()
            };
            Ok([PENDING, APPROVED, DENIED, EXPIRED].map(|state| (state, count(state))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::stores;

    fn held(id: &str, key: &str, now: i64) -> Approval {
        Approval {
            id: id.into(),
            principal: "kcaller".into(),
            tool: "record_payment".into(),
            digest: "d".repeat(64),
            idempotency_key: key.into(),
            rule: "large_payments".into(),
            arguments: "{\"amount_cents\":2000000}".into(),
            allow_self: false,
            state: PENDING.into(),
            created_at: now,
            expires_at: now + 1_000,
            decided_at: None,
            decided_by: None,
            used_at: None,
        }
    }

    fn binding<'a>(fresh: &'a Approval) -> Binding<'a> {
        Binding {
            principal: &fresh.principal,
            tool: &fresh.tool,
            digest: &fresh.digest,
            idempotency_key: &fresh.idempotency_key,
        }
    }

    #[test]
    fn a_held_call_waits_runs_once_when_approved_and_is_then_replayed() {
        for scratch in stores() {
            let store = &scratch.store;
            let first = held("apr_1", "k1", 100);
            assert_eq!(
                store.gate_call(binding(&first), &first, 100).expect("gate"),
                Gate::Pending(first.clone())
            );
            // A retry points at the same approval, whatever it would have recorded.
            let retry = held("apr_2", "k1", 200);
            assert_eq!(
                store.gate_call(binding(&retry), &retry, 200).expect("gate"),
                Gate::Pending(first.clone())
            );
            assert_eq!(
                store
                    .decide_approval("apr_1", true, ("kcaller", true), 300)
                    .expect("decide"),
                Decision::OwnCall
            );
            let decided = store
                .decide_approval("apr_1", true, ("kboss", false), 300)
                .expect("decide");
            assert!(matches!(decided, Decision::Decided(a) if a.state == APPROVED));
            assert_eq!(
                store.gate_call(binding(&retry), &retry, 400).expect("gate"),
                Gate::Run
            );
            assert_eq!(
                store.gate_call(binding(&retry), &retry, 500).expect("gate"),
                Gate::Ran
            );
            assert_eq!(
                store
                    .decide_approval("apr_1", false, ("kboss", false), 600)
                    .expect("decide"),
                Decision::NotPending(USED.into())
            );
            assert_eq!(
                store.approval_counts(700).expect("counts"),
                [(PENDING, 0), (APPROVED, 1), (DENIED, 0), (EXPIRED, 0)]
            );
        }
    }

    #[test]
    fn settled_approvals_older_than_the_cutoff_are_pruned_and_a_live_one_is_kept() {
        for scratch in stores() {
            let store = &scratch.store;
            let used = held("apr_u", "ku", 100);
            store.gate_call(binding(&used), &used, 100).expect("gate");
            store
                .decide_approval("apr_u", true, ("kboss", false), 150)
                .expect("decide");
            assert_eq!(
                store.gate_call(binding(&used), &used, 200).expect("gate"),
                Gate::Run
            );
            let denied = held("apr_d", "kd", 100);
            store
                .gate_call(binding(&denied), &denied, 100)
                .expect("gate");
            store
                .decide_approval("apr_d", false, ("kboss", false), 5_000)
                .expect("decide");
            let mut live = held("apr_l", "kl", 100);
            live.expires_at = 1_000_000;
            store.gate_call(binding(&live), &live, 100).expect("gate");
            assert_eq!(
                store.prune_approvals(1_000).expect("prune"),
                1,
                "the used one"
            );
            assert!(store.approval("apr_u").expect("read").is_none());
            assert!(store.approval("apr_d").expect("read").is_some());
            assert_eq!(
                store.prune_approvals(10_000).expect("prune"),
                1,
                "the denied one"
            );
            assert!(
                store.approval("apr_l").expect("read").is_some(),
                "still pending"
            );
        }
    }

    #[test]
    fn denial_and_expiry_are_final() {
        for scratch in stores() {
            let store = &scratch.store;
            let denied = held("apr_d", "kd", 100);
            store
                .gate_call(binding(&denied), &denied, 100)
                .expect("gate");
            store
                .decide_approval("apr_d", false, ("kboss", false), 200)
                .expect("deny");
            assert!(matches!(
                store.gate_call(binding(&denied), &denied, 300).expect("gate"),
                Gate::Denied(a) if a.id == "apr_d"
            ));
            let late = held("apr_e", "ke", 100);
            store.gate_call(binding(&late), &late, 100).expect("gate");
            assert_eq!(
                store
                    .approvals(Listing::Pending, 500, 10)
                    .expect("list")
                    .len(),
                1
            );
            assert!(
                store
                    .approvals(Listing::Pending, 1_100, 10)
                    .expect("list")
                    .is_empty()
            );
            assert_eq!(
                store
                    .decide_approval("apr_e", true, ("kboss", false), 1_100)
                    .expect("late"),
                Decision::NotPending(EXPIRED.into())
            );
            assert!(matches!(
                store.gate_call(binding(&late), &late, 1_200).expect("gate"),
                Gate::Expired(a) if a.id == "apr_e"
            ));
            assert_eq!(
                store.approval(&late.id).expect("read").map(|a| a.state),
                Some(EXPIRED.into())
            );
            assert_eq!(
                store.approval_counts(1_300).expect("counts"),
                [(PENDING, 0), (APPROVED, 0), (DENIED, 1), (EXPIRED, 1)]
            );
            assert_eq!(
                store
                    .decide_approval("apr_none", true, ("kboss", false), 1)
                    .expect("none"),
                Decision::Unknown
            );
        }
    }
}
