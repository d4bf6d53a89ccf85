//! `tollgate oauth …`: what the OAuth front door ([`crate::oauth`]) keeps, for the
//! operator. The grants — each a person's consent to an application, under which the
//! application's tokens act as that person — are listed and revoked one by one; the clients
//! that registered themselves (RFC 7591) are listed and deleted, which revokes their grants.
//! A revoked grant's tokens are refused on their next call, on every node: every call with
//! one re-reads its grant inside its charging transaction.
//!
//! Names of people and of applications come from outside (a provider's token, a
//! registration request, a client metadata document): everything printed from them is
//! escaped for the terminal.

use super::*;
use crate::store::oauth::{Grant, Registration};

/// `tollgate oauth …`
#[derive(Debug, Subcommand)]
pub enum OAuthCommand {
    /// List the grants: each person's consent to an application (person, application,
    /// scopes, created, last used, revoked), standing ones first.
    #[command(after_help = "Example:
  tollgate oauth grants --json")]
    Grants(JsonArg),
    /// Revoke a grant: the application's tokens for that person are refused from their
    /// next call, on every node, and it must ask the person again.
    #[command(
        name = "revoke-grant",
        after_help = "Example:
  tollgate oauth revoke-grant g_5e0d2a9c41b7f3e8d6a15e0d2a9c41b7"
    )]
    RevokeGrant(OAuthIdArgs),
    /// List the applications that registered themselves (id, name, redirect URIs, how they
    /// authenticate, created, last used).
    #[command(after_help = "Example:
  tollgate oauth clients --json")]
    Clients(JsonArg),
    /// Delete a registered application and revoke every grant to it: its tokens are refused
    /// from their next call, and it must register again.
    #[command(
        name = "delete-client",
        after_help = "Example:
  tollgate oauth delete-client tgc_3f9a0c2b7d41e8a5c6b03f9a0c2b7d41"
    )]
    DeleteClient(OAuthIdArgs),
}

/// A grant or client named on the command line.
#[derive(Debug, Args)]
pub struct OAuthIdArgs {
    /// The id, as `tollgate oauth grants` or `tollgate oauth clients` shows it.
    id: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `tollgate oauth …`.
pub fn oauth(config: &Config, command: &OAuthCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        OAuthCommand::Grants(args) => grant_list(&store, args.json),
        OAuthCommand::RevokeGrant(args) => revoke_grant(&store, args),
        OAuthCommand::Clients(args) => client_list(&store, args.json),
        OAuthCommand::DeleteClient(args) => delete_client(&store, args),
    }))
}

/// `standing` or `revoked`.
fn grant_state(grant: &Grant) -> &'static str {
    if grant.revoked_at.is_some() {
        "revoked"
    } else {
        "standing"
    }
}

/// An application as the terminal shows it: its name and id, or its id alone.
fn shown_client(id: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!(
            "{} ({})",
            escape_for_terminal(name),
            escape_for_terminal(id)
        ),
        None => escape_for_terminal(id),
    }
}

/// A time of the listings, or `-`.
fn time_or_dash(at: Option<i64>) -> String {
    at.map_or_else(|| "-".to_owned(), format_time)
}

fn grant_json(grant: &Grant) -> Value {
    json!({
        "id": grant.id, "state": grant_state(grant),
        "principal_id": grant.principal_id, "person": grant.principal_label,
        "client_id": grant.client_id, "client_name": grant.client_name,
        "scopes": grant.scopes, "created_at": grant.created_at,
        "updated_at": grant.updated_at, "last_used_at": grant.last_used_at,
        "revoked_at": grant.revoked_at,
    })
}

fn grant_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let grants = store.grants()?;
    if as_json {
        println!("{}", Value::Array(grants.iter().map(grant_json).collect()));
        return Ok(());
    }
    if grants.is_empty() {
        println!(
            "No grants yet. A grant is recorded when a person allows an application at the \
             OAuth front door ([oauth_server], docs/oauth.md)."
        );
        return Ok(());
    }
    println!(
        "{:<34}  {:<8}  {:<36}  {:<44}  {:<28}  {:<20}  {:<20}  REVOKED",
        "ID", "STATE", "PERSON", "APPLICATION", "SCOPES", "CREATED", "LAST USED"
    );
    for g in &grants {
        println!(
            "{:<34}  {:<8}  {:<36}  {:<44}  {:<28}  {:<20}  {:<20}  {}",
            g.id,
            grant_state(g),
            format!(
                "{} ({})",
                escape_for_terminal(&g.principal_label),
                escape_for_terminal(&g.principal_id)
            ),
            shown_client(&g.client_id, g.client_name.as_deref()),
            escape_for_terminal(&g.scopes.join(" ")),
            format_time(g.created_at),
            time_or_dash(g.last_used_at),
            time_or_dash(g.revoked_at),
        );
    }
    Ok(())
}

