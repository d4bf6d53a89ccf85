//! The `plans` and `company` tables, and their only writer: the one [`Plan`] type every
//! layer reads (the limiter's defaults, the access guard's exclusions and allowances, the
//! operator's `plan` and `limits` commands) and the single company row.

use super::sql::{Row, args};
use super::{Conn, Store, StoreError, Tx};
use crate::clock::Clock;

/// The company this installation serves (the single row of `company`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Company {
    /// Legal name.
    pub name: String,
    /// Fiscal id (NIF/CIF), if known yet.
    pub tax_id: Option<String>,
    /// The plan the company is on (a `plans.slug`).
    pub plan_slug: String,
    /// Language of error hints: `"en"` or `"es"`.
    pub locale: String,
    /// ISO 3166-1 alpha-2 country code (decides the legal VAT rates), e.g. `"ES"`.
    pub country: String,
}

/// A plan and its limits (a row of `plans`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Stable id: `free`, `starter`, `pro`, `enterprise`.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Order from smallest (lowest) to largest plan.
    pub rank: i64,
    /// Calls per hour for the whole company; `None` = unlimited (bucket skipped).
    pub hourly_call_limit: Option<u64>,
    /// Default per-credential limit for `read` tools, calls per minute.
    pub read_per_minute: u64,
    /// Default per-credential limit for `write` tools, calls per minute.
    pub write_per_minute: u64,
    /// Default per-credential limit for `destructive` tools, calls per minute.
    pub destructive_per_minute: u64,
    /// Default per-credential limit for `send` tools, calls per minute.
    pub send_per_minute: u64,
    /// Default per-credential limit for `generate` tools, calls per minute.
    pub generate_per_minute: u64,
    /// Default per-OAuth-client limit (all its tokens together), calls per minute.
    pub client_per_minute: u64,
    /// Tools (or feature tags) this plan does not include; every other tool is included.
    pub excluded_tools: Vec<String>,
    /// API keys that may be active at once; `None` = unlimited.
    pub max_active_keys: Option<i64>,
}

impl Plan {
    /// Whether the plan leaves `tool` out.
    pub fn excludes(&self, tool: &str) -> bool {
        self.excluded_tools.iter().any(|t| t == tool)
    }

    /// The per-credential default of one tool category.
    pub fn per_minute(&self, of: PerMinute) -> u64 {
        match of {
            PerMinute::Read => self.read_per_minute,
            PerMinute::Write => self.write_per_minute,
            PerMinute::Destructive => self.destructive_per_minute,
            PerMinute::Send => self.send_per_minute,
            PerMinute::Generate => self.generate_per_minute,
        }
    }
}

/// The per-minute limit columns of a tool category (in `plans` the default, in
/// `credentials` the override).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerMinute {
    /// `read_per_minute`.
    Read,
    /// `write_per_minute`.
    Write,
    /// `destructive_per_minute`.
    Destructive,
    /// `send_per_minute`.
    Send,
    /// `generate_per_minute`.
    Generate,
}

impl PerMinute {
    /// The column name (never built from user input).
    pub(super) fn column(self) -> &'static str {
        match self {
            Self::Read => "read_per_minute",
            Self::Write => "write_per_minute",
            Self::Destructive => "destructive_per_minute",
            Self::Send => "send_per_minute",
            Self::Generate => "generate_per_minute",
        }
    }

    /// The category word the charging query takes.
    pub(super) fn word(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Destructive => "destructive",
            Self::Send => "send",
            Self::Generate => "generate",
        }
    }
}

/// One limit of a plan that `tollgate limits set` may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanLimit {
    /// A per-credential default of one category.
    PerMinute(PerMinute),
    /// The company-wide hourly limit (`None` = unlimited).
    Hourly,
    /// The default per-client limit.
    Client,
}

impl PlanLimit {
    fn column(self) -> &'static str {
        match self {
            Self::PerMinute(of) => of.column(),
            Self::Hourly => "hourly_call_limit",
            Self::Client => "client_per_minute",
        }
    }
}

/// A `SELECT` of a plan's columns followed by `$tail`, as one literal (so each statement
/// is a constant text the connection's statement cache finds without formatting).
macro_rules! plan_select {
    ($tail:literal) => {
        concat!(
            "SELECT slug, name, rank, hourly_call_limit, read_per_minute, write_per_minute, \
             destructive_per_minute, send_per_minute, generate_per_minute, client_per_minute, \
             excluded_tools, max_active_keys FROM plans",
            $tail
        )
    };
}

