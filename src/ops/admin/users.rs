//! `tollgate users …`: the people and service accounts of the company's identity provider
//! who have called with one of its tokens ([`crate::store::users`]): list them, block and
//! unblock them. Every call reads its user's block inside its charging transaction, so a
//! block applies to the user's next call on every node sharing the database.
//!
//! Also here: how the operator names a user on the command line ([`resolve_user`]: its id,
//! or a subject or display name that names exactly one user), for these commands, `limits
//! set --user` and `audit --user`, and the names `tollgate audit` shows beside user ids.
//! Names and subjects come from the provider's tokens: everything printed from them is
//! escaped for the terminal.

use std::collections::HashMap;

use super::*;
use crate::guards::ratelimit::CategoryLimits;
use crate::store::audit::AuditRow;
use crate::store::users::UserRow;
use crate::tools::Category;

/// `tollgate users …`
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// List the users seen so far: name, issuer, client, first and last seen, whether
    /// blocked, and their own limits.
    #[command(after_help = "Example:
  tollgate users list --json")]
    List(JsonArg),
    /// Block a user: their next call is refused, on every node, until unblocked.
    #[command(after_help = "Examples:
  tollgate users block alice@acme.example
  tollgate users block u3f9a0c2b7d41e8a5c6b0d2e1")]
    Block(UserArgs),
    /// Unblock a user: their next call is admitted again, on every node.
    #[command(after_help = "Example:
  tollgate users unblock alice@acme.example")]
    Unblock(UserArgs),
}

/// A user named on the command line.
#[derive(Debug, Args)]
pub struct UserArgs {
    /// The user's id, as `tollgate users list` shows it, or a subject or display name that
    /// names exactly one user.
    user: String,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `tollgate users …`.
pub fn users(config: &Config, command: &UsersCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        UsersCommand::List(args) => user_list(&store, args.json),
        UsersCommand::Block(args) => set_blocked(&store, args, true),
        UsersCommand::Unblock(args) => set_blocked(&store, args, false),
    }))
}

/// The one user `wanted` names: the user with that id, else the one user whose subject or
/// display name it is. Refused, with what to do, when it names none or several.
pub fn resolve_user(store: &Store, wanted: &str) -> Result<UserRow, String> {
    let found = store
        .find_users(wanted)
        .map_err(|e| format!("cannot read the users: {e}"))?;
    pick_user(wanted, found)
}

/// The user of `found` (every user whose id, subject or display name is `wanted`) that
/// `wanted` names. An id wins over names, so that a display name a token chose cannot make
/// another user's id ambiguous.
fn pick_user(wanted: &str, mut found: Vec<UserRow>) -> Result<UserRow, String> {
    if let Some(at) = found.iter().position(|u| u.id == wanted) {
        return Ok(found.swap_remove(at));
    }
    match found.len() {
        0 => Err(format!(
            "no user is named {wanted:?}; `tollgate users list` lists the users seen so far \
             (a user is recorded the first time one of their tokens is verified)"
        )),
        1 => Ok(found.swap_remove(0)),
        n => {
            let ids: Vec<&str> = found.iter().map(|u| u.id.as_str()).collect();
            Err(format!(
                "{wanted:?} names {n} users ({}); give the id of the one you mean",
                ids.join(", ")
            ))
        }
    }
}

/// A user's name as the terminal shows it.
fn shown_name(user: &UserRow) -> String {
    escape_for_terminal(user.label())
}

/// A user's own limits as `users list` prints them (`write=5 send=1`), `-` for none.
fn overrides_text(user: &UserRow) -> String {
    let set: Vec<String> = Category::ALL
        .iter()
        .zip(user.per_minute)
        .filter_map(|(category, limit)| limit.map(|n| format!("{}={n}", category.as_str())))
        .collect();
    if set.is_empty() {
        "-".to_owned()
    } else {
        set.join(" ")
    }
}

fn user_json(user: &UserRow) -> Value {
    json!({
        "id": user.id, "name": user.label(), "subject": user.subject,
        "display_name": user.display_name, "issuer": user.issuer, "client_id": user.client_id,
        "first_seen_at": user.first_seen_at, "last_seen_at": user.last_seen_at,
        "blocked": user.blocked_at.is_some(), "blocked_at": user.blocked_at,
        "per_minute": CategoryLimits::from_columns(user.per_minute),
    })
}

