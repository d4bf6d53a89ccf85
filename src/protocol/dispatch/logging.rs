//! `logging/setLevel`: the least severe level of the log messages a session's tools send
//! it (served only when some tool sends log messages).

use serde_json::{Value, json};

use crate::catalog::McpError;
use crate::protocol::jsonrpc::Request;
use crate::protocol::revisions::Session;
use crate::tools::LogLevel;

/// Sets the session's log level from the `level` parameter.
pub(super) fn set_log_level(req: &Request, session: &Session) -> Result<Value, McpError> {
    let level = req
        .params
        .get("level")
        .and_then(Value::as_str)
        .and_then(LogLevel::parse)
        .ok_or_else(|| McpError::invalid_params("level"))?;
    session.set_log_level(level);
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::dispatch::testing::request;

    #[test]
    fn a_known_level_is_kept_for_the_session() {
        let session = Session::new();
        assert_eq!(session.log_level(), None);
        let set = request("logging/setLevel", json!({ "level": "warning" }));
        assert_eq!(set_log_level(&set, &session).expect("set"), json!({}));
        assert_eq!(session.log_level(), LogLevel::parse("warning"));
    }

    #[test]
    fn an_unknown_or_missing_level_names_the_parameter_and_keeps_the_old_one() {
        let session = Session::new();
        let set = request("logging/setLevel", json!({ "level": "error" }));
        set_log_level(&set, &session).expect("set");
        for params in [json!({ "level": "loud" }), json!({}), json!({ "level": 3 })] {
            let err = set_log_level(&request("logging/setLevel", params.clone()), &session)
                .expect_err("refused");
            assert_eq!(err.fields()["param"], json!("level"), "{params}");
        }
        assert_eq!(session.log_level(), LogLevel::parse("error"));
    }
}
