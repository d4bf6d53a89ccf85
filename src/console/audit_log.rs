//! The audit log in the console: the filtered, paginated list, its CSV export, and the
//! page of one row.
//!
//! A row keeps who called, which tool, the outcome's catalog code and entry, how long it
//! took and where it came from (`store::audit`), never the arguments nor the error the
//! caller was sent: a hint names the arguments at fault, and the log keeps none. The page
//! of a row therefore shows what is stored and, for a failure, what the catalog says about
//! its entry — its identities and its hint's template. A row written before rows named
//! their entry shows every entry with its code.
//!
//! The list, the export and the overview's last failures read through the same filter and
//! the same read as `tollgate audit` ([`AuditFilter`], `Store::audit_rows`). A caller is
//! shown by its name — the key's name, the provider user's name — and a client by its
//! name, the ids in the `title` and on the row's own page ([`UserNames`], one read of the
//! keys, clients and users for all the rows shown).

use serde_json::{Value, json};

use super::names::Names;
use super::{Console, Operator, Request, Response};
use crate::catalog::{Channel, Class, ErrorKind};
use crate::clock::{format_time_ms, parse_utc_minute};
use crate::config::Locale;
use crate::store::audit::{AuditFilter, AuditRow};
use crate::store::users::is_user_id;
use crate::store::{Store, StoreError, store_failure};
use crate::tools::csv;

/// Rows per page of the audit log.
const AUDIT_PAGE_ROWS: u32 = 50;
/// Rows one CSV export holds at most (the newest that match).
pub const CSV_EXPORT_ROWS: u32 = 100_000;
/// The path of one row's page, before its id.
const ROW_PATH: &str = "/console/audit/";

/// The names of the callers and clients of some rows.
pub(super) struct UserNames(Names);

impl UserNames {
    /// The names of `rows`' callers and clients: every key and client, and the users among
    /// the callers, in one read each.
    pub(super) fn of(store: &Store, rows: &[AuditRow]) -> Result<UserNames, StoreError> {
        let ids: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.credential_id.as_deref())
            .collect();
        Names::read(store, &ids).map(UserNames)
    }

    /// The name of the row's caller, when it is a user.
    fn of_row(&self, r: &AuditRow) -> Option<&str> {
        let id = r.credential_id.as_deref()?;
        is_user_id(id).then(|| self.0.credential(id)).flatten()
    }
}

/// A row as the list templates read it, its caller's name when it is a user.
pub(super) fn audit_json(r: &AuditRow, names: &UserNames) -> Value {
    json!({
        "id": r.id, "at": format_time_ms(r.at_ms), "credential": r.credential_id,
        "who": names.0.credential_json(r.credential_id.as_deref()),
        "client_shown": names.0.client_json(r.client_id.as_deref()),
        "user": names.of_row(r),
        "client": r.client_id, "tool": r.tool, "outcome": r.outcome, "calls": r.calls,
        "duration_ms": r.duration_us as f64 / 1000.0, "transport": r.transport,
        "source": r.source, "backend": r.backend, "request_id": r.request_id,
        "trace_id": r.trace_id,
    })
}

/// The filters of the audit page, from its query.
struct AuditQuery {
    fields: Vec<(String, String)>,
    filter: AuditFilter,
}

fn audit_query(request: &Request<'_>, limit: u32) -> AuditQuery {
    let fields = request.query_fields();
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let time = |name: &str| {
        field(name)
            .and_then(|v| parse_utc_minute(&v))
            .map(|s| s * 1000)
    };
    let id = |name: &str| field(name).and_then(|v| v.parse::<i64>().ok());
    let filter = AuditFilter {
        credential_id: field("credential"),
        tool: field("tool"),
        outcome: field("outcome"),
        failures_only: field("failures").is_some(),
        since_ms: time("since"),
        until_ms: time("until"),
        before_id: id("before"),
        after_id: id("after"),
        limit,
    };
    AuditQuery { fields, filter }
}

/// The query string of the filters (no position), for the links of the page.
fn filter_query(fields: &[(String, String)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        if [
            "credential",
            "tool",
            "outcome",
            "failures",
            "since",
            "until",
        ]
        .contains(&name.as_str())
            && !value.trim().is_empty()
        {
            out.append_pair(name, value.trim());
        }
    }
    out.finish()
}