fn user_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let users = store.users()?;
    if as_json {
        println!("{}", Value::Array(users.iter().map(user_json).collect()));
        return Ok(());
    }
    if users.is_empty() {
        println!(
            "No users yet. A user of the company's identity provider is recorded the first \
             time one of their tokens is verified."
        );
        return Ok(());
    }
    println!(
        "{:<25}  {:<7}  {:<24}  {:<32}  {:<16}  {:<20}  {:<20}  OVERRIDES (PER MINUTE)",
        "ID", "STATUS", "NAME", "ISSUER", "CLIENT", "FIRST SEEN", "LAST SEEN"
    );
    for u in &users {
        let status = if u.blocked_at.is_some() {
            "blocked"
        } else {
            "active"
        };
        println!(
            "{:<25}  {:<7}  {:<24}  {:<32}  {:<16}  {:<20}  {:<20}  {}",
            u.id,
            status,
            shown_name(u),
            escape_for_terminal(&u.issuer),
            escape_for_terminal(u.client_id.as_deref().unwrap_or("-")),
            format_time(u.first_seen_at),
            format_time(u.last_seen_at),
            overrides_text(u)
        );
    }
    Ok(())
}

fn set_blocked(store: &Store, args: &UserArgs, block: bool) -> Result<(), Failed> {
    let user = resolve_user(store, &args.user)?;
    let changed = user.blocked_at.is_some() != block;
    if changed {
        let at = block.then(|| crate::clock::Clock::System.unix_secs());
        if !store.set_user_blocked(&user.id, at)? {
            return Err(Failed::from(format!("user {} is gone", user.id)));
        }
        let action = if block { "block_user" } else { "unblock_user" };
        super::record_cli_change(store, action, &user.id, None).map_err(|e| {
            Failed::from(format!("changed, but the audit row was not written: {e}"))
        })?;
    }
    if args.json {
        println!(
            "{}",
            json!({ "id": user.id, "name": user.label(), "blocked": block, "changed": changed })
        );
        return Ok(());
    }
    let (id, name) = (&user.id, shown_name(&user));
    match (block, changed) {
        (true, true) => println!(
            "Blocked user {id} ({name}): their next call is refused, on every node, until \
             `tollgate users unblock {id}`."
        ),
        (true, false) => println!(
            "User {id} ({name}) was already blocked, since {}.",
            user.blocked_at.map(format_time).unwrap_or_default()
        ),
        (false, true) => println!(
            "Unblocked user {id} ({name}): their next call is admitted again, on every node."
        ),
        (false, false) => println!("User {id} ({name}) was not blocked."),
    }
    Ok(())
}

/// The names of the provider users among `rows`' callers, by id, read in one lookup.
pub(super) fn user_names(
    store: &Store,
    rows: &[AuditRow],
) -> Result<HashMap<String, String>, StoreError> {
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.credential_id.as_deref())
        .collect();
    Ok(store
        .users_among(&ids)?
        .into_iter()
        .map(|u| (u.id.clone(), u.label().to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::users::user_id;

    fn user(subject: &str, name: Option<&str>) -> UserRow {
        UserRow {
            id: user_id("https://idp.example.com", subject),
            issuer: "https://idp.example.com".into(),
            subject: subject.into(),
            display_name: name.map(str::to_owned),
            client_id: None,
            first_seen_at: 0,
            last_seen_at: 0,
            blocked_at: None,
            per_minute: [None; 5],
        }
    }

    #[test]
    fn a_user_is_named_by_its_id_or_by_a_name_only_it_has() {
        let alice = user("alice", Some("Alice"));
        assert_eq!(pick_user("Alice", vec![alice.clone()]), Ok(alice.clone()));
        // A display name chosen to be another user's id does not shadow that user.
        let mallory = user("mallory", Some(&alice.id));
        assert_eq!(
            pick_user(&alice.id, vec![mallory, alice.clone()]),
            Ok(alice.clone())
        );
    }

    #[test]
    fn a_name_of_several_users_or_of_none_is_refused_with_what_to_do() {
        let one = user("sam", None);
        let two = user("sam-2", Some("sam"));
        let several = pick_user("sam", vec![one.clone(), two.clone()]).expect_err("ambiguous");
        assert_eq!(
            several,
            format!(
                "\"sam\" names 2 users ({}, {}); give the id of the one you mean",
                one.id, two.id
            )
        );
        let none = pick_user("nobody", Vec::new()).expect_err("unknown");
        assert!(none.starts_with("no user is named \"nobody\";"), "{none}");
        assert!(none.contains("`tollgate users list`"), "{none}");
    }

    #[test]
    fn overrides_are_listed_by_category_and_names_escaped() {
        let mut limited = user("x", Some("Eve\u{1b}[2J\nroot"));
        limited.per_minute = [None, Some(5), None, Some(1), None];
        assert_eq!(overrides_text(&limited), "write=5 send=1");
        assert_eq!(overrides_text(&user("y", None)), "-");
        assert_eq!(shown_name(&limited), "Eve\\u{1b}[2J\\nroot");
    }
}
