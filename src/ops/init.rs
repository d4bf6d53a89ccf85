//! `tollgate init` (and the first start of `quickstart`): the database created, the
//! company saved, the first admin key made and shown once, and the demo data when asked.

use std::process::ExitCode;

use clap::Args;

use super::assemble::open_store;
use super::exit::fail;
use crate::config::{Config, Locale};
use crate::store::Company;

/// `tollgate init`: the company and the first admin key.
#[derive(Debug, Args)]
pub(super) struct InitArgs {
    /// Company legal name.
    #[arg(long, default_value = "My Company")]
    pub(super) company: String,
    /// Company tax id (NIF/CIF).
    #[arg(long)]
    pub(super) tax_id: Option<String>,
    /// Plan: free, starter, pro or enterprise.
    #[arg(long, default_value = "pro")]
    pub(super) plan: String,
    /// Language of error hints: en or es.
    #[arg(long, default_value = "en")]
    pub(super) locale: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Fill the invoicing back office with sample clients, invoices and payments.
    #[arg(long)]
    pub(super) demo: bool,
}

/// `tollgate init`.
pub(super) fn init(config: &Config, args: &InitArgs) -> ExitCode {
    match create_installation(config, args) {
        Ok(_) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Creates (or completes) the installation `args` describe and says what it made; the
/// first admin key's token when one was created.
pub(super) fn create_installation(
    config: &Config,
    args: &InitArgs,
) -> Result<Option<String>, ExitCode> {
    let locale: Locale = match args.locale.parse() {
        Ok(locale) => locale,
        Err(e) => return Err(fail(&format!("--locale: {e}"))),
    };
    let store = open_store(config, true)?;
    match store.plan(&args.plan) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(fail(&format!(
                "--plan: unknown plan {:?}; run `tollgate plan list`",
                args.plan
            )));
        }
        Err(e) => return Err(fail(&e.to_string())),
    }
    let company = Company {
        name: args.company.clone(),
        tax_id: args.tax_id.clone(),
        plan_slug: args.plan.clone(),
        locale: locale.as_str().to_owned(),
        country: "ES".to_owned(),
    };
    if let Err(e) = store.set_company(&company) {
        return Err(fail(&format!("cannot save the company: {e}")));
    }
    // The first admin key (scopes `*` and `admin`: every tool and the console); `None` when init runs again on a database with keys.
    let admin_key = match super::admin::first_admin_key(&store) {
        Ok(key) => key,
        Err(e) => return Err(fail(&format!("cannot create the admin key: {e}"))),
    };
    let demo = match args
        .demo
        .then(|| crate::tools::invoicing::demo::seed(&store, crate::tools::Book::Live))
    {
        None => None,
        Some(Ok(seeded)) => Some(seeded),
        Some(Err(crate::tools::invoicing::demo::DemoError::NotEmpty)) => {
            eprintln!("tollgate: the database already has clients; --demo added nothing");
            None
        }
        Some(Err(e)) => return Err(fail(&e.to_string())),
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "database": config.database, "company": company.name, "plan": company.plan_slug,
                                "admin_key_id": admin_key.as_ref().map(|k| k.public_id.as_str()),
                                "admin_key": admin_key.as_ref().map(|k| k.token.expose()),
                                "demo": demo.map(|d| serde_json::json!({ "clients": d.clients, "invoices": d.invoices, "payments": d.payments })) })
        );
    } else {
        if let Some(d) = demo {
            println!(
                "Demo data: {} clients, {} invoices, {} payments.",
                d.clients, d.invoices, d.payments
            );
        }
        println!(
            "Created {} for {} on the {} plan.",
            config.database, company.name, company.plan_slug
        );
        match &admin_key {
            Some(key) => println!(
                "Admin key {} (scopes *, admin: every tool and the console), shown once; store it now, it cannot be shown again:\n{}",
                key.public_id,
                key.token.expose()
            ),
            None => println!("Keys already exist; create more with `tollgate key create`."),
        }
    }
    Ok(admin_key.map(|key| key.token.expose().to_owned()))
}
