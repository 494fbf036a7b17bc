"""A real OTLP/HTTP trace receiver for the integration tests (tests/it/utils/otlp.rs).

    otlp_receiver.py PORT_FILE

Listens on 127.0.0.1, a free port, and writes that port to PORT_FILE once listening (whole, by
a rename). What it serves:

- POST /v1/traces, Content-Type application/x-protobuf (Content-Encoding gzip or deflate or
  none): decodes an ExportTraceServiceRequest with opentelemetry-proto, records the request and
  its spans, and answers 200 with an empty ExportTraceServiceResponse (application/x-protobuf).
  A body that is not such a request is answered 400, another content type 415.
- GET /spans: every span of every export answered 200 so far, in arrival order, flattened to
  JSON (see `flat_span`).
- GET /requests: every POST to /v1/traces so far: {path, headers (names lowercased), span_count,
  mode, status, error}; `status` is the answer given (null for one `hang` held and dropped).
- POST /mode, body `ok` | `hang` | `fail503`: how later exports are answered. `hang` records the
  request and never answers it: the connection is held until the mode changes or 120 s pass, then
  closed without an answer. `fail503` records the request and answers 503. Spans of requests that
  were not answered 200 are not in /spans (an exporter sends them again).
"""

import gzip
import json
import os
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

HANG_LIMIT = 120.0
MODES = ("ok", "hang", "fail503")

lock = threading.Condition()
state = {"mode": "ok", "spans": [], "requests": []}


def any_value(v):
    """An OTLP AnyValue as plain JSON."""
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def flat_span(resource, scope, span):
    res = attributes(resource.attributes)
    return {
        "service_name": res.get("service.name", ""),
        "resource": res,
        "scope": scope.name,
        "scope_version": scope.version,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "trace_state": span.trace_state,
        "name": span.name,
        "kind": span.kind,
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "status": {"code": span.status.code, "message": span.status.message},
        "attributes": attributes(span.attributes),
        "events": [
            {"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "trace_state": link.trace_state,
                "attributes": attributes(link.attributes),
                "flags": link.flags,
            }
            for link in span.links
        ],
        "flags": span.flags,
        "dropped_attributes_count": span.dropped_attributes_count,
        "dropped_events_count": span.dropped_events_count,
        "dropped_links_count": span.dropped_links_count,
    }


def flatten(request):
    return [
        flat_span(rs.resource, ss.scope, span)
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), fmt % args))

    def answer(self, status, body=b"", content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        with lock:
            if self.path == "/spans":
                body = json.dumps(state["spans"])
            elif self.path == "/requests":
                body = json.dumps(state["requests"])
            elif self.path == "/mode":
                body = json.dumps(state["mode"])
            else:
                return self.answer(404, b"{}")
        self.answer(200, body.encode())

    def do_POST(self):
        body = self.read_body()
        if self.path == "/mode":
            mode = body.decode(errors="replace").strip()
            if mode not in MODES:
                return self.answer(400, json.dumps({"error": f"mode {mode!r} is not one of {MODES}"}).encode())
            with lock:
                state["mode"] = mode
                lock.notify_all()
            return self.answer(200, json.dumps(mode).encode())
        if self.path != "/v1/traces":
            return self.answer(404, b"{}")
        self.export(body)

    def export(self, body):
        headers = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        record = {"path": self.path, "headers": headers, "span_count": 0, "mode": None, "status": None, "error": None}
        spans, status, error = [], 200, None
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        encoding = headers.get("content-encoding", "identity").strip().lower()
        try:
            if content_type != "application/x-protobuf":
                status, error = 415, f"content type {content_type!r} is not application/x-protobuf"
            else:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                elif encoding != "identity":
                    raise ValueError(f"content encoding {encoding!r}")
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                spans = flatten(request)
        except (DecodeError, ValueError, OSError, zlib.error) as e:
            status, error = 400, f"{type(e).__name__}: {e}"
        with lock:
            mode = state["mode"]
            record.update(span_count=len(spans), mode=mode, error=error)
            state["requests"].append(record)
            if status == 200 and mode == "fail503":
                status = 503
            if status == 200 and mode == "ok":
                state["spans"].extend(spans)
            if status != 200 or mode != "hang":
                record["status"] = status
        if error is not None or status != 200:
            return self.answer(status, json.dumps({"error": error or "unavailable"}).encode())
        if mode == "hang":
            # Held unanswered until the mode changes or the limit passes, then dropped.
            deadline = time.monotonic() + HANG_LIMIT
            with lock:
                while state["mode"] == "hang" and time.monotonic() < deadline:
                    lock.wait(deadline - time.monotonic())
            self.close_connection = True
            return
        self.answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")


def main():
    port_file = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, port_file)
    sys.stderr.write(f"listening on 127.0.0.1:{server.server_address[1]}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