const PLANS_SQL: &str = plan_select!(" ORDER BY rank");
const PLAN_SQL: &str = plan_select!(" WHERE slug = ?1");
const COMPANY_PLAN_SQL: &str =
    plan_select!(" WHERE slug = (SELECT plan_slug FROM company WHERE id = 1)");

/// A stored limit as a count (the schema keeps them non-negative).
pub(super) fn to_count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn plan_from_row(row: &Row<'_>) -> Result<Plan, StoreError> {
    Ok(Plan {
        slug: row.get(0)?,
        name: row.get(1)?,
        rank: row.get(2)?,
        hourly_call_limit: row.get::<Option<i64>>(3)?.map(to_count),
        read_per_minute: to_count(row.get(4)?),
        write_per_minute: to_count(row.get(5)?),
        destructive_per_minute: to_count(row.get(6)?),
        send_per_minute: to_count(row.get(7)?),
        generate_per_minute: to_count(row.get(8)?),
        client_per_minute: to_count(row.get(9)?),
        excluded_tools: json_string_list(row, 10)?,
        max_active_keys: row.get(11)?,
    })
}

fn company_from_row(row: &Row<'_>) -> Result<Company, StoreError> {
    Ok(Company {
        name: row.get(0)?,
        tax_id: row.get(1)?,
        plan_slug: row.get(2)?,
        locale: row.get(3)?,
        country: row.get(4)?,
    })
}

/// Reads a TEXT column holding a JSON array of strings; anything else is
/// [`StoreError::Corrupt`].
pub(super) fn json_string_list(row: &Row<'_>, idx: usize) -> Result<Vec<String>, StoreError> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| StoreError::Corrupt(format!("column {idx}: not a JSON list of strings: {e}")))
}

/// The company's plan, read on `conn` (inside a charging transaction, for instance);
/// `None` before `tollgate init`.
pub fn company_plan_on(conn: &Conn<'_>) -> Result<Option<Plan>, StoreError> {
    conn.query_opt(COMPANY_PLAN_SQL, args![], plan_from_row)
}

/// Sets the company's mode (`live` or `test`) inside `tx`; `false` when it already had it
/// (or there is no company yet).
pub fn set_company_mode(tx: &Tx<'_>, mode: &str) -> Result<bool, StoreError> {
    let changed = tx.execute(
        "UPDATE company SET mode = ?1 WHERE id = 1 AND mode <> ?1",
        args![mode],
    )?;
    Ok(changed > 0)
}

