//! The statements of the store, on either database: one small surface the table modules
//! write their SQL against, so each statement is written once.
//!
//! A statement is SQLite-flavoured text with numbered parameters (`?1`, `?2`, …) in the
//! subset both engines share (`ON CONFLICT … DO UPDATE`, `RETURNING`, `COALESCE`, `CASE`,
//! row values); on PostgreSQL its parameters become `$1`, `$2`, … once, when the connection
//! prepares it, and the prepared statement is kept per connection as SQLite's
//! `prepare_cached` keeps it. Where the two dialects differ a module asks
//! [`Conn::dialect`] and writes both forms side by side.
//!
//! Parameters are [`Param`]s, read into a borrowed [`Value`]; columns are read back through
//! [`Cell`], which both engines' cells convert to — so the two type systems meet in one
//! place: SQLite's `INTEGER` is PostgreSQL's `BIGINT`, `BLOB` is `BYTEA`, `REAL` is
//! `DOUBLE PRECISION`, and a truth value is an integer 0 or 1 on SQLite and a `boolean` on
//! PostgreSQL wherever PostgreSQL infers one.

use std::error::Error as StdError;

use postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};

use super::{Conn, Inner, SqlResult, StoreError};

/// Which SQL engine a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded default: one file.
    Sqlite,
    /// A PostgreSQL server shared by several nodes.
    Postgres,
}

/// A parameter or a cell, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::store) enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// Something a statement can take as a parameter.
pub(in crate::store) trait Param {
    fn value(&self) -> Value<'_>;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl Param for $t {
            fn value(&self) -> Value<'_> {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_param!(i64, i32, u32, u64, usize);

impl Param for bool {
    fn value(&self) -> Value<'_> {
        Value::Int(i64::from(*self))
    }
}

impl Param for f64 {
    fn value(&self) -> Value<'_> {
        Value::Real(*self)
    }
}

impl Param for str {
    fn value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl Param for String {
    fn value(&self) -> Value<'_> {
        Value::Text(self)
    }
}

impl Param for [u8] {
    fn value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl Param for Vec<u8> {
    fn value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl<const N: usize> Param for [u8; N] {
    fn value(&self) -> Value<'_> {
        Value::Blob(self)
    }
}

impl<T: Param + ?Sized> Param for &T {
    fn value(&self) -> Value<'_> {
        (**self).value()
    }
}

impl<T: Param> Param for Option<T> {
    fn value(&self) -> Value<'_> {
        match self {
            Some(v) => v.value(),
            None => Value::Null,
        }
    }
}

impl Param for Value<'_> {
    fn value(&self) -> Value<'_> {
        *self
    }
}

/// The parameters of one statement: `args![a, b, c]`.
macro_rules! args {
    () => { &[] as &[&dyn $crate::store::sql::Param] };
    ($($x:expr),+ $(,)?) => { &[$(&$x as &dyn $crate::store::sql::Param),+] as &[&dyn $crate::store::sql::Param] };
}
pub(in crate::store) use args;

/// A column value the store reads back: what either engine's cell converts to.
pub(in crate::store) trait Cell: Sized {
    /// `None` when the cell cannot be read as this type (the message names what it held).
    fn from_value(v: Value<'_>) -> Result<Self, String>;
}

fn mismatch(want: &str, v: Value<'_>) -> String {
    let held = match v {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    };
    format!("expected {want}, found {held}")
}

impl Cell for i64 {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        match v {
            Value::Int(i) => Ok(i),
            other => Err(mismatch("an integer", other)),
        }
    }
}

impl Cell for u32 {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        let i = i64::from_value(v)?;
        u32::try_from(i).map_err(|_| format!("{i} is out of range"))
    }
}

impl Cell for bool {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl Cell for f64 {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        match v {
            Value::Real(r) => Ok(r),
            // Exact for every integer a stored real can hold.
            #[allow(clippy::cast_precision_loss)]
            Value::Int(i) => Ok(i as f64),
            other => Err(mismatch("a real", other)),
        }
    }
}

impl Cell for String {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        match v {
            Value::Text(t) => Ok(t.to_owned()),
            other => Err(mismatch("text", other)),
        }
    }
}

impl Cell for Vec<u8> {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.to_vec()),
            other => Err(mismatch("a blob", other)),
        }
    }
}

impl<T: Cell> Cell for Option<T> {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// An owned cell, for values read from PostgreSQL and for copying whole tables.
#[derive(Debug, Clone, PartialEq)]
pub enum Owned {
    /// SQL NULL.
    Null,
    /// An integer (any width; a boolean reads as 0 or 1).
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl Owned {
    pub(in crate::store) fn borrow(&self) -> Value<'_> {
        match self {
            Self::Null => Value::Null,
            Self::Int(i) => Value::Int(*i),
            Self::Real(r) => Value::Real(*r),
            Self::Text(t) => Value::Text(t),
            Self::Blob(b) => Value::Blob(b),
        }
    }
}

impl Param for Owned {
    fn value(&self) -> Value<'_> {
        self.borrow()
    }
}

