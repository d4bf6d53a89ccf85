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

impl<T> CategoryLimits<T> {
    /// The limits of the store's per-category columns, in their order (read, write,
    /// destructive, send, generate).
    pub fn from_columns([read, write, destructive, send, generate]: [T; 5]) -> Self {
        CategoryLimits {
            read,
            write,
            destructive,
            send,
            generate,
        }
    }
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

/// A provider user's overrides (only users with at least one are listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserOverrides {
    /// The user's id (`u` and 24 hex digits).
    pub user_id: String,
    /// The name the user's tokens give, else the subject (from the tokens: untrusted).
    pub name: String,
    /// Overrides; `None` = the plan's default.
    pub per_minute: CategoryLimits<Option<u64>>,
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
    /// Provider users with overrides.
    pub users: Vec<UserOverrides>,
}

impl LimitsReport {
    /// Loads the report.
    pub fn load(store: &Store) -> Result<LimitsReport, StoreError> {
        let credentials = store
            .credential_limits()?
            .into_iter()
            .map(|c| CredentialOverrides {
                credential_id: c.credential_id,
                name: c.name,
                per_minute: CategoryLimits::from_columns(c.per_minute),
            })
            .collect();
        let users = store
            .users()?
            .into_iter()
            .filter(|u| u.per_minute.iter().any(Option::is_some))
            .map(|u| UserOverrides {
                name: u.label().to_owned(),
                per_minute: CategoryLimits::from_columns(u.per_minute),
                user_id: u.id,
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
            users,
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
        // As the charge reads them: the credential's override, else the user's.
        let own = self
            .credentials
            .iter()
            .find(|c| c.credential_id == key)
            .and_then(|c| c.per_minute.get(category))
            .or_else(|| {
                self.users
                    .iter()
                    .find(|u| u.user_id == key)
                    .and_then(|u| u.per_minute.get(category))
            });
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
    /// One provider user's override for one category.
    User {
        /// The user's id.
        user_id: String,
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
    /// No such plan, credential, user or client; the `&str` says which kind.
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
            Self::User {
                user_id,
                category,
                per_minute,
            } => {
                let value = sql_limit(*per_minute)?;
                let changed = store.set_user_limit(user_id, per_minute_of(*category), value)?;
                (changed, user_id, "user")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guards::ratelimit::{ChargeRequest, charge_in};
    use crate::store::testing::stores;
    use crate::store::users::SeenUser;

    const T0: i64 = 1_764_464_400; // a minute boundary

    fn user_limit(user_id: &str, per_minute: Option<u64>) -> LimitChange {
        LimitChange::User {
            user_id: user_id.to_owned(),
            category: Category::Write,
            per_minute,
        }
    }

    #[test]
    fn a_users_override_is_reported_applied_to_its_counter_and_cleared() {
        for scratch in stores() {
            let store = &scratch.store;
            let seen = SeenUser {
                issuer: "https://idp.example.com",
                subject: "alice",
                display_name: Some("Alice A."),
                client_id: None,
            };
            let (id, _) = store.record_user(&seen, T0).expect("record");
            user_limit(&id, Some(4)).apply(store).expect("set");
            let report = LimitsReport::load(store).expect("report");
            assert_eq!(
                report.users,
                [UserOverrides {
                    user_id: id.clone(),
                    name: "Alice A.".into(),
                    per_minute: CategoryLimits {
                        write: Some(4),
                        ..CategoryLimits::default()
                    },
                }]
            );
            let request = ChargeRequest {
                credential_id: id.clone(),
                client_id: None,
                category: Category::Write,
            };
            store
                .in_transaction(|tx| charge_in(tx, &[Some(&request)], T0 + 1).map(|_| ()))
                .expect("charge");
            let counter = usage(store, T0 + 2)
                .expect("usage")
                .into_iter()
                .find(|r| r.key == id)
                .expect("the user's counter");
            assert_eq!(
                (counter.bucket.as_str(), counter.count, counter.limit),
                ("write", 1, Some(4))
            );
            user_limit(&id, None).apply(store).expect("clear");
            assert_eq!(LimitsReport::load(store).expect("report").users, []);
        }
    }

    #[test]
    fn an_override_of_a_user_never_seen_is_refused() {
        for scratch in stores() {
            let never = crate::store::users::user_id("https://idp.example.com", "nobody");
            let err = user_limit(&never, Some(1))
                .apply(&scratch.store)
                .expect_err("unknown user");
            assert!(
                matches!(err, LimitChangeError::NotFound("user", ref id) if *id == never),
                "{err:?}"
            );
        }
    }
}
