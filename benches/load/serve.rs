//! The servers the benchmark runs itself, each in a child process of its own so that its
//! CPU time is its own and it is pinned like the servers under test: the bench binary
//! re-executed (`std::env::current_exe()`) with a hidden first argument and the address to
//! listen on.
//!
//! - `--serve-upstream ADDR`: an upstream MCP server on the official Rust SDK (rmcp 3.11),
//!   stateless Streamable HTTP with JSON responses (`legacy_session_mode = false`,
//!   `json_response = true`: no session, no SSE stream, one JSON body per POST), serving one
//!   read-only tool, `echo` (argument `text`, returned as text content).
//! - `--serve-rest ADDR`: a REST backend with one JSON endpoint, `GET /items/{id}`, described
//!   by [`rest_document`].
//!
//! Both are hyper's HTTP/1 server on a multi-threaded tokio runtime (one worker per CPU the
//! process may use: one when pinned), with `TCP_NODELAY` on every accepted socket. A child
//! ends when its standard input closes (the bench holds the other end, so a bench that dies
//! leaves no server behind) or on SIGTERM from [`Running`]'s drop.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::*;

/// The hidden first argument that makes the bench the rmcp upstream.
const SERVE_UPSTREAM: &str = "--serve-upstream";
/// The hidden first argument that makes the bench the REST backend.
const SERVE_REST: &str = "--serve-rest";

/// The upstream's one tool.
pub(super) const ECHO: &str = "echo";
/// The REST backend's one operation (`GET /items/{id}`).
pub(super) const GET_ITEM: &str = "getItem";

/// Which of the bench's own servers to run.
#[derive(Clone, Copy)]
pub(super) enum Own {
    /// The rmcp upstream (`--serve-upstream`).
    Upstream,
    /// The REST backend (`--serve-rest`).
    Rest,
}

impl Own {
    fn flag(self) -> &'static str {
        match self {
            Own::Upstream => SERVE_UPSTREAM,
            Own::Rest => SERVE_REST,
        }
    }
}

/// When the bench was started as one of its own servers: serves until its standard input
/// closes, then exits the process. Otherwise returns at once.
pub(super) fn serve_if_asked() {
    let mut args = std::env::args().skip(1);
    let own = match args.next().as_deref() {
        Some(SERVE_UPSTREAM) => Own::Upstream,
        Some(SERVE_REST) => Own::Rest,
        _ => return,
    };
    let addr: SocketAddr = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("an address to listen on after the server's flag");
    // The bench holds our standard input: its end (the bench stopped or died) ends us.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        match own {
            Own::Upstream => serve_upstream(listener).await,
            Own::Rest => serve_rest(listener).await,
        }
    });
    if let Err(e) = served {
        eprintln!("{}: {e}", own.flag());
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Starts one of the bench's own servers on a free loopback port (pinned to CPU 0 unless
/// `--no-pin`) and waits until it accepts connections.
pub(super) fn start(own: Own, s: &Settings) -> HttpServer {
    let exe = std::env::current_exe().expect("the bench's own path");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = if s.pin {
        let mut cmd = Command::new("/usr/bin/taskset");
        cmd.args(["-c", "0"]).arg(exe);
        cmd
    } else {
        Command::new(exe)
    };
    cmd.args([own.flag(), &addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let server = HttpServer {
        process: Running(cmd.spawn().expect("spawn the bench's own server")),
        addr,
    };
    wait_listening(server, own.flag())
}

/// Waits (at most 10 s) until `server` accepts connections; panics naming `what` if not.
fn wait_listening(mut server: HttpServer, what: &str) -> HttpServer {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(server.addr).is_err() {
        if let Some(status) = server.exited() {
            panic!(
                "{what} exited before listening on {}: {status}",
                server.addr
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {} within 10 s",
            server.addr
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

// ---------------------------------------------------------------------------------------
// The rmcp upstream

/// The upstream's handler: one tool, `echo`.
#[derive(Clone)]
struct Echo;

fn echo_tool() -> Tool {
    let schema: JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to return."}},
        "required": ["text"],
    }))
    .expect("a JSON object");
    Tool::new(ECHO, "Returns its text.", Arc::new(schema))
        .with_annotations(ToolAnnotations::new().read_only(true))
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![echo_tool()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == ECHO).then(echo_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != ECHO {
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}", request.name),
                None,
            ));
        }
        let text = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("text"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("`text` (a string) is required", None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

async fn serve_upstream(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service: StreamableHttpService<Echo, NeverSessionManager> =
        StreamableHttpService::new(|| Ok(Echo), Arc::default(), config);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

// ---------------------------------------------------------------------------------------
// The REST backend

/// The OpenAPI 3.1 document of the REST backend listening on `addr`.
pub(super) fn rest_document(addr: SocketAddr) -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Bench shop", "version": "1"},
        "servers": [{"url": format!("http://{addr}")}],
        "paths": {
            "/items/{id}": {
                "get": {
                    "operationId": GET_ITEM,
                    "summary": "One item of the catalogue.",
                    "parameters": [{"name": "id", "in": "path", "required": true,
                                    "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "The item.", "content": {"application/json": {
                            "schema": {"type": "object", "properties": {
                                "id": {"type": "string"},
                                "name": {"type": "string"},
                                "price_cents": {"type": "integer"},
                                "in_stock": {"type": "boolean"}}}}}},
                        "404": {"description": "No such path."}
                    }
                }
            }
        }
    })
}

/// `GET /items/{id}`: the item as JSON; anything else 404.
fn rest_answer(request: &hyper::Request<Incoming>) -> hyper::Response<String> {
    let item = request
        .uri()
        .path()
        .strip_prefix("/items/")
        .filter(|id| request.method() == hyper::Method::GET && !id.is_empty());
    let (status, body) = match item {
        Some(id) => (
            200,
            json!({"id": id, "name": "Widget", "price_cents": 1250, "in_stock": true}).to_string(),
        ),
        None => (404, json!({"error": "no such path"}).to_string()),
    };
    hyper::Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(body)
        .expect("a valid response")
}

async fn serve_rest(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let service =
                service_fn(|request| async move { Ok::<_, Infallible>(rest_answer(&request)) });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
