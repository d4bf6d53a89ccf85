//! The guard chain for a request other than `tools/call` that reads business data
//! ([`DataRead`]): a prompt or completion that declares the data it reads, and an upstream
//! MCP server's resources and prompts. It passes authentication, the `read` charge first,
//! then scope and plan, as a call of the read tool serving that data would, and leaves an
//! audit row.

use std::time::Instant;

use serde_json::Value;

use super::auth::{CallAuth, Principal};
use super::outcome::Verdict;
use super::{Caller, Guards, ToCharge, metrics};
use crate::catalog::McpError;
use crate::guards::ratelimit::Budget;
use crate::tools::{DataAccess, Registry, ToolSpec};

/// A request other than `tools/call` that reads business data, as the guards see it.
pub struct DataRead<'a> {
    /// What its audit row names: the method, a space, and what it reads through
    /// (`prompts/get chase_overdue_invoices`,
    /// `completion/complete issue_invoice_for_client.client`).
    pub audit_name: &'a str,
    /// What it reads through: whose guards it passes.
    pub through: ReadThrough<'a>,
    /// The request id, for the audit log.
    pub request_id: &'a Value,
}

/// Whose guards a [`DataRead`] passes.
#[derive(Debug, Clone, Copy)]
pub enum ReadThrough<'a> {
    /// A built-in prompt's declaration: the registered read tool serving the same data.
    Declared(DataAccess),
    /// A backend's resources or prompts, as the subject they are guarded as
    /// ([`crate::tools::backends::Offered::subject`]).
    Subject(&'a ToolSpec),
}

/// Produces the result of an admitted [`DataRead`], as the principal admitted.
pub type RunRead<'r> = dyn Fn(&Principal) -> Result<Value, McpError> + 'r;

impl Guards {
    /// Runs a request that reads business data through authentication, the `read`
    /// charge, and scope and plan, as a call of the read tool serving that data would;
    /// then `run`; and audits it under its [`DataRead::audit_name`]. Gives the result with
    /// the budget left, for the dispatcher to send.
    pub fn read_data(
        &self,
        registry: &Registry,
        read: &DataRead<'_>,
        caller: &Caller<'_>,
        run: &RunRead<'_>,
    ) -> Result<(Value, Budget), McpError> {
        let started = Instant::now();
        let mut principal = [None];
        let outcome = self.guard_read(registry, read, caller, &mut principal, run);
        let verdict = Verdict::of_read(&outcome);
        metrics::global().observe_data_read(read.audit_name, verdict, started.elapsed());
        let principal = principal[0].take();
        self.audit(
            (read.request_id, None),
            (read.audit_name, None),
            caller,
            started,
            principal.as_ref(),
            verdict,
        );
        outcome
    }

    /// The steps of [`Guards::read_data`] before its audit row; sets the principal as soon
    /// as it is known.
    fn guard_read(
        &self,
        registry: &Registry,
        read: &DataRead<'_>,
        caller: &Caller<'_>,
        principal: &mut [Option<Principal>; 1],
        run: &RunRead<'_>,
    ) -> Result<(Value, Budget), McpError> {
        let auth = self.identify(caller)?;
        if let CallAuth::Verified(verified) = &auth {
            principal[0] = Some(verified.clone());
        }
        let spec = match read.through {
            // The registry only accepts a declaration that names a registered read tool.
            ReadThrough::Declared(access) => registry
                .reader(&access)
                .ok_or_else(McpError::internal)?
                .spec(),
            ReadThrough::Subject(spec) => spec,
        };
        let (budget, facts) = if self.chain.charges() {
            let to_charge = ToCharge {
                index: 0,
                auth,
                category: spec.category,
            };
            let charged = self
                .charge_many(std::slice::from_ref(&to_charge), caller, principal)
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(McpError::internal()));
            charged?
        } else {
            principal[0] = Some(self.confirm(&auth, caller)?);
            (Budget::default(), self.auth.read_access_facts()?)
        };
        let admitted = principal[0].as_ref().ok_or_else(McpError::internal)?;
        self.auth.check_access_with(admitted, spec, &facts)?;
        Ok((run(admitted)?, budget))
    }
}
