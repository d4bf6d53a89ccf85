//! Client tools: `search_clients`, `get_client`, `create_client`, `update_client`,
//! `delete_client`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Args, db_failure, not_found, output, page, tool};
use crate::catalog::{ErrorKind, Expect, McpError};
use crate::store::invoicing as db;
use crate::tools::invoicing::model::{Client, ClientId};
use crate::tools::invoicing::schemas as s;
use crate::tools::invoicing::{SCOPE_CLIENTS_DELETE, SCOPE_CLIENTS_READ, SCOPE_CLIENTS_WRITE};
use crate::tools::{Book, Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec};

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(search_spec(), None, search_clients),
        tool(get_spec(), None, get_client),
        tool(create_spec(), None, create_client),
        tool(update_spec(), None, update_client),
        tool(delete_spec(), None, delete_client),
    ]
}

fn client_fields() -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("name".into(), s::text(200, "Legal or trade name."));
    p.insert("tax_id".into(), s::tax_id());
    p.insert(
        "email".into(),
        json!({ "type": "string", "maxLength": 254, "description": "Address invoices are sent to." }),
    );
    p.insert("address".into(), s::text(500, "Postal address, one line."));
    p
}

fn search_spec() -> ToolSpec {
    let mut p = Map::new();
    p.insert(
        "query".into(),
        s::text(
            200,
            "Text to find in the name, tax id or e-mail (case-insensitive).",
        ),
    );
    s::pagination(&mut p, "cli_");
    ToolSpec {
        name: "search_clients".into(),
        title: "Search clients".into(),
        description: "Find clients by name, tax id (NIF/NIE/CIF) or e-mail, newest first. \
            Returns a page {data, has_more, next_cursor}; pass next_cursor as starting_after \
            for the next page. Use it to get a client_id before creating an invoice."
            .into(),
        category: Category::Read,
        scope: SCOPE_CLIENTS_READ.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(Value::Object(p), &[]),
        output_schema: Some(s::page_out(s::client_out())),
    }
}

fn get_spec() -> ToolSpec {
    ToolSpec {
        name: "get_client".into(),
        title: "Get a client".into(),
        description: "Read one client by client_id, with its number of invoices and the \
            amount it still owes on issued invoices (outstanding_cents)."
            .into(),
        category: Category::Read,
        scope: SCOPE_CLIENTS_READ.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(
            json!({ "client_id": s::id("cli_", "The client's id.") }),
            &["client_id"],
        ),
        output_schema: Some(s::client_detail_out()),
    }
}

