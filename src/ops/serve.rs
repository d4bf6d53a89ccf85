//! The commands that serve: `stdio`, `serve` (Streamable HTTP) and `quickstart` (a demo
//! installation when there is none, then `serve`, with a text saying how to connect once
//! the listener answers).

use std::process::ExitCode;
use std::sync::Arc;

use super::assemble::open_server;
use super::exit::{fail, refuse};
use super::init::{InitArgs, create_installation};
use crate::config::Config;

/// `tollgate stdio`: MCP on stdin and stdout, with the credential of the environment.
pub(super) fn stdio(config: &Config) -> ExitCode {
    let server = match open_server(config) {
        Ok(server) => server,
        Err(code) => return code,
    };
    let token = match crate::transport::stdio::token_from_env() {
        Ok(token) => token,
        Err(e) => return fail(&e),
    };
    tracing::info!(database = %config.database, "serving MCP on stdio");
    let served =
        crate::transport::stdio::serve(Arc::clone(&server), token, config.stdio.max_line_bytes);
    server.backends().stop();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("stdin: {e}")),
    }
}

/// `tollgate quickstart`.
pub(super) fn quickstart(config: &Config) -> ExitCode {
    // A busy address is found before anything is created, so trying again with another
    // `--listen` starts from the same clean state.
    if let Err(e) = std::net::TcpListener::bind(config.http.listen) {
        return refuse(&super::quickstart::busy_address(config.http.listen, &e));
    }
    let created = config.database.file().is_some_and(|path| !path.exists());
    let admin_key = if created {
        let args = InitArgs {
            company: "Demo Company SL".to_owned(),
            tax_id: None,
            plan: "pro".to_owned(),
            locale: "en".to_owned(),
            json: false,
            demo: true,
        };
        match create_installation(config, &args) {
            Ok(key) => key,
            Err(code) => return code,
        }
    } else {
        println!("Using the existing database {}.", config.database);
        None
    };
    serve_then(config, |addr| {
        print!(
            "{}",
            super::quickstart::ready_text(config, addr, admin_key.as_deref())
        );
    })
}

/// `tollgate serve`: MCP over Streamable HTTP until SIGTERM or SIGINT.
pub(super) fn serve(config: &Config) -> ExitCode {
    serve_then(config, |_| {})
}

/// `serve`, calling `ready` once the listener accepts connections.
fn serve_then(config: &Config, ready: impl FnOnce(std::net::SocketAddr)) -> ExitCode {
    let server = match open_server(config) {
        Ok(server) => server,
        Err(code) => return code,
    };
    let served = crate::transport::http::serve_then(Arc::clone(&server), config, ready);
    // Idle keep-alive connections may still hold the server (and its audit writer).
    crate::guards::audit::flush_all();
    server.backends().stop();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&format!("cannot serve HTTP: {e}")),
    }
}
