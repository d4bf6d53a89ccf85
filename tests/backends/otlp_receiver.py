"""A small OTLP/HTTP trace receiver for the tests, decoding with OpenTelemetry's own protobuf
definitions (`opentelemetry-proto`).

- `OtlpReceiver`: a threaded HTTP server on a free loopback port; `POST /v1/traces` with an
  `ExportTraceServiceRequest` (protobuf) is decoded, its spans kept as `ReceivedSpan`s, and
  answered with an empty `ExportTraceServiceResponse`. `wait_for(predicate, count)` polls
  (bounded) until that many received spans match.
- `BlackHole`: a TCP listener that accepts connections, reads what is sent and never
  answers: an exporter pointed at it can only time out.

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        ...
        [span] = receiver.wait_for(lambda s: s.name == "tools/list")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

# OTLP's span kinds and status codes, by the names the tests use.
KIND = {
    Span.SPAN_KIND_UNSPECIFIED: "UNSPECIFIED",
    Span.SPAN_KIND_INTERNAL: "INTERNAL",
    Span.SPAN_KIND_SERVER: "SERVER",
    Span.SPAN_KIND_CLIENT: "CLIENT",
    Span.SPAN_KIND_PRODUCER: "PRODUCER",
    Span.SPAN_KIND_CONSUMER: "CONSUMER",
}
STATUS = {
    Status.STATUS_CODE_UNSET: "UNSET",
    Status.STATUS_CODE_OK: "OK",
    Status.STATUS_CODE_ERROR: "ERROR",
}


def _value(value: AnyValue) -> Any:
    """An attribute's value as plain Python."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids in lowercase hex (`parent_span_id` empty for a root)."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    status: str
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpReceiver:
    """A threaded OTLP/HTTP receiver of traces on 127.0.0.1 (a free port)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self._answer(404, b"", "text/plain")
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._keep(request)
                self._answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is added to it)."""
        return f"http://127.0.0.1:{self.port}"

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=KIND[span.kind],
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            status=STATUS[span.status.code],
                            status_message=span.status.message,
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            resource=resource,
                        )
                    )
        with self._lock:
            self.requests += 1
            self._spans.extend(spans)

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in order of arrival."""
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, predicate: Callable[[ReceivedSpan], bool], count: int = 1, timeout: float = 20.0
    ) -> list[ReceivedSpan]:
        """The received spans matching `predicate` once at least `count` have arrived (polled,
        at most `timeout` seconds; an AssertionError naming what did arrive past it)."""
        deadline = time.monotonic() + timeout
        while True:
            matching = [span for span in self.spans() if predicate(span)]
            if len(matching) >= count:
                return matching
            if time.monotonic() > deadline:
                seen = [(s.name, s.kind, s.trace_id) for s in self.spans()]
                raise AssertionError(f"{len(matching)} of {count} spans arrived; received: {seen}")
            time.sleep(0.02)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class BlackHole:
    """A loopback TCP listener that accepts every connection, reads and never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._open.append(connection)
            threading.Thread(target=self._swallow, args=(connection,), daemon=True).start()

    def _swallow(self, connection: socket.socket) -> None:
        try:
            while connection.recv(65536):
                pass
        except OSError:
            pass

    def __enter__(self) -> BlackHole:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for connection in self._open:
            connection.close()
