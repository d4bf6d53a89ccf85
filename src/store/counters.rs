//! The `rate_counters` table and its only writer: fixed-window counters keyed by bucket,
//! key and window start, the limits a charge reads in its transaction, and pruning.

use super::plans::{PerMinute, to_count};
use super::sql::args;
use super::{Conn, Store, StoreError, Tx};

/// The limits that apply to one charge, as stored (the limiter supplies the fallbacks
/// for a database without `tollgate init`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLimits {
    /// The company's plan slug, when there is a company and its plan row.
    pub plan_slug: Option<String>,
    /// The plan's hourly company-wide limit (`None`: unlimited, or no plan).
    pub hourly: Option<u64>,
    /// The credential's (or the provider user's) override for the category, else the
    /// plan's default.
    pub per_minute: Option<u64>,
    /// The OAuth client of the call: the one given, else the credential's.
    pub client_id: Option<String>,
    /// The client's override, else the plan's per-client default.
    pub client_per_minute: Option<u64>,
}

const LIMITS_SQL: &str = "\
    SELECT p.slug, p.hourly_call_limit,
           CASE ?3 WHEN 'read'        THEN COALESCE(c.read_per_minute, u.read_per_minute,
                                                    p.read_per_minute)
                   WHEN 'write'       THEN COALESCE(c.write_per_minute, u.write_per_minute,
                                                    p.write_per_minute)
                   WHEN 'destructive' THEN COALESCE(c.destructive_per_minute,
                                                    u.destructive_per_minute,
                                                    p.destructive_per_minute)
                   WHEN 'send'        THEN COALESCE(c.send_per_minute, u.send_per_minute,
                                                    p.send_per_minute)
                   WHEN 'generate'    THEN COALESCE(c.generate_per_minute,
                                                    u.generate_per_minute,
                                                    p.generate_per_minute)
           END,
           COALESCE(?2, c.client_id),
           COALESCE(oc.per_minute_limit, p.client_per_minute)
      FROM (SELECT 1) AS one
      LEFT JOIN company co ON co.id = 1
      LEFT JOIN plans p ON p.slug = co.plan_slug
      LEFT JOIN credentials c ON c.public_id = ?1
      LEFT JOIN users u ON u.id = ?1
      LEFT JOIN oauth_clients oc ON oc.client_id = COALESCE(?2, c.client_id)";

/// The limits of one (credential, client, category), in one indexed read.
pub fn limits_for(
    conn: &Conn<'_>,
    credential_id: &str,
    client_id: Option<&str>,
    category: PerMinute,
) -> Result<StoredLimits, StoreError> {
    conn.query_one(
        LIMITS_SQL,
        args![credential_id, client_id, category.word()],
        |row| {
            Ok(StoredLimits {
                plan_slug: row.get(0)?,
                hourly: row.get::<Option<i64>>(1)?.map(to_count),
                per_minute: row.get::<Option<i64>>(2)?.map(to_count),
                client_id: row.get(3)?,
                client_per_minute: row.get::<Option<i64>>(4)?.map(to_count),
            })
        },
    )
}

// Two statements rather than one upsert with `RETURNING`: SQLite buffers the rows a
// `RETURNING` clause returns in a temporary table, which it creates (a page-sized
// allocation) on every run. The counter is read and written inside the caller's write
// transaction, so nothing moves in between.
const COUNTER_SQL: &str =
    "SELECT count FROM rate_counters WHERE bucket = ?1 AND key = ?2 AND window_start = ?3";
const SET_COUNTER_SQL: &str = "\
    INSERT INTO rate_counters (bucket, key, window_start, count) VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (bucket, key, window_start) DO UPDATE SET count = excluded.count";

/// Adds `by` to one counter inside `tx`; returns its new count.
pub fn increment(
    tx: &Tx<'_>,
    bucket: &str,
    key: &str,
    window_start: i64,
    by: usize,
) -> Result<u64, StoreError> {
    let by = i64::try_from(by).unwrap_or(i64::MAX);
    let count: i64 = tx
        .query_opt(COUNTER_SQL, args![bucket, key, window_start], |row| {
            row.get::<i64>(0)
        })?
        .unwrap_or(0)
        .saturating_add(by);
    tx.execute(SET_COUNTER_SQL, args![bucket, key, window_start, count])?;
    Ok(to_count(count))
}

/// One stored counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRow {
    /// Bucket name.
    pub bucket: String,
    /// Whose counter.
    pub key: String,
    /// Unix seconds when its window started.
    pub window_start: i64,
    /// Calls counted.
    pub count: u64,
}

impl Store {
    /// Deletes up to `chunk` counter windows that started before `cutoff`, in one short
    /// transaction; returns how many went.
    pub fn prune_counters(&self, cutoff: i64, chunk: i64) -> Result<usize, StoreError> {
        self.in_transaction(|tx| {
            tx.execute(
                "DELETE FROM rate_counters WHERE (bucket, key, window_start) IN (
                 SELECT bucket, key, window_start FROM rate_counters
                  WHERE window_start < ?1 LIMIT ?2)",
                args![cutoff, chunk],
            )
        })
    }

    /// Every counter whose window started after `after`, by bucket, key and window.
    pub fn counters_since(&self, after: i64) -> Result<Vec<CounterRow>, StoreError> {
        self.with_conn(|conn| {
            conn.query_all(
                "SELECT bucket, key, window_start, count FROM rate_counters
                  WHERE window_start > ?1 ORDER BY bucket, key, window_start",
                args![after],
                |r| {
                    Ok(CounterRow {
                        bucket: r.get(0)?,
                        key: r.get(1)?,
                        window_start: r.get(2)?,
                        count: to_count(r.get(3)?),
                    })
                },
            )
        })
    }
}