impl Cell for Owned {
    fn from_value(v: Value<'_>) -> Result<Self, String> {
        Ok(match v {
            Value::Null => Self::Null,
            Value::Int(i) => Self::Int(i),
            Value::Real(r) => Self::Real(r),
            Value::Text(t) => Self::Text(t.to_owned()),
            Value::Blob(b) => Self::Blob(b.to_vec()),
        })
    }
}

/// One row of a result, on either engine.
pub(in crate::store) enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `i` (from 0) as `T`; a cell of another type is [`StoreError::Corrupt`].
    pub(in crate::store) fn get<T: Cell>(&self, i: usize) -> Result<T, StoreError> {
        let converted = match self {
            Self::Sqlite(row) => {
                let cell = row.get_ref(i).or_store()?;
                T::from_value(match cell {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(i) => Value::Int(i),
                    rusqlite::types::ValueRef::Real(r) => Value::Real(r),
                    rusqlite::types::ValueRef::Text(t) => Value::Text(
                        std::str::from_utf8(t)
                            .map_err(|_| StoreError::Corrupt(format!("column {i}: not UTF-8")))?,
                    ),
                    rusqlite::types::ValueRef::Blob(b) => Value::Blob(b),
                })
            }
            Self::Postgres(row) => {
                let cell: PgCell = row.try_get(i).map_err(StoreError::from_postgres)?;
                T::from_value(cell.0.borrow())
            }
        };
        converted.map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))
    }
}

impl Conn<'_> {
    /// The engine behind this connection.
    pub fn dialect(&self) -> Dialect {
        match self.inner {
            Inner::Sqlite(_) => Dialect::Sqlite,
            Inner::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs one statement; returns how many rows it changed.
    pub(in crate::store) fn execute(
        &self,
        sql: &str,
        args: &[&dyn Param],
    ) -> Result<usize, StoreError> {
        match self.inner {
            Inner::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql).or_store()?;
                stmt.execute(rusqlite::params_from_iter(
                    args.iter().map(|a| SqliteParam(a.value())),
                ))
                .or_store()
            }
            Inner::Postgres(cell) => {
                let mut pg = cell.borrow_mut();
                let stmt = pg.statement(sql)?;
                let params = pg_params(args);
                let changed = pg
                    .client
                    .execute(&stmt, &pg_refs(&params))
                    .map_err(StoreError::from_postgres)?;
                Ok(usize::try_from(changed).unwrap_or(usize::MAX))
            }
        }
    }

    /// The first row of a query mapped by `f`, or `None` when it returns no row.
    pub(in crate::store) fn query_opt<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut f = Some(f);
        let mut first = None;
        self.visit_rows(sql, args, true, &mut |row| {
            if let Some(f) = f.take() {
                first = Some(f(row)?);
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// The one row a query must return, mapped by `f`; no row is [`StoreError::Corrupt`].
    pub(in crate::store) fn query_one<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        f: impl FnOnce(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.query_opt(sql, args, f)?
            .ok_or_else(|| StoreError::Corrupt("a query that returns one row returned none".into()))
    }

    /// Every row of a query, each mapped by `f`.
    pub(in crate::store) fn query_all<T>(
        &self,
        sql: &str,
        args: &[&dyn Param],
        mut f: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut rows = Vec::new();
        self.visit_rows(sql, args, false, &mut |row| {
            rows.push(f(row)?);
            Ok(())
        })?;
        Ok(rows)
    }

    /// Runs a query and hands each row (only the first when `first_only`) to `visit`.
    fn visit_rows(
        &self,
        sql: &str,
        args: &[&dyn Param],
        first_only: bool,
        visit: &mut dyn FnMut(&Row<'_>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match self.inner {
            Inner::Sqlite(conn) => {
                let mut stmt = conn.prepare_cached(sql).or_store()?;
                let mut rows = stmt
                    .query(rusqlite::params_from_iter(
                        args.iter().map(|a| SqliteParam(a.value())),
                    ))
                    .or_store()?;
                while let Some(row) = rows.next().or_store()? {
                    visit(&Row::Sqlite(row))?;
                    if first_only {
                        break;
                    }
                }
                Ok(())
            }
            Inner::Postgres(cell) => {
                let mut pg = cell.borrow_mut();
                let stmt = pg.statement(sql)?;
                let params = pg_params(args);
                let rows = pg
                    .client
                    .query(&stmt, &pg_refs(&params))
                    .map_err(StoreError::from_postgres)?;
                drop(pg);
                let take = if first_only { 1 } else { rows.len() };
                rows.iter()
                    .take(take)
                    .try_for_each(|row| visit(&Row::Postgres(row)))
            }
        }
    }

    /// Runs several statements without parameters (schema steps), uncached.
    pub(in crate::store) fn batch(&self, sql: &str) -> Result<(), StoreError> {
        match self.inner {
            Inner::Sqlite(conn) => conn.execute_batch(sql).or_store(),
            Inner::Postgres(cell) => cell
                .borrow_mut()
                .client
                .batch_execute(sql)
                .map_err(StoreError::from_postgres),
        }
    }

    /// Inserts one row into a table whose key is an `id` the database assigns, and
    /// returns that id (`last_insert_rowid` on SQLite, `RETURNING id` on PostgreSQL).
    /// `insert` is the `INSERT` statement without a `RETURNING` clause.
    pub(in crate::store) fn insert_returning_id(
        &self,
        insert: &'static str,
        args: &[&dyn Param],
    ) -> Result<i64, StoreError> {
        match self.inner {
            Inner::Sqlite(conn) => {
                self.execute(insert, args)?;
                Ok(conn.last_insert_rowid())
            }
            Inner::Postgres(cell) => {
                let mut pg = cell.borrow_mut();
                let stmt = pg.statement_with(insert, " RETURNING id")?;
                let params = pg_params(args);
                let row = pg
                    .client
                    .query_one(&stmt, &pg_refs(&params))
                    .map_err(StoreError::from_postgres)?;
                row.try_get::<_, i64>(0).map_err(StoreError::from_postgres)
            }
        }
    }

    /// The SQLite connection, for the parts of the store that only exist on SQLite
    /// (the file's PRAGMAs, `VACUUM INTO`, the shape check).
    pub(in crate::store) fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self.inner {
            Inner::Sqlite(conn) => Some(conn),
            Inner::Postgres(_) => None,
        }
    }
}

/// A [`Value`] as rusqlite binds it (borrowed, no copy).
struct SqliteParam<'a>(Value<'a>);

