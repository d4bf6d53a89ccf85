//! The HTTP client a direct call posts with.
//!
//! reqwest's client carries the session (rmcp's transport) and every request to an `https`
//! upstream: its TLS configuration is the one all the gate's outbound connections share.
//! To a plain `http` upstream a direct call posts through hyper-util's pooled client, the
//! one reqwest is built on, without reqwest's own layers around every request (the URL
//! parsed and the redirect policy consulted twice, the headers merged). Measured alone
//! (one keep-alive connection, a single-threaded runtime), a POST and its JSON answer cost
//! 18.5 to 19.4 µs of CPU through reqwest and 13.0 to 13.3 µs through hyper-util's client;
//! in the gate, about a twentieth of a forwarded call. Both clients keep their connections
//! alive for 90 s, set `TCP_NODELAY`, speak HTTP/1.1 only, follow no redirect and use no
//! proxy from the environment.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderMap};

use crate::tools::backends::{BodyFailure, read_capped};

/// hyper-util's client over plain TCP.
type PlainClient = Client<HttpConnector, Full<Bytes>>;

/// Where a direct call posts: the upstream's URL, parsed once for either client.
#[derive(Clone)]
pub(super) struct Endpoint {
    url: reqwest::Url,
    /// `url`, as hyper takes it.
    uri: hyper::Uri,
}

impl Endpoint {
    /// `url` parsed, or what is wrong with it.
    pub(super) fn parse(url: &str) -> Result<Endpoint, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url} is not a URL: {e}"))?;
        let uri = parsed
            .as_str()
            .parse()
            .map_err(|e| format!("{url} is not a URI: {e}"))?;
        Ok(Endpoint { url: parsed, uri })
    }
}

/// Posts a direct call's requests to one upstream.
#[derive(Clone)]
pub(super) enum Poster {
    /// reqwest's client: an `https` upstream.
    Tls(reqwest::Client),
    /// hyper-util's client: a plain `http` upstream.
    Plain(PlainClient),
}

impl Poster {
    /// The poster for `endpoint`: hyper-util's client (connecting within `connect_timeout`)
    /// for `http`, else the reqwest client `tls` makes (only that can fail).
    pub(super) fn for_endpoint<E>(
        endpoint: &Endpoint,
        connect_timeout: Duration,
        tls: impl FnOnce() -> Result<reqwest::Client, E>,
    ) -> Result<Poster, E> {
        if endpoint.url.scheme() != "http" {
            return tls().map(Poster::Tls);
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Poster::Plain(client))
    }

    /// POSTs `body` to `endpoint` with `headers`; `Err` when no answer
    /// came (the connection could not be made, or failed before the answer's head).
    pub(super) async fn post(
        &self,
        endpoint: &Endpoint,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Reply, ()> {
        match self {
            Poster::Tls(client) => {
                let response = client
                    .post(endpoint.url.clone())
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(|_| ())?;
                Ok(Reply {
                    status: response.status(),
                    media: media_of(response.headers()),
                    body: ReplyBody::Tls(response),
                })
            }
            Poster::Plain(client) => {
                let mut request = hyper::Request::new(Full::new(body));
                *request.method_mut() = hyper::Method::POST;
                *request.uri_mut() = endpoint.uri.clone();
                *request.headers_mut() = headers;
                let response = client.request(request).await.map_err(|_| ())?;
                let (head, body) = response.into_parts();
                Ok(Reply {
                    status: head.status,
                    media: media_of(&head.headers),
                    body: ReplyBody::Plain {
                        body,
                        length: head
                            .headers
                            .get(CONTENT_LENGTH)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok()),
                    },
                })
            }
        }
    }
}

/// The media type of an answer, lowercased, without leading spaces (empty without one).
fn media_of(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start().to_ascii_lowercase())
        .unwrap_or_default()
}

/// An upstream's answer: its head read, its body not yet.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    /// The media type ([`media_of`]).
    pub(super) media: String,
    body: ReplyBody,
}

enum ReplyBody {
    Tls(reqwest::Response),
    Plain {
        body: hyper::body::Incoming,
        /// The announced `Content-Length`.
        length: Option<u64>,
    },
}

