//! The operator's views and changes of the rate limits (`tollgate limits`, `tollgate
//! usage`): the limits in force, the live counters with their effective limits, and one
//! change at a time. The rows come from the store; the fallbacks and the effective limit
//! are the limiter's own rules, so `usage` shows what the next charge would apply.

use serde::{Serialize, Serializer};

use super::{
    CLIENT_BUCKET, FALLBACK_CLIENT_PER_MINUTE, HOUR_WINDOW, PLAN_BUCKET, fallback_per_minute,
    per_minute_of, window_secs,
};
use crate::store::plans::{Plan, PlanLimit};
use crate::store::{Store, StoreError};
use crate::tools::Category;

/// Per-category per-minute limits; `None` in an override means "inherit".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CategoryLimits<T> {
    /// `read` tools.
    pub read: T,
    /// `write` tools.
    pub write: T,
    /// `destructive` tools.
    pub destructive: T,
    /// `send` tools.
    pub send: T,
    /// `generate` tools.
    pub generate: T,
}

impl<T: Copy> CategoryLimits<T> {
    /// The value for `category`.
    pub fn get(&self, category: Category) -> T {
        match category {
            Category::Read => self.read,
            Category::Write => self.write,
            Category::Destructive => self.destructive,
            Category::Send => self.send,
            Category::Generate => self.generate,
        }
    }
}

/// A credential's overrides (only credentials with at least one are listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialOverrides {
    /// Public id.
    pub credential_id: String,
    /// Display name.
    pub name: String,
    /// Overrides; `None` = the plan's default.
    pub per_minute: CategoryLimits<Option<u64>>,
}

/// An OAuth client's override (only clients with one are listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientOverride {
    /// Client id.
    pub client_id: String,
    /// Display name.
    pub name: String,
    /// Calls per minute for all the client's credentials together.
    pub per_minute: u64,
}

/// Everything `tollgate limits show` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitsReport {
    /// The company's plan, once `tollgate init` has run.
    pub company_plan: Option<String>,
    /// Every plan, smallest first (serialized as its limits only).
    #[serde(serialize_with = "plan_limits")]
    pub plans: Vec<Plan>,
    /// Credentials with overrides.
    pub credentials: Vec<CredentialOverrides>,
    /// OAuth clients with an override.
    pub clients: Vec<ClientOverride>,
}

impl LimitsReport {
    /// Loads the report.
    pub fn load(store: &Store) -> Result<LimitsReport, StoreError> {
        let credentials = store
            .credential_limits()?
            .into_iter()
            .map(|c| {
                let [read, write, destructive, send, generate] = c.per_minute;
                CredentialOverrides {
                    credential_id: c.credential_id,
                    name: c.name,
                    per_minute: CategoryLimits {
                        read,
                        write,
                        destructive,
                        send,
                        generate,
                    },
                }
            })
            .collect();
        let clients = store
            .client_limits()?
            .into_iter()
            .map(|c| ClientOverride {
                client_id: c.client_id,
                name: c.name,
                per_minute: c.per_minute,
            })
            .collect();
        Ok(LimitsReport {
            company_plan: store.company()?.map(|c| c.plan_slug),
            plans: store.plans()?,
            credentials,
            clients,
        })
    }

    fn plan(&self, slug: &str) -> Option<&Plan> {
        self.plans.iter().find(|p| p.slug == slug)
    }

    fn company_plan(&self) -> Option<&Plan> {
        self.company_plan
            .as_deref()
            .and_then(|slug| self.plan(slug))
    }

    /// The effective limit of a counter row, as the charging code would compute it now.
    fn effective_limit(&self, bucket: &str, key: &str) -> Option<u64> {
        if bucket == PLAN_BUCKET {
            return self.plan(key).and_then(|p| p.hourly_call_limit);
        }
        if bucket == CLIENT_BUCKET {
            let own = self
                .clients
                .iter()
                .find(|c| c.client_id == key)
                .map(|c| c.per_minute);
            return own.or(Some(
                self.company_plan()
                    .map_or(FALLBACK_CLIENT_PER_MINUTE, |p| p.client_per_minute),
            ));
        }
        let category = *Category::ALL.iter().find(|c| c.as_str() == bucket)?;
        let own = self
            .credentials
            .iter()
            .find(|c| c.credential_id == key)
            .and_then(|c| c.per_minute.get(category));
        own.or(Some(
            self.company_plan()
                .map_or(fallback_per_minute(category), |p| {
                    p.per_minute(per_minute_of(category))
                }),
        ))
    }
}

/// A plan as `tollgate limits show --json` prints it: its slug and limits.
#[derive(Serialize)]
struct PlanLimitsView<'a> {
    slug: &'a str,
    per_hour: Option<u64>,
    per_minute: CategoryLimits<u64>,
    client_per_minute: u64,
}

fn plan_limits<S: Serializer>(plans: &[Plan], out: S) -> Result<S::Ok, S::Error> {
    out.collect_seq(plans.iter().map(|p| PlanLimitsView {
        slug: &p.slug,
        per_hour: p.hourly_call_limit,
        per_minute: CategoryLimits {
            read: p.read_per_minute,
            write: p.write_per_minute,
            destructive: p.destructive_per_minute,
            send: p.send_per_minute,
            generate: p.generate_per_minute,
        },
        client_per_minute: p.client_per_minute,
    }))
}