impl Store {
    /// The company row, or `None` before `tollgate init` has written it.
    pub fn company(&self) -> Result<Option<Company>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt(
                "SELECT name, tax_id, plan_slug, locale, country FROM company WHERE id = 1",
                args![],
                company_from_row,
            )
        })
    }

    /// Creates or replaces the company row (its `created_at`, the time of the first call,
    /// is kept on update). An unknown plan slug or locale is rejected by the schema's
    /// constraints.
    pub fn set_company(&self, company: &Company) -> Result<(), StoreError> {
        // A record of when the installation was set up, never a decision by the time: the
        // system clock, as the database's own clock served before.
        let now = Clock::System.unix_secs();
        self.in_transaction(|tx| {
            tx.execute(
                "INSERT INTO company (id, name, tax_id, plan_slug, locale, country, created_at)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET
                   name = excluded.name, tax_id = excluded.tax_id,
                   plan_slug = excluded.plan_slug, locale = excluded.locale,
                   country = excluded.country",
                args![
                    company.name,
                    company.tax_id,
                    company.plan_slug,
                    company.locale,
                    company.country,
                    now
                ],
            )?;
            Ok(())
        })
    }

    /// The company's mode (`live` or `test`), or `None` before `tollgate init`.
    pub fn company_mode(&self) -> Result<Option<String>, StoreError> {
        self.with_conn(|conn| {
            conn.query_opt("SELECT mode FROM company WHERE id = 1", args![], |row| {
                row.get(0)
            })
        })
    }

    /// Moves the company to plan `slug`; `false` when there is no company yet.
    pub fn set_company_plan(&self, slug: &str) -> Result<bool, StoreError> {
        let changed = self.in_transaction(|tx| {
            tx.execute(
                "UPDATE company SET plan_slug = ?1 WHERE id = 1",
                args![slug],
            )
        })?;
        Ok(changed > 0)
    }

    /// Every plan, smallest first (by rank).
    pub fn plans(&self) -> Result<Vec<Plan>, StoreError> {
        self.with_conn(|conn| conn.query_all(PLANS_SQL, args![], plan_from_row))
    }

    /// One plan by slug, or `None` if no such plan exists.
    pub fn plan(&self, slug: &str) -> Result<Option<Plan>, StoreError> {
        self.with_conn(|conn| conn.query_opt(PLAN_SQL, args![slug], plan_from_row))
    }

    /// The company's plan, or `None` before `tollgate init`.
    pub fn company_plan(&self) -> Result<Option<Plan>, StoreError> {
        self.with_conn(company_plan_on)
    }

    /// Replaces the tools plan `slug` excludes; `false` when there is no such plan.
    pub fn set_excluded_tools(&self, slug: &str, tools: &[String]) -> Result<bool, StoreError> {
        let text = serde_json::Value::from(tools.to_vec()).to_string();
        let changed = self.in_transaction(|tx| {
            tx.execute(
                "UPDATE plans SET excluded_tools = ?1 WHERE slug = ?2",
                args![text, slug],
            )
        })?;
        Ok(changed > 0)
    }

    /// Sets one limit of plan `slug` (`None` only makes sense for the hourly limit:
    /// unlimited); `false` when there is no such plan. It applies from the next charge of
    /// every process.
    pub fn set_plan_limit(
        &self,
        slug: &str,
        limit: PlanLimit,
        value: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql = format!("UPDATE plans SET {} = ?1 WHERE slug = ?2", limit.column());
        let changed = self.in_transaction(|tx| tx.execute(&sql, args![value, slug]))?;
        Ok(changed > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sql::Dialect;
    use crate::store::testing::stores;
    use crate::store::tests::fresh;
    use crate::store::{SCHEMA_VERSION, StoreOptions};

    fn acme(plan: &str) -> Company {
        Company {
            name: "Acme SL".into(),
            tax_id: Some("B12345678".into()),
            plan_slug: plan.into(),
            locale: "es".into(),
            country: "ES".into(),
        }
    }

    fn created_at(store: &Store) -> i64 {
        store
            .with_conn(|c| {
                c.query_one(
                    "SELECT created_at FROM company WHERE id = 1",
                    args![],
                    |r| r.get(0),
                )
            })
            .expect("created_at")
    }

    #[test]
    fn reopening_keeps_the_data() {
        let (_dir, path, store) = fresh();
        let company = acme("pro");
        store.set_company(&company).expect("set");
        drop(store);
        let store = Store::open(&path, &StoreOptions::default()).expect("reopen");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        assert_eq!(store.company().expect("company"), Some(company));
    }

    #[test]
    fn seed_plans_have_the_contract_limits() {
        for scratch in stores() {
            let store = &scratch.store;
            let plans = store.plans().expect("plans");
            let hourly: Vec<(&str, Option<u64>)> = plans
                .iter()
                .map(|p| (p.slug.as_str(), p.hourly_call_limit))
                .collect();
            assert_eq!(
                hourly,
                vec![
                    ("free", Some(500)),
                    ("starter", Some(5000)),
                    ("pro", Some(50000)),
                    ("enterprise", None)
                ]
            );
            for plan in &plans {
                let per_minute = [
                    plan.read_per_minute,
                    plan.write_per_minute,
                    plan.destructive_per_minute,
                    plan.send_per_minute,
                    plan.generate_per_minute,
                    plan.client_per_minute,
                ];
                assert_eq!(per_minute, [120, 60, 10, 10, 10, 1000], "{}", plan.slug);
                let smaller = matches!(plan.slug.as_str(), "free" | "starter");
                assert_eq!(!plan.excluded_tools.is_empty(), smaller, "{}", plan.slug);
            }
            let free = store.plan("free").expect("free").expect("seeded");
            assert_eq!(free.excluded_tools, ["send_invoice", "export_invoices"]);
            assert_eq!(free.max_active_keys, Some(3));
            assert_eq!(store.plan("pro").expect("pro").map(|p| p.rank), Some(3));
            assert_eq!(store.plan("gold").expect("gold"), None);
        }
    }

    #[test]
    fn the_company_row_is_created_then_updated_in_place() {
        for scratch in stores() {
            let store = &scratch.store;
            assert_eq!(store.company().expect("company"), None);
            assert_eq!(store.company_mode().expect("mode"), None);
            assert_eq!(store.company_plan().expect("plan"), None);
            assert!(!store.set_company_plan("pro").expect("no company"));

            let before = Clock::System.unix_secs();
            store.set_company(&acme("starter")).expect("set");
            let created = created_at(store);
            assert!(
                created >= before && created <= Clock::System.unix_secs(),
                "{created}"
            );
            let mut renamed = acme("starter");
            renamed.name = "Acme Iberia SL".into();
            renamed.tax_id = None;
            renamed.locale = "en".into();
            store.set_company(&renamed).expect("update");
            assert_eq!(store.company().expect("company"), Some(renamed));
            assert_eq!(created_at(store), created);
            assert_eq!(store.company_mode().expect("mode").as_deref(), Some("live"));

            assert!(store.set_company_plan("pro").expect("move"));
            let plan = store.company_plan().expect("plan").expect("on a plan");
            assert_eq!((plan.slug.as_str(), plan.rank), ("pro", 3));
            let on_conn = store.with_conn(company_plan_on).expect("plan");
            assert_eq!(on_conn, Some(plan));
        }
    }

    #[test]
    fn the_mode_changes_only_when_it_differs() {
        for scratch in stores() {
            let store = &scratch.store;
            let set = |mode: &str| {
                store
                    .in_transaction(|tx| set_company_mode(tx, mode))
                    .expect("set mode")
            };
            assert!(!set("test"), "no company yet");
            store.set_company(&acme("pro")).expect("company");
            assert!(set("test"));
            assert!(!set("test"));
            assert_eq!(store.company_mode().expect("mode").as_deref(), Some("test"));
            assert!(set("live"));
            assert_eq!(store.company_mode().expect("mode").as_deref(), Some("live"));
        }
    }

    #[test]
    fn plan_limits_and_exclusions_are_written() {
        for scratch in stores() {
            let store = &scratch.store;
            let tools = vec!["send_invoice".to_owned(), "beta".to_owned()];
            assert!(store.set_excluded_tools("pro", &tools).expect("set"));
            assert!(!store.set_excluded_tools("gold", &tools).expect("set"));
            let set = |slug: &str, limit, value| {
                store.set_plan_limit(slug, limit, value).expect("set limit")
            };
            assert!(set("pro", PlanLimit::PerMinute(PerMinute::Send), Some(3)));
            assert!(set("pro", PlanLimit::Hourly, None));
            assert!(set("pro", PlanLimit::Client, Some(250)));
            assert!(!set("gold", PlanLimit::Client, Some(1)));
            let pro = store.plan("pro").expect("pro").expect("seeded");
            assert!(pro.excludes("beta") && pro.excludes("send_invoice"));
            assert!(!pro.excludes("export_invoices"));
            assert_eq!(pro.per_minute(PerMinute::Send), 3);
            assert_eq!(pro.per_minute(PerMinute::Read), 120);
            assert_eq!((pro.hourly_call_limit, pro.client_per_minute), (None, 250));
            assert!(store.set_excluded_tools("pro", &[]).expect("clear"));
            let pro = store.plan("pro").expect("pro").expect("seeded");
            assert_eq!(pro.excluded_tools, Vec::<String>::new());
        }
    }

    #[test]
    fn foreign_keys_are_enforced() {
        for scratch in stores() {
            let store = &scratch.store;
            let mut company = acme("gold");
            company.tax_id = None;
            let err = store.set_company(&company).expect_err("unknown plan");
            match store.dialect() {
                Dialect::Sqlite => assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}"),
                // 23503: foreign_key_violation.
                Dialect::Postgres => assert!(
                    matches!(&err, StoreError::Database(text) if text.ends_with("(23503)")),
                    "{err:?}"
                ),
            }
            assert_eq!(store.company().expect("company"), None);
        }
    }
}