impl rusqlite::ToSql for SqliteParam<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self.0 {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(i),
            Value::Real(r) => ValueRef::Real(r),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// A [`Value`] as PostgreSQL binds it: encoded as whatever type the server inferred for
/// the parameter (an integer into `int4`, `int8` or `boolean`; text into any text type).
#[derive(Debug)]
struct PgParam<'a>(Value<'a>);

fn pg_params<'a>(args: &'a [&'a dyn Param]) -> Vec<PgParam<'a>> {
    args.iter().map(|a| PgParam(a.value())).collect()
}

fn pg_refs<'p>(params: &'p [PgParam<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

type BoxError = Box<dyn StdError + Sync + Send>;

impl ToSql for PgParam<'_> {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        let wrong = |what: &str| -> BoxError {
            format!("cannot bind {what} to a parameter of type {ty}").into()
        };
        match self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)
                    .map_err(|_| wrong("a 64-bit integer"))?
                    .to_sql(ty, out),
                Type::INT2 => i16::try_from(i)
                    .map_err(|_| wrong("a 64-bit integer"))?
                    .to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                #[allow(clippy::cast_precision_loss)]
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    i.to_string().as_str().to_sql(&Type::TEXT, out)
                }
                _ => Err(wrong("an integer")),
            },
            Value::Real(r) => match *ty {
                Type::FLOAT8 => r.to_sql(ty, out),
                #[allow(clippy::cast_possible_truncation)]
                Type::FLOAT4 => (r as f32).to_sql(ty, out),
                _ => Err(wrong("a real")),
            },
            Value::Text(t) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    t.to_sql(&Type::TEXT, out)
                }
                _ => Err(wrong("text")),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(wrong("bytes")),
            },
        }
    }

    fn accepts(ty: &Type) -> bool {
        !matches!(ty.kind(), Kind::Array(_) | Kind::Composite(_))
    }

    to_sql_checked!();
}

/// A PostgreSQL cell of any of the types the schema uses, as an [`Owned`] value.
struct PgCell(Owned);

impl<'a> FromSql<'a> for PgCell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(PgCell(match *ty {
            Type::INT8 => Owned::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Owned::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT2 => Owned::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::BOOL => Owned::Int(i64::from(bool::from_sql(ty, raw)?)),
            Type::FLOAT8 => Owned::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Owned::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::BYTEA => Owned::Blob(<Vec<u8>>::from_sql(ty, raw)?),
            _ => Owned::Text(String::from_sql(ty, raw)?),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(PgCell(Owned::Null))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT8
                | Type::INT4
                | Type::INT2
                | Type::BOOL
                | Type::FLOAT8
                | Type::FLOAT4
                | Type::BYTEA
                | Type::TEXT
                | Type::VARCHAR
                | Type::BPCHAR
                | Type::NAME
        )
    }
}

/// SQLite-flavoured statement text as PostgreSQL reads it: `?N` becomes `$N` outside
/// string literals and quoted names.
pub(in crate::store) fn to_postgres(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    out.push(c);
                }
                '?' => out.push('$'),
                _ => out.push(c),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_become_dollars_outside_literals() {
        assert_eq!(
            to_postgres("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND \"d?\" = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND \"d?\" = $12"
        );
    }

    #[test]
    fn cells_convert_leniently_between_engines_types() {
        assert_eq!(bool::from_value(Value::Int(1)), Ok(true));
        assert_eq!(f64::from_value(Value::Int(2)), Ok(2.0));
        assert_eq!(<Option<i64>>::from_value(Value::Null), Ok(None));
        assert!(i64::from_value(Value::Text("1")).is_err());
        assert!(String::from_value(Value::Null).is_err());
    }
}