fn revoke_grant(store: &Store, args: &OAuthIdArgs) -> Result<(), Failed> {
    let Some(grant) = store.grant(&args.id)? else {
        return Err(Failed::from(format!(
            "no grant has the id {:?}; `tollgate oauth grants` lists them",
            args.id
        )));
    };
    let now = crate::clock::Clock::System.unix_secs();
    let changed = grant.revoked_at.is_none() && store.revoke_grant(&grant.id, now)?;
    let revoked_at = if changed { Some(now) } else { grant.revoked_at };
    if args.json {
        println!(
            "{}",
            json!({ "id": grant.id, "revoked": true, "changed": changed,
                    "revoked_at": revoked_at })
        );
        return Ok(());
    }
    let person = escape_for_terminal(&grant.principal_label);
    let client = shown_client(&grant.client_id, grant.client_name.as_deref());
    if changed {
        println!(
            "Revoked grant {} of {person} to {client}: its tokens are refused from their next \
             call, on every node.",
            grant.id
        );
    } else {
        println!(
            "Grant {} of {person} to {client} was already revoked, at {}.",
            grant.id,
            time_or_dash(revoked_at)
        );
    }
    Ok(())
}

fn client_json(client: &Registration) -> Value {
    json!({
        "client_id": client.client_id, "client_name": client.client_name,
        "client_uri": client.client_uri, "redirect_uris": client.redirect_uris,
        "grant_types": client.grant_types, "auth_method": client.auth_method,
        "application_type": client.application_type, "created_at": client.created_at,
        "last_used_at": client.last_used_at,
    })
}

fn client_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let clients = store.registrations()?;
    if as_json {
        println!(
            "{}",
            Value::Array(clients.iter().map(client_json).collect())
        );
        return Ok(());
    }
    if clients.is_empty() {
        println!(
            "No registered clients. An application registers itself at /oauth/register when \
             the front door is on; one that names a client metadata document is not listed."
        );
        return Ok(());
    }
    println!(
        "{:<36}  {:<24}  {:<20}  {:<20}  {:<20}  REDIRECT URIS",
        "ID", "NAME", "AUTH METHOD", "CREATED", "LAST USED"
    );
    for c in &clients {
        let uris: Vec<String> = c
            .redirect_uris
            .iter()
            .map(|u| escape_for_terminal(u))
            .collect();
        println!(
            "{:<36}  {:<24}  {:<20}  {:<20}  {:<20}  {}",
            escape_for_terminal(&c.client_id),
            escape_for_terminal(c.client_name.as_deref().unwrap_or("-")),
            c.auth_method,
            format_time(c.created_at),
            time_or_dash(c.last_used_at),
            uris.join(" ")
        );
    }
    Ok(())
}

fn delete_client(store: &Store, args: &OAuthIdArgs) -> Result<(), Failed> {
    let now = crate::clock::Clock::System.unix_secs();
    let Some(revoked) = store.delete_registration(&args.id, now)? else {
        return Err(Failed::from(format!(
            "no registered client has the id {:?}; `tollgate oauth clients` lists them (an \
             application known by its metadata document URL is not registered: revoke its \
             grants with `tollgate oauth revoke-grant`)",
            args.id
        )));
    };
    if args.json {
        println!(
            "{}",
            json!({ "client_id": args.id, "deleted": true, "grants_revoked": revoked })
        );
        return Ok(());
    }
    println!(
        "Deleted client {} and revoked its {revoked} standing grant(s): their tokens are \
         refused from their next call, on every node.",
        escape_for_terminal(&args.id)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(revoked_at: Option<i64>) -> Grant {
        Grant {
            id: "g_1".into(),
            principal_id: "u0123".into(),
            principal_label: "Ana\u{1b}[2J".into(),
            client_id: "https://host.example/client.json".into(),
            client_name: Some("Host\nroot".into()),
            scopes: vec!["invoices:read".into()],
            created_at: 0,
            updated_at: 0,
            last_used_at: None,
            revoked_at,
        }
    }

    #[test]
    fn a_grant_shows_its_state_and_names_come_out_escaped() {
        assert_eq!(grant_state(&grant(None)), "standing");
        assert_eq!(grant_state(&grant(Some(60))), "revoked");
        let shown = grant_json(&grant(Some(60)));
        assert_eq!(shown["state"], "revoked");
        assert_eq!(shown["revoked_at"], 60);
        assert_eq!(
            shown["person"], "Ana\u{1b}[2J",
            "JSON keeps the name as it is"
        );
        let g = grant(None);
        assert_eq!(
            shown_client(&g.client_id, g.client_name.as_deref()),
            "Host\\nroot (https://host.example/client.json)"
        );
        assert_eq!(shown_client("tgc_1", None), "tgc_1");
        assert_eq!(time_or_dash(None), "-");
        assert_eq!(time_or_dash(Some(60)), "1970-01-01T00:01:00Z");
    }
}
