//! `tollgate key …` and `tollgate client …`: API keys and OAuth clients, over
//! [`crate::guards::auth`]. A token or client secret is printed once, here.

use super::*;

/// Runs `tollgate key …`.
pub fn key(config: &Config, command: &KeyCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        KeyCommand::Create(args) => key_create(&store, &cli_scopes(config), args),
        KeyCommand::List(args) => key_list(&store, args.json),
        KeyCommand::Revoke(args) => key_revoke(&store, args),
        KeyCommand::Rotate(args) => key_rotate(&store, args),
        KeyCommand::Set(args) => key_set(&store, args),
    }))
}

/// The scopes `key create` and `client create` accept: those of the configured backends
/// and, in a build that carries the conformance fixtures, theirs too, since a server turns
/// them on with a flag (`serve --conformance-pack`) that this command does not see.
fn cli_scopes(config: &Config) -> KnownScopes {
    KnownScopes::new(&config.backends, crate::HAS_CONFORMANCE_PACK)
}

/// Creates the first admin key (scopes `*` and `admin`: every tool and the console) when the installation has no active API key;
/// `None` when it already has one (`tollgate init` run again).
pub fn first_admin_key(store: &Store) -> Result<Option<IssuedKey>, CredentialError> {
    let now = crate::clock::Clock::System.unix_secs();
    if auth::list_keys(store)?
        .iter()
        .any(|k| k.status(now) == "active")
    {
        return Ok(None);
    }
    let new = NewKey {
        name: "admin".to_owned(),
        scopes: vec![auth::SUPER_SCOPE.to_owned(), auth::ADMIN_SCOPE.to_owned()],
        expires_in: None,
        client_id: None,
        mode: Mode::Live,
        guard_channel: None,
    };
    auth::create_key(store, &new).map(Some)
}

pub(super) fn key_create(
    store: &Store,
    known: &KnownScopes,
    args: &KeyCreateArgs,
) -> Result<(), Failed> {
    let scopes = known.parse_list(&args.scopes)?;
    let expires_in = match &args.expires_in {
        Some(text) => Some(parse_duration(text).map_err(|e| format!("--expires-in: {e}"))?),
        None => None,
    };
    let mode = if args.test { Mode::Test } else { Mode::Live };
    let guard_channel = match &args.guard_channel {
        Some(word) => Some(parse_channel(word)?),
        None => None,
    };
    let new = NewKey {
        name: args.name.clone(),
        scopes,
        expires_in,
        client_id: args.client.clone(),
        mode,
        guard_channel,
    };
    let issued = auth::create_key(store, &new)?;
    if mode == Mode::Test && company_mode(store)? == Mode::Live {
        eprintln!(
            "tollgate: note: the company is in live mode, so this test key is refused \
             (invalid_token_type) until `tollgate company set --mode test`"
        );
    }
    if args.json {
        println!(
            "{}",
            json!({ "id": issued.public_id, "token": issued.token.expose(), "name": new.name.trim(),
                    "scopes": new.scopes, "mode": mode.as_str(), "client_id": new.client_id,
                    "expires_at": issued.expires_at, "guard_channel": channel_word(guard_channel) })
        );
    } else {
        println!(
            "Created key {} ({}), scopes {}.",
            issued.public_id,
            new.name.trim(),
            new.scopes.join(",")
        );
        if let Some(at) = issued.expires_at {
            println!("It expires at {}.", format_time(at));
        }
        println!("Token (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.token.expose());
    }
    Ok(())
}

pub(super) fn key_json(key: &KeyInfo, now: i64) -> Value {
    json!({
        "id": key.public_id, "name": key.name, "status": key.status(now), "mode": key.mode.as_str(),
        "scopes": key.scopes, "client_id": key.client_id, "created_at": key.created_at,
        "expires_at": key.expires_at, "revoked_at": key.revoked_at,
        "last_used_at": key.last_used_at, "previous_secret_until": key.previous_secret_until,
        "guard_channel": channel_word(key.guard_channel),
    })
}

/// A key's guard channel as `key list` and `key set` show it: its own, or `default`.
fn channel_word(channel: Option<GuardChannel>) -> &'static str {
    channel.map_or("default", GuardChannel::as_str)
}

/// `--guard-channel` of `key create`: `tool_result` or `jsonrpc`.
fn parse_channel(word: &str) -> Result<GuardChannel, Failed> {
    word.parse::<GuardChannel>().map_err(|_| {
        Failed::from(format!(
            "--guard-channel: expected tool_result or jsonrpc, got {word:?}"
        ))
    })
}

/// `--guard-channel` of `key set`: a channel, or `default` (follow the setting).
fn parse_channel_or_default(word: &str) -> Result<Option<GuardChannel>, Failed> {
    if word.trim().eq_ignore_ascii_case("default") {
        return Ok(None);
    }
    word.parse::<GuardChannel>().map(Some).map_err(|_| {
        Failed::from(format!(
            "--guard-channel: expected tool_result, jsonrpc or default, got {word:?}"
        ))
    })
}

pub(super) fn key_set(store: &Store, args: &KeySetArgs) -> Result<(), Failed> {
    let channel = parse_channel_or_default(&args.guard_channel)?;
    auth::set_guard_channel(store, &args.id, channel)?;
    if args.json {
        println!(
            "{}",
            json!({ "id": args.id, "guard_channel": channel_word(channel) })
        );
    } else {
        match channel {
            Some(channel) => println!(
                "Key {} now gets guard refusals as {}, from its next call.",
                args.id,
                channel.as_str()
            ),
            None => println!(
                "Key {} now follows the [errors] guard_channel setting, from its next call.",
                args.id
            ),
        }
    }
    Ok(())
}