/// `GET /console/audit`: a page of rows, newest first, with the filter form.
pub(super) fn audit(console: &Console, request: &Request<'_>, op: &Operator) -> Response {
    let query = audit_query(request, AUDIT_PAGE_ROWS + 1);
    let store = console.server.store();
    let (rows, names) = match store
        .audit_rows(&query.filter)
        .and_then(|rows| UserNames::of(store, &rows).map(|names| (rows, names)))
    {
        Ok(read) => read,
        Err(e) => return console.store_failed(op, e),
    };
    // One row more than a page says whether there is another page in that direction.
    let going_newer = query.filter.after_id.is_some();
    let more = rows.len() > AUDIT_PAGE_ROWS as usize;
    let rows: Vec<&AuditRow> = if going_newer && more {
        rows.iter().skip(1).collect()
    } else {
        rows.iter().take(AUDIT_PAGE_ROWS as usize).collect()
    };
    let filters = filter_query(&query.fields);
    let join = |extra: String| {
        let mut q = filters.clone();
        if !q.is_empty() && !extra.is_empty() {
            q.push('&');
        }
        q.push_str(&extra);
        if q.is_empty() {
            String::from("/console/audit")
        } else {
            format!("/console/audit?{q}")
        }
    };
    let older = (!going_newer && more) || (going_newer && !rows.is_empty());
    let newer = (going_newer && more) || query.filter.before_id.is_some();
    let next = older
        .then(|| rows.last().map(|r| join(format!("before={}", r.id))))
        .flatten();
    let prev = newer
        .then(|| rows.first().map(|r| join(format!("after={}", r.id))))
        .flatten();
    let value = |name: &str| {
        query
            .fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(String::new(), |(_, v)| v.trim().to_owned())
    };
    let csv = if filters.is_empty() {
        String::from("/console/audit.csv")
    } else {
        format!("/console/audit.csv?{filters}")
    };
    let page = console.render(
        "audit.html",
        "audit",
        Some(op),
        json!({
            "rows": rows.iter().map(|r| audit_json(r, &names)).collect::<Vec<_>>(),
            "next": next, "prev": prev, "csv": csv,
            "filter": {
                "credential": value("credential"), "tool": value("tool"),
                "outcome": value("outcome"), "since": value("since"), "until": value("until"),
                "failures": !value("failures").is_empty(),
            },
            "export_rows": CSV_EXPORT_ROWS,
        }),
    );
    Response::html(200, page)
}