fn create_spec() -> ToolSpec {
    ToolSpec {
        name: "create_client".into(),
        title: "Create a client".into(),
        description: concat!(
            "Register a client. The tax id (Spanish NIF, NIE or CIF) is \
                checksum-validated and must be unique: if it already exists the error's \
                details.existing_resource_id is the client to use instead. A client without tax id \
                can only receive simplified invoices; without e-mail, invoices cannot be sent.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_CLIENTS_WRITE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(Value::Object(client_fields()), &["name"], false),
        output_schema: Some(s::client_out()),
    }
}

fn update_spec() -> ToolSpec {
    let mut p = client_fields();
    p.insert("client_id".into(), s::id("cli_", "The client to change."));
    ToolSpec {
        name: "update_client".into(),
        title: "Update a client".into(),
        description: concat!(
            "Change a client's name, tax id, e-mail or address; fields left out keep \
                their value. Issued invoices keep the name and tax id they were issued with.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_CLIENTS_WRITE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(Value::Object(p), &["client_id"], false),
        output_schema: Some(s::client_out()),
    }
}

fn delete_spec() -> ToolSpec {
    ToolSpec {
        name: "delete_client".into(),
        title: "Delete a client".into(),
        description: concat!(
            "Delete a client that has no invoices at all (not even drafts). A client \
                with invoices cannot be deleted: the error says how many it has.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Destructive,
        scope: SCOPE_CLIENTS_DELETE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(
            json!({ "client_id": s::id("cli_", "The client to delete.") }),
            &["client_id"],
            false,
        ),
        output_schema: Some(s::deleted_out()),
    }
}

fn describe(client: &Client) -> String {
    let tax = client.tax_id.as_deref().unwrap_or("no tax id");
    format!("Client {} ({tax}), id {}.", client.name, client.id)
}

fn search_clients(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let after = args.opt_id("starting_after", ClientId::parse)?;
    let limit = args.limit();
    let query = args.text("query");
    let rows = ctx
        .store
        .with_conn(|c| {
            db::search_clients(
                c,
                ctx.book.as_str(),
                query.as_deref(),
                after.as_ref(),
                limit + 1,
            )
        })
        .map_err(db_failure)?;
    let value = page(rows, limit, |c| c.id.as_str(), Client::to_json);
    let count = value["data"].as_array().map_or(0, Vec::len);
    Ok(output(format!("{count} client(s) found."), value))
}

fn get_client(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("client_id", ClientId::parse)?;
    let found = ctx
        .store
        .with_conn(|c| {
            let Some(client) = db::client(c, ctx.book.as_str(), &id)? else {
                return Ok(None);
            };
            Ok(Some((
                client,
                db::client_activity(c, ctx.book.as_str(), &id)?,
            )))
        })
        .map_err(db_failure)?;
    let (client, (count, outstanding)) =
        found.ok_or_else(|| not_found(ErrorKind::ClientNotFound, "client_id", id.as_str()))?;
    let mut value = client.to_json();
    value["invoice_count"] = json!(count);
    value["outstanding_cents"] = json!(outstanding);
    Ok(output(describe(&client), value))
}

/// `tax_id_already_exists` unless the tax id is free or held by `except`.
fn ensure_tax_id_free(
    conn: &crate::store::Conn<'_>,
    book: Book,
    tax_id: Option<&str>,
    except: Option<&ClientId>,
) -> Result<(), McpError> {
    let Some(tax_id) = tax_id else {
        return Ok(());
    };
    match db::client_with_tax_id(conn, book.as_str(), tax_id).map_err(db_failure)? {
        Some(existing) if Some(&existing) != except => {
            Err(McpError::new(ErrorKind::TaxIdAlreadyExists)
                .param("tax_id")
                .detail("existing_resource_id", existing.as_str()))
        }
        _ => Ok(()),
    }
}

fn create_client(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let name = args.text("name").ok_or_else(|| {
        McpError::validation("name", "blank", Expect::Named("non_blank")).detail("reason", "blank")
    })?;
    let client = Client {
        id: ClientId::generate(),
        name,
        tax_id: args.tax_id("tax_id")?.map(|t| t.as_str().to_owned()),
        email: args.email("email")?,
        address: args.text("address"),
    };
    ctx.commit(|tx| {
        ensure_tax_id_free(tx, ctx.book, client.tax_id.as_deref(), None)?;
        db::insert_client(tx, ctx.book.as_str(), &client, ctx.clock.unix_secs())
            .map_err(db_failure)?;
        Ok(output(
            format!("Created {}", describe(&client)),
            client.to_json(),
        ))
    })
}

fn update_client(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("client_id", ClientId::parse)?;
    let name = match args.str("name") {
        Some(_) => Some(args.text("name").ok_or_else(|| {
            McpError::validation("name", "blank", Expect::Named("non_blank"))
                .detail("reason", "blank")
        })?),
        None => None,
    };
    let tax_id = args.tax_id("tax_id")?.map(|t| t.as_str().to_owned());
    let email = args.email("email")?;
    let address = args.text("address");
    ctx.commit(|tx| {
        let mut client = db::client(tx, ctx.book.as_str(), &id)
            .map_err(db_failure)?
            .ok_or_else(|| not_found(ErrorKind::ClientNotFound, "client_id", id.as_str()))?;
        ensure_tax_id_free(tx, ctx.book, tax_id.as_deref(), Some(&id))?;
        client.name = name.unwrap_or(client.name);
        client.tax_id = tax_id.or(client.tax_id);
        client.email = email.or(client.email);
        client.address = address.or(client.address);
        db::update_client(tx, ctx.book.as_str(), &client, ctx.clock.unix_secs())
            .map_err(db_failure)?;
        Ok(output(
            format!("Updated {}", describe(&client)),
            client.to_json(),
        ))
    })
}

fn delete_client(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("client_id", ClientId::parse)?;
    ctx.commit(|tx| {
        let client = db::client(tx, ctx.book.as_str(), &id)
            .map_err(db_failure)?
            .ok_or_else(|| not_found(ErrorKind::ClientNotFound, "client_id", id.as_str()))?;
        let (invoices, _) = db::client_activity(tx, ctx.book.as_str(), &id).map_err(db_failure)?;
        if invoices > 0 {
            return Err(McpError::new(ErrorKind::ClientHasInvoices)
                .param("client_id")
                .detail("invoice_count", invoices));
        }
        db::delete_client(tx, ctx.book.as_str(), &id).map_err(db_failure)?;
        Ok(output(
            format!("Deleted client {} ({}).", client.name, client.id),
            json!({ "id": id.as_str(), "deleted": true }),
        ))
    })
}