pub(super) fn key_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let keys = auth::list_keys(store)?;
    let now = crate::clock::Clock::System.unix_secs();
    if as_json {
        let list: Vec<Value> = keys.iter().map(|k| key_json(k, now)).collect();
        println!("{}", Value::Array(list));
        return Ok(());
    }
    if keys.is_empty() {
        println!("No keys. Create one with `tollgate key create --name NAME --scopes SCOPES`.");
        return Ok(());
    }
    println!(
        "{:<20}  {:<8}  {:<4}  {:<20}  {:<20}  {:<20}  {:<11}  SCOPES",
        "ID", "STATUS", "MODE", "NAME", "EXPIRES", "LAST USED", "CHANNEL"
    );
    for k in &keys {
        let expires = k.expires_at.map_or_else(|| "never".to_owned(), format_time);
        let used = k
            .last_used_at
            .map_or_else(|| "never".to_owned(), format_time);
        let client = k
            .client_id
            .as_deref()
            .map(|c| format!(" (client {c})"))
            .unwrap_or_default();
        println!(
            "{:<20}  {:<8}  {:<4}  {:<20}  {:<20}  {:<20}  {:<11}  {}{client}",
            k.public_id,
            k.status(now),
            k.mode.as_str(),
            k.name,
            expires,
            used,
            channel_word(k.guard_channel),
            k.scopes.join(",")
        );
    }
    Ok(())
}

pub(super) fn key_revoke(store: &Store, args: &KeyIdArgs) -> Result<(), Failed> {
    let newly = auth::revoke_key(store, &args.id)?;
    if args.json {
        println!(
            "{}",
            json!({ "id": args.id, "revoked": true, "already_revoked": !newly })
        );
    } else if newly {
        println!("Revoked key {}; its next call is refused.", args.id);
    } else {
        println!("Key {} was already revoked.", args.id);
    }
    Ok(())
}

pub(super) fn key_rotate(store: &Store, args: &KeyRotateArgs) -> Result<(), Failed> {
    let grace = parse_duration(&args.grace).map_err(|e| format!("--grace: {e}"))?;
    let issued = auth::rotate_key(store, &args.id, grace)?;
    let until = (!grace.is_zero()).then(|| {
        crate::clock::Clock::System
            .unix_secs()
            .saturating_add(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX))
    });
    if args.json {
        println!(
            "{}",
            json!({ "id": issued.public_id, "token": issued.token.expose(), "previous_secret_until": until })
        );
    } else {
        match until {
            Some(at) => println!(
                "Rotated key {}; the old secret works until {}.",
                issued.public_id,
                format_time(at)
            ),
            None => println!(
                "Rotated key {}; the old secret no longer works.",
                issued.public_id
            ),
        }
        println!("New token (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.token.expose());
    }
    Ok(())
}

/// Runs `tollgate client …`.
pub fn client(config: &Config, command: &ClientCommand) -> ExitCode {
    finish(open(config).and_then(|store| match command {
        ClientCommand::Create(args) => client_create(&store, &cli_scopes(config), args),
        ClientCommand::List(args) => client_list(&store, args.json),
        ClientCommand::Revoke(args) => client_revoke(&store, args),
    }))
}

pub(super) fn client_create(
    store: &Store,
    known: &KnownScopes,
    args: &ClientCreateArgs,
) -> Result<(), Failed> {
    let scopes = known.parse_list(&args.scopes)?;
    let issued = auth::create_client(store, &args.name, &scopes)?;
    if args.json {
        println!(
            "{}",
            json!({ "client_id": issued.client_id, "client_secret": issued.secret.expose(),
                    "name": args.name.trim(), "allowed_scopes": scopes })
        );
    } else {
        println!(
            "Created OAuth client {} ({}), allowed scopes {}.",
            issued.client_id,
            args.name.trim(),
            scopes.join(",")
        );
        println!("Client secret (shown once; store it now, it cannot be shown again):");
        println!("{}", issued.secret.expose());
    }
    Ok(())
}

pub(super) fn client_json(client: &OAuthClient) -> Value {
    json!({
        "client_id": client.client_id, "name": client.name, "allowed_scopes": client.allowed_scopes,
        "per_minute_limit": client.per_minute_limit, "created_at": client.created_at,
        "status": if client.revoked { "revoked" } else { "active" },
    })
}

pub(super) fn client_list(store: &Store, as_json: bool) -> Result<(), Failed> {
    let clients = auth::list_clients(store)?;
    if as_json {
        println!(
            "{}",
            Value::Array(clients.iter().map(client_json).collect())
        );
        return Ok(());
    }
    if clients.is_empty() {
        println!(
            "No OAuth clients. Create one with `tollgate client create --name NAME --scopes SCOPES`."
        );
        return Ok(());
    }
    println!(
        "{:<26}  {:<8}  {:<20}  {:<20}  ALLOWED SCOPES",
        "CLIENT ID", "STATUS", "NAME", "CREATED"
    );
    for c in &clients {
        let status = if c.revoked { "revoked" } else { "active" };
        println!(
            "{:<26}  {:<8}  {:<20}  {:<20}  {}",
            c.client_id,
            status,
            c.name,
            format_time(c.created_at),
            c.allowed_scopes.join(",")
        );
    }
    Ok(())
}

pub(super) fn client_revoke(store: &Store, args: &ClientIdArgs) -> Result<(), Failed> {
    let newly = auth::revoke_client(store, &args.id)?;
    if args.json {
        println!(
            "{}",
            json!({ "client_id": args.id, "revoked": true, "already_revoked": !newly })
        );
    } else if newly {
        println!(
            "Revoked OAuth client {}; calls with its credentials now answer client_revoked.",
            args.id
        );
    } else {
        println!("OAuth client {} was already revoked.", args.id);
    }
    Ok(())
}