/// One change made by `tollgate limits set`. `None` limits mean "inherit" for overrides
/// and "unlimited" for a plan's hourly limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitChange {
    /// A plan's per-credential default for one category.
    PlanCategory {
        /// Plan slug.
        plan: String,
        /// Category.
        category: Category,
        /// Calls per minute.
        per_minute: u64,
    },
    /// A plan's hourly company-wide limit.
    PlanHourly {
        /// Plan slug.
        plan: String,
        /// Calls per hour; `None` = unlimited.
        per_hour: Option<u64>,
    },
    /// A plan's default per-client limit.
    PlanClient {
        /// Plan slug.
        plan: String,
        /// Calls per minute.
        per_minute: u64,
    },
    /// One credential's override for one category.
    Credential {
        /// Public id.
        credential_id: String,
        /// Category.
        category: Category,
        /// Calls per minute; `None` = back to the plan's default.
        per_minute: Option<u64>,
    },
    /// One OAuth client's override.
    Client {
        /// Client id.
        client_id: String,
        /// Calls per minute; `None` = back to the plan's default.
        per_minute: Option<u64>,
    },
}

/// Why a limit change was not made.
#[derive(Debug)]
pub enum LimitChangeError {
    /// No such plan, credential or client; the `&str` says which kind.
    NotFound(&'static str, String),
    /// The limit does not fit SQLite's integers.
    TooLarge(u64),
    /// The store failed.
    Store(StoreError),
}

impl std::fmt::Display for LimitChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(kind, id) => write!(f, "no {kind} {id:?}"),
            Self::TooLarge(n) => write!(f, "limit {n} is too large (max {})", i64::MAX),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LimitChangeError {}

impl From<StoreError> for LimitChangeError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

fn sql_limit(value: Option<u64>) -> Result<Option<i64>, LimitChangeError> {
    value
        .map(|n| i64::try_from(n).map_err(|_| LimitChangeError::TooLarge(n)))
        .transpose()
}

impl LimitChange {
    /// Applies the change; it takes effect on the next charge of every process.
    pub fn apply(&self, store: &Store) -> Result<(), LimitChangeError> {
        let (changed, id, kind) = match self {
            Self::PlanCategory {
                plan,
                category,
                per_minute,
            } => {
                let limit = PlanLimit::PerMinute(per_minute_of(*category));
                let value = sql_limit(Some(*per_minute))?;
                (store.set_plan_limit(plan, limit, value)?, plan, "plan")
            }
            Self::PlanHourly { plan, per_hour } => {
                let value = sql_limit(*per_hour)?;
                (
                    store.set_plan_limit(plan, PlanLimit::Hourly, value)?,
                    plan,
                    "plan",
                )
            }
            Self::PlanClient { plan, per_minute } => {
                let value = sql_limit(Some(*per_minute))?;
                (
                    store.set_plan_limit(plan, PlanLimit::Client, value)?,
                    plan,
                    "plan",
                )
            }
            Self::Credential {
                credential_id,
                category,
                per_minute,
            } => {
                let value = sql_limit(*per_minute)?;
                let of = per_minute_of(*category);
                let changed = store.set_credential_limit(credential_id, of, value)?;
                (changed, credential_id, "credential")
            }
            Self::Client {
                client_id,
                per_minute,
            } => {
                let value = sql_limit(*per_minute)?;
                let changed = store.set_client_limit(client_id, value)?;
                (changed, client_id, "OAuth client")
            }
        };
        if !changed {
            return Err(LimitChangeError::NotFound(kind, id.clone()));
        }
        Ok(())
    }
}

/// One live counter, for `tollgate usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRow {
    /// Bucket name.
    pub bucket: String,
    /// Whose counter: credential public id, plan slug or client id.
    pub key: String,
    /// Calls counted in the current window (refused ones included).
    pub count: u64,
    /// The limit that applies now; `None` when the bucket is unlimited or not a quota
    /// bucket.
    pub limit: Option<u64>,
    /// Calls left in the window, when limited.
    pub remaining: Option<u64>,
    /// Unix seconds when the window ends.
    pub reset: i64,
    /// Window length in seconds.
    pub window_secs: i64,
}

/// The counters of the windows still running at `now`, with their effective limits.
/// Other users of `rate_counters` (e.g. the `auth` throttle) are left out.
pub fn usage(store: &Store, now: i64) -> Result<Vec<UsageRow>, StoreError> {
    let report = LimitsReport::load(store)?;
    let rows = store.counters_since(now - HOUR_WINDOW)?;
    let quota_bucket = |b: &str| {
        b == PLAN_BUCKET || b == CLIENT_BUCKET || Category::ALL.iter().any(|c| c.as_str() == b)
    };
    Ok(rows
        .into_iter()
        .filter(|r| quota_bucket(&r.bucket) && r.window_start + window_secs(&r.bucket) > now)
        .map(|r| {
            let window = window_secs(&r.bucket);
            let limit = report.effective_limit(&r.bucket, &r.key);
            UsageRow {
                remaining: limit.map(|l| l.saturating_sub(r.count)),
                limit,
                count: r.count,
                reset: r.window_start + window,
                window_secs: window,
                bucket: r.bucket,
                key: r.key,
            }
        })
        .collect())
}