/// `GET /console/audit.csv`: the rows the filters match, newest first, at most
/// [`CSV_EXPORT_ROWS`].
pub(super) fn audit_csv(console: &Console, request: &Request<'_>) -> Response {
    let mut query = audit_query(request, CSV_EXPORT_ROWS);
    query.filter.before_id = None;
    query.filter.after_id = None;
    let store = console.server.store();
    let read = store
        .audit_rows(&query.filter)
        .and_then(|rows| UserNames::of(store, &rows).map(|names| (rows, names)));
    let (rows, names) = match read {
        Ok(read) => read,
        Err(e) => {
            let err = store_failure(e, false);
            let hint = err.hint(console.locale());
            let status = err.kind().spec().http_status;
            return Response::new(status, "text/plain; charset=utf-8", hint.into_bytes());
        }
    };
    let mut out = String::from(
        "id,at,credential_id,client_id,tool,outcome,calls,duration_us,transport,source,backend,request_id,user_name,trace_id\r\n",
    );
    for r in &rows {
        let cells = [
            r.id.to_string(),
            crate::clock::format_time_ms(r.at_ms),
            r.credential_id.clone().unwrap_or_default(),
            r.client_id.clone().unwrap_or_default(),
            r.tool.clone(),
            r.outcome.clone(),
            r.calls.to_string(),
            r.duration_us.to_string(),
            r.transport.clone(),
            r.source.clone().unwrap_or_default(),
            r.backend.clone().unwrap_or_default(),
            r.request_id.clone(),
            names.of_row(r).unwrap_or_default().to_owned(),
            r.trace_id.clone().unwrap_or_default(),
        ];
        let line: Vec<String> = cells.iter().map(|c| csv::field(c)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    Response::new(200, "text/csv; charset=utf-8", out.into_bytes()).with_header(
        "Content-Disposition",
        "attachment; filename=\"tollgate-audit.csv\"".into(),
    )
}

/// `GET /console/audit/{id}`: every stored field of one row and, for a failure, its
/// catalog entry. `None` (the console's 404) for a path that names no row.
pub(super) fn row_page(console: &Console, op: &Operator, path: &str) -> Option<Response> {
    let id = row_id(path)?;
    let store = console.server.store();
    let record = match store.audit_row(id) {
        Ok(Some(record)) => record,
        Ok(None) => return None,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let names = match UserNames::of(store, std::slice::from_ref(&record)) {
        Ok(names) => names,
        Err(e) => return Some(console.store_failed(op, e)),
    };
    let locale = console.locale();
    let entries: Vec<Value> = row_entries(&record)
        .into_iter()
        .map(|kind| entry_json(kind, locale))
        .collect();
    let mut row = audit_json(&record, &names);
    row["change"] = json!(record.tool.starts_with("console:"));
    row["summary"] = json!(record.source.is_some());
    let title = console
        .texts()
        .get("audit_row_title")
        .replace("{id}", &id.to_string());
    // Under the audit log in the navigation.
    let page = console.render(
        "audit_row.html",
        "audit",
        Some(op),
        json!({"title": title, "row": row, "entries": entries}),
    );
    Some(Response::html(200, page))
}

/// The row id of `/console/audit/{id}`: decimal digits only, as the list links them.
fn row_id(path: &str) -> Option<i64> {
    let digits = path.strip_prefix(ROW_PATH)?;
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The catalog entries a row's page shows: the one it names, or for a row that names none
/// (written before rows did, or by a newer release) every entry with its code.
fn row_entries(row: &AuditRow) -> Vec<ErrorKind> {
    match row.entry {
        Some(kind) => vec![kind],
        None => ErrorKind::with_code(&row.outcome).collect(),
    }
}

/// What the catalog says about one entry, for the page of a row with its code.
fn entry_json(kind: ErrorKind, locale: Locale) -> Value {
    let spec = kind.spec();
    let class = match spec.class {
        Class::Protocol => "class_protocol",
        Class::Transport => "class_transport",
        Class::Guard => "class_guard",
        Class::Tool => "class_tool",
        Class::ServerFault => "class_server_fault",
    };
    let hint = match locale {
        Locale::En => spec.hint_en,
        Locale::Es => spec.hint_es,
    };
    json!({
        "code": spec.code, "http_status": spec.http_status, "error_code": spec.error_code,
        "retryable": spec.retryable, "class": class, "hint": hint,
        "rpc_code": (spec.channel == Channel::JsonRpc).then_some(spec.rpc_code),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_path_names_a_decimal_id() {
        assert_eq!(row_id("/console/audit/42"), Some(42));
        assert_eq!(row_id("/console/audit/0"), Some(0));
        for bad in [
            "/console/audit/",
            "/console/audit/-1",
            "/console/audit/+1",
            "/console/audit/4a",
            "/console/audit/42/",
            "/console/audit/1.5",
            "/console/audit/9999999999999999999",
            "/console/audits/1",
        ] {
            assert_eq!(row_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_row_shows_the_entry_it_names_and_an_older_row_every_entry_of_its_code() {
        let row = AuditRow {
            id: 1,
            at_ms: 0,
            request_id: "1".into(),
            credential_id: None,
            client_id: None,
            tool: "crm_get_order".into(),
            outcome: "rate_limited".into(),
            entry: Some(ErrorKind::BackendRateLimited),
            duration_us: 0,
            transport: "http".into(),
            calls: 1,
            source: None,
            backend: Some("crm".into()),
            trace_id: None,
        };
        assert_eq!(row_entries(&row), [ErrorKind::BackendRateLimited]);
        let older = AuditRow { entry: None, ..row };
        assert_eq!(
            row_entries(&older),
            [ErrorKind::RateLimited, ErrorKind::BackendRateLimited]
        );
        let ok = AuditRow {
            outcome: "ok".into(),
            ..older
        };
        assert!(row_entries(&ok).is_empty());
    }

    #[test]
    fn a_code_shows_every_catalog_entry_that_carries_it() {
        let entries: Vec<Value> = ErrorKind::with_code("adapter_error")
            .map(|k| entry_json(k, Locale::En))
            .collect();
        assert!(entries.len() > 1, "{entries:?}");
        assert!(entries.iter().any(|e| e["retryable"] == json!(true)));
        assert!(entries.iter().any(|e| e["retryable"] == json!(false)));
        let limited = entry_json(ErrorKind::RateLimited, Locale::Es);
        assert_eq!(limited["http_status"], json!(429));
        assert_eq!(limited["error_code"], json!(3001));
        assert_eq!(limited["class"], json!("class_guard"));
        assert_eq!(limited["rpc_code"], json!(-32006));
        assert_eq!(
            limited["hint"],
            json!(ErrorKind::RateLimited.spec().hint_es)
        );
        let tool = entry_json(ErrorKind::InvoiceNotFound, Locale::En);
        assert_eq!(tool["rpc_code"], Value::Null);
        assert_eq!(tool["class"], json!("class_tool"));
        // The template shows the class in words: every class has them in both languages.
        for kind in ErrorKind::ALL {
            let class = entry_json(*kind, Locale::En)["class"].clone();
            let key = class.as_str().expect("a key");
            for locale in [Locale::En, Locale::Es] {
                assert_ne!(super::super::i18n::texts(locale).get(key), key, "{key}");
            }
        }
    }
}