impl Reply {
    /// The whole body, refused past `max` bytes (at once when its announced length is).
    pub(super) async fn read_capped(self, max: u64) -> Result<Vec<u8>, BodyFailure> {
        match self.body {
            ReplyBody::Tls(mut response) => read_capped(&mut response, max).await,
            ReplyBody::Plain { body, length } => {
                if length.is_some_and(|n| n > max) {
                    return Err(BodyFailure::TooLarge);
                }
                let limit = usize::try_from(max).unwrap_or(usize::MAX);
                match Limited::new(body, limit).collect().await {
                    Ok(collected) => Ok(collected.to_bytes().into()),
                    Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                        Err(BodyFailure::TooLarge)
                    }
                    Err(_) => Err(BodyFailure::Lost),
                }
            }
        }
    }

    /// The body as it arrives, chunk by chunk.
    pub(super) fn into_chunks(self) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
        match self.body {
            ReplyBody::Tls(response) => response
                .bytes_stream()
                .map(|chunk| chunk.map_err(std::io::Error::other))
                .boxed(),
            ReplyBody::Plain { body, .. } => body
                .into_data_stream()
                .map(|chunk| chunk.map_err(std::io::Error::other))
                .boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::backends::lane::Lanes;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    /// A server that answers each request on one connection with `answer(n)`, the `n`th
    /// (a full HTTP response), and hands the test each request's body.
    fn server(
        answers: Vec<String>,
    ) -> (
        String,
        std::sync::mpsc::Receiver<String>,
        std::thread::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let (seen, bodies) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let mut writer = stream;
            for answer in answers {
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    assert!(reader.read_line(&mut line).expect("a head line") > 0);
                    if line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(value) = lower.strip_prefix("content-length:") {
                        length = value.trim().parse().expect("a length");
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("the body");
                seen.send(String::from_utf8(body).expect("UTF-8"))
                    .expect("tell the test");
                writer.write_all(answer.as_bytes()).expect("answer");
                writer.flush().expect("flush");
            }
        });
        (url, bodies, handle)
    }

    fn json_answer(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: Application/JSON\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn posters(url: &Endpoint) -> [Poster; 2] {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let plain = Poster::for_endpoint(url, Duration::from_secs(5), unreachable_client)
            .expect("a plain poster");
        assert!(matches!(plain, Poster::Plain(_)));
        let tls = Poster::Tls(
            reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
        );
        [plain, tls]
    }

    /// The `http` URL never asks for a reqwest client.
    fn unreachable_client() -> Result<reqwest::Client, reqwest::Error> {
        panic!("an http URL is posted to with hyper-util's client")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    /// Posts `body` to `url` on `rt`, which must also read the answer's body: a connection
    /// belongs to the runtime it was opened on.
    fn post(
        rt: &tokio::runtime::Runtime,
        poster: &Poster,
        url: &Endpoint,
        body: &'static str,
    ) -> Result<Reply, ()> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/json".parse().expect("a value"));
        rt.block_on(poster.post(url, headers, Bytes::from_static(body.as_bytes())))
    }

    #[test]
    fn an_https_url_gets_the_reqwest_client() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = Endpoint::parse("https://upstream.example/mcp").expect("a URL");
        let poster = Poster::for_endpoint(&url, Duration::from_secs(5), || {
            reqwest::Client::builder().no_proxy().build()
        })
        .expect("a poster");
        assert!(matches!(poster, Poster::Tls(_)));
    }

    #[test]
    fn both_clients_post_the_body_and_read_the_answer_on_one_connection() {
        let answer = r#"{"jsonrpc":"2.0","id":"tg-1","result":{}}"#;
        for poster_index in 0..2 {
            let (url, bodies, server) = server(vec![json_answer(answer), json_answer(answer)]);
            let url = Endpoint::parse(&url).expect("a URL");
            let poster = posters(&url)[poster_index].clone();
            let rt = runtime();
            for n in 0..2 {
                let reply = rt
                    .block_on(poster.post(&url, HeaderMap::new(), Bytes::from(format!("{n}"))))
                    .expect("an answer");
                assert_eq!(reply.status, StatusCode::OK);
                assert_eq!(reply.media, "application/json");
                let body = rt.block_on(reply.read_capped(1024)).expect("the body");
                assert_eq!(body, answer.as_bytes());
                assert_eq!(bodies.recv().expect("a request"), n.to_string());
            }
            // The server accepted one connection only.
            server.join().expect("the server ends");
        }
    }

    #[test]
    fn a_body_past_the_cap_is_too_large_whether_announced_or_not() {
        let big = "x".repeat(100);
        let chunked = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
            big.len()
        );
        for poster_index in 0..2 {
            for answer in [json_answer(&big), chunked.clone()] {
                let (url, _bodies, server) = server(vec![answer]);
                let url = Endpoint::parse(&url).expect("a URL");
                let poster = posters(&url)[poster_index].clone();
                let rt = runtime();
                let reply = post(&rt, &poster, &url, "{}").expect("an answer");
                let read = rt.block_on(reply.read_capped(99));
                assert_eq!(read, Err(BodyFailure::TooLarge));
                server.join().expect("the server ends");
            }
        }
    }

    #[test]
    fn a_body_cut_short_is_lost_and_a_refused_connection_is_no_answer() {
        for poster_index in 0..2 {
            let cut = "HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nonly this".to_owned();
            let (url, _bodies, server) = server(vec![cut]);
            let url = Endpoint::parse(&url).expect("a URL");
            let poster = posters(&url)[poster_index].clone();
            let rt = runtime();
            let reply = post(&rt, &poster, &url, "{}").expect("an answer's head");
            server
                .join()
                .expect("the server ends (closing the connection)");
            let read = rt.block_on(reply.read_capped(1024));
            assert_eq!(read, Err(BodyFailure::Lost));
        }
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
            format!("http://{}/mcp", listener.local_addr().expect("address"))
        };
        let url = Endpoint::parse(&closed).expect("a URL");
        for poster in posters(&url) {
            assert!(post(&runtime(), &poster, &url, "{}").is_err());
        }
    }

    #[test]
    fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
        // Each connection answers one request, keeping it alive as far as the client
        // knows, and closes once the post that used it has returned: on a lane, whose
        // runtime is not driven between posts (an upstream's keep-alive timeout).
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let url = Endpoint::parse(&url).expect("a URL");
        let (close, close_now) = std::sync::mpsc::channel::<()>();
        let (closed, closings) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            for round in 0..4 {
                let (stream, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
                let mut line = String::new();
                while line != "\r\n" {
                    line.clear();
                    assert!(reader.read_line(&mut line).expect("a head line") > 0);
                }
                let mut body = [0u8; 2];
                reader.read_exact(&mut body).expect("the body");
                let mut writer = stream;
                writer
                    .write_all(json_answer(&format!("{round}")).as_bytes())
                    .expect("answer");
                close_now.recv().expect("the test says when");
                writer.shutdown(std::net::Shutdown::Both).expect("close");
                drop(writer);
                closed.send(()).expect("tell the test");
            }
        });
        for poster in posters(&url) {
            let lanes = Lanes::new(move || Ok::<_, std::convert::Infallible>(poster.clone()));
            let mut answers = Vec::new();
            for _ in 0..2 {
                let body = lanes
                    .run(|poster| {
                        let url = url.clone();
                        async move {
                            let reply = poster
                                .post(&url, HeaderMap::new(), Bytes::from_static(b"{}"))
                                .await
                                .expect("an answer");
                            reply.read_capped(1024).await.expect("the body")
                        }
                    })
                    .ok()
                    .expect("the test's thread runs a lane");
                answers.push(String::from_utf8(body).expect("UTF-8"));
                // Closed on loopback: its end has reached the client when `closings` hears.
                close.send(()).expect("the server waits");
                closings.recv().expect("the server closed it");
                crate::tools::backends::lane::as_if_idle();
            }
            // Two answers from two connections: the closed one was not posted on again.
            assert_ne!(answers[0], answers[1]);
        }
        server.join().expect("the server ends");
    }

    #[test]
    fn an_event_stream_arrives_chunk_by_chunk() {
        let events = "data: one\n\ndata: two\n\n";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
            events.len()
        );
        for poster_index in 0..2 {
            let (url, _bodies, server) = server(vec![answer.clone()]);
            let url = Endpoint::parse(&url).expect("a URL");
            let poster = posters(&url)[poster_index].clone();
            let rt = runtime();
            let reply = rt
                .block_on(poster.post(&url, HeaderMap::new(), Bytes::from_static(b"{}")))
                .expect("an answer");
            assert_eq!(reply.media, "text/event-stream");
            let read: Vec<u8> = rt.block_on(async {
                let mut chunks = reply.into_chunks();
                let mut all = Vec::new();
                while let Some(chunk) = chunks.next().await {
                    all.extend_from_slice(&chunk.expect("a chunk"));
                }
                all
            });
            assert_eq!(read, events.as_bytes());
            server.join().expect("the server ends");
        }
    }
}
