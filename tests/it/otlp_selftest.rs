//! The OTLP/HTTP trace receiver ([`OtlpReceiver`]) against a real exporter, the OpenTelemetry
//! Python SDK's (`opentelemetry-exporter-otlp-proto-http`, configured by the standard
//! `OTEL_EXPORTER_OTLP_*` variables): what the gateway's tracing tests rely on it for. It
//! decodes what an exporter really sends, and it can refuse, fail and hang.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::utils::otlp::venv_python;
use crate::utils::{connect, exchange, until, OtlpReceiver, Req};

const LIMIT: Duration = Duration::from_secs(10);

/// A parent span and its child, with attributes of every kind, an event and a link, ended and
/// exported in one batch; prints `TRACE`, `PARENT`, `CHILD` (hex ids) and `EXPORT <result>
/// <spans>` for each export attempt.
const EXPORTER: &str = r#"
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

class Exporter(OTLPSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        print("EXPORT", result.name, len(spans), flush=True)
        return result

provider = TracerProvider(resource=Resource.create({"deployment.environment": "selftest"}))
provider.add_span_processor(BatchSpanProcessor(Exporter()))
tracer = provider.get_tracer("slackgate.selftest", "0.1")
linked = SpanContext(0x0123456789abcdef0123456789abcdef, 0x1122334455667788, False, TraceFlags(1))
attrs = {"slack.app": "bot", "attempt": 3, "ratio": 0.5, "retried": True, "tags": ["a", "b"]}
with tracer.start_as_current_span("deliver", kind=SpanKind.SERVER, attributes=attrs) as parent:
    with tracer.start_as_current_span(
        "POST /slack/events", kind=SpanKind.CLIENT, links=[Link(linked, {"why": "retry"})]
    ) as child:
        child.set_attribute("http.response.status_code", 503)
        child.add_event("answered", {"bytes": 42})
        child.set_status(Status(StatusCode.ERROR, "bot unavailable"))
    ctx = parent.get_span_context()
    print("TRACE", format(ctx.trace_id, "032x"), flush=True)
    print("PARENT", format(ctx.span_id, "016x"), flush=True)
    print("CHILD", format(child.get_span_context().span_id, "016x"), flush=True)
provider.shutdown()
"#;

/// Run [`EXPORTER`] toward `receiver` with `env` (after the endpoint, service name and an auth
/// header); its stdout, once it has exited 0.
async fn export(receiver: &OtlpReceiver, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(venv_python());
    cmd.arg("-c")
        .arg(EXPORTER)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "otlp-selftest")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20otlp-token,x-tenant=t1")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .env_remove("OTEL_EXPORTER_OTLP_COMPRESSION")
        .env_remove("OTEL_EXPORTER_OTLP_TIMEOUT")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_TRACES_SAMPLER")
        .env_remove("OTEL_SDK_DISABLED")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // The exporter ends by itself: its export has a timeout (10 s unless `env` says).
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exporter exited with {}:\n{stdout}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        receiver.logs()
    );
    stdout
}

/// The value printed after `tag ` on its own line.
fn printed<'a>(stdout: &'a str, tag: &str) -> &'a str {
    stdout.lines().find_map(|l| l.strip_prefix(tag)?.strip_prefix(' ')).unwrap_or_else(|| panic!("no {tag}:\n{stdout}"))
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no span {name:?} in {spans:#?}"))
}

/// What the exporter sent, decoded: both spans of one trace, the child under the parent, with
/// names, kinds, attributes of each type, status, event, link, resource and scope.
fn assert_decoded(stdout: &str, spans: &[Value]) {
    let (trace_id, parent_id, child_id) =
        (printed(stdout, "TRACE"), printed(stdout, "PARENT"), printed(stdout, "CHILD"));
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let parent = named(spans, "deliver");
    let child = named(spans, "POST /slack/events");
    for span in [parent, child] {
        assert_eq!(span["trace_id"], trace_id);
        assert_eq!(span["service_name"], "otlp-selftest");
        assert_eq!(span["resource"]["deployment.environment"], "selftest");
        assert_eq!(span["scope"], "slackgate.selftest");
        assert_eq!(span["scope_version"], "0.1");
        let (start, end) =
            (span["start_time_unix_nano"].as_u64().unwrap(), span["end_time_unix_nano"].as_u64().unwrap());
        assert!(start > 1_600_000_000_000_000_000 && end >= start, "{span}");
    }
    assert_eq!(parent["span_id"], parent_id);
    assert_eq!(parent["parent_span_id"], "");
    assert_eq!(child["span_id"], child_id);
    assert_eq!(child["parent_span_id"], parent_id);
    // SpanKind: SERVER is 2, CLIENT 3 in OTLP.
    assert_eq!(parent["kind"], 2);
    assert_eq!(child["kind"], 3);
    let a = &parent["attributes"];
    assert_eq!(a["slack.app"], "bot");
    assert_eq!(a["attempt"], 3);
    assert_eq!(a["ratio"], 0.5);
    assert_eq!(a["retried"], true);
    assert_eq!(a["tags"], serde_json::json!(["a", "b"]));
    assert_eq!(parent["status"]["code"], 0);
    assert_eq!(child["attributes"]["http.response.status_code"], 503);
    // STATUS_CODE_ERROR is 2.
    assert_eq!(child["status"]["code"], 2);
    assert_eq!(child["status"]["message"], "bot unavailable");
    assert_eq!(child["events"][0]["name"], "answered");
    assert_eq!(child["events"][0]["attributes"]["bytes"], 42);
    assert!(child["events"][0]["time_unix_nano"].as_u64().unwrap() >= child["start_time_unix_nano"].as_u64().unwrap());
    assert_eq!(child["links"][0]["trace_id"], "0123456789abcdef0123456789abcdef");
    assert_eq!(child["links"][0]["span_id"], "1122334455667788");
    assert_eq!(child["links"][0]["attributes"]["why"], "retry");
    // SpanFlags: 0x100 says whether the parent (or linked) context is remote is known, 0x200
    // that it is; this SDK sets no trace-flag bits there. Both contexts here are local.
    assert_eq!(child["flags"], 0x100, "{child}");
    assert_eq!(child["links"][0]["flags"], 0x100, "{child}");
}

#[tokio::test(flavor = "multi_thread")]
async fn decodes_what_the_sdk_exports_with_its_headers() {
    let receiver = OtlpReceiver::start().await;
    let stdout = export(&receiver, &[]).await;
    assert!(stdout.contains("EXPORT SUCCESS 2"), "{stdout}\n{}", receiver.logs());
    let trace_id = printed(&stdout, "TRACE");
    assert_decoded(&stdout, &receiver.spans_of_trace(trace_id).await);

    let requests = receiver.requests().await;
    assert_eq!(requests.len(), 1, "one batch: {requests:#?}");
    let r = &requests[0];
    assert_eq!(r["span_count"], 2);
    assert_eq!(r["status"], 200);
    assert_eq!(r["headers"]["authorization"], "Bearer otlp-token");
    assert_eq!(r["headers"]["x-tenant"], "t1");
    assert_eq!(r["headers"]["content-type"], "application/x-protobuf");
    assert!(r["headers"].get("content-encoding").is_none(), "{r}");

    // Gzip, as OTEL_EXPORTER_OTLP_COMPRESSION asks: a second trace, decoded the same.
    let stdout = export(&receiver, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]).await;
    assert!(stdout.contains("EXPORT SUCCESS 2"), "{stdout}\n{}", receiver.logs());
    let second = printed(&stdout, "TRACE");
    assert_ne!(second, trace_id);
    assert_decoded(&stdout, &receiver.spans_of_trace(second).await);
    let requests = receiver.requests().await;
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[1]["headers"]["content-encoding"], "gzip");
    assert_eq!(receiver.spans().await.len(), 4);
}

/// A POST of `body` to `/v1/traces` as `content_type`: status, content type, body.
async fn post(receiver: &OtlpReceiver, content_type: &'static str, body: &[u8]) -> (u16, Option<String>, Vec<u8>) {
    let req = Req { method: "POST", path: "/v1/traces".into(), body: body.to_vec(), content_type, headers: Vec::new() };
    let (status, ct, body) = exchange(receiver.port, req).await.expect("an answer");
    (status, ct, body.to_vec())
}

#[tokio::test(flavor = "multi_thread")]
async fn refuses_what_is_not_otlp_and_fails_on_demand() {
    let receiver = OtlpReceiver::start().await;
    // An empty ExportTraceServiceRequest is zero bytes: accepted, with an empty response.
    let (status, ct, body) = post(&receiver, "application/x-protobuf", b"").await;
    assert_eq!((status, ct.as_deref(), body.len()), (200, Some("application/x-protobuf"), 0));
    // Bytes that are no protobuf message, and JSON where protobuf was promised.
    assert_eq!(post(&receiver, "application/x-protobuf", b"\xff\xff\xff").await.0, 400);
    assert_eq!(post(&receiver, "application/json", b"{}").await.0, 415);
    let requests = receiver.requests().await;
    assert_eq!(requests.len(), 3);
    assert!(requests[1]["error"].as_str().unwrap().contains("DecodeError"), "{requests:#?}");

    // fail503: the SDK's exporter retries until its timeout and reports the failure; nothing is
    // taken as received.
    receiver.set_mode("fail503").await;
    assert_eq!(post(&receiver, "application/x-protobuf", b"").await.0, 503);
    let stdout = export(&receiver, &[("OTEL_EXPORTER_OTLP_TIMEOUT", "2")]).await;
    assert!(stdout.contains("EXPORT FAILURE 2"), "{stdout}\n{}", receiver.logs());
    let requests = receiver.requests().await;
    let failed: Vec<_> = requests.iter().filter(|r| r["span_count"] == 2).collect();
    assert!(!failed.is_empty() && failed.iter().all(|r| r["status"] == 503), "{requests:#?}");
    assert!(receiver.spans().await.is_empty());

    receiver.set_mode("ok").await;
    let stdout = export(&receiver, &[]).await;
    assert!(stdout.contains("EXPORT SUCCESS 2"), "{stdout}\n{}", receiver.logs());
    assert_eq!(receiver.spans().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn hang_holds_the_export_unanswered_until_released() {
    let receiver = OtlpReceiver::start().await;
    receiver.set_mode("hang").await;
    let mut conn = connect(receiver.port).await;
    conn.write_all(
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\nAuthorization: Bearer held\r\nContent-Length: 0\r\n\r\n",
    )
    .await
    .unwrap();
    // Received and recorded ...
    let mut requests = Vec::new();
    let recorded = until(LIMIT, async || {
        requests = receiver.requests().await;
        requests.len() == 1
    })
    .await;
    assert!(recorded, "{requests:#?}\n{}", receiver.logs());
    assert_eq!(requests[0]["mode"], "hang");
    assert_eq!(requests[0]["headers"]["authorization"], "Bearer held");
    // ... and not answered: not a byte within a second.
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf)).await;
    assert!(read.is_err(), "an answer while hanging: {read:?}");
    assert_eq!(receiver.requests().await[0]["status"], Value::Null);

    // Leaving hang drops the held connection, unanswered; exports are answered again.
    receiver.set_mode("ok").await;
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(LIMIT, conn.read_to_end(&mut answer)).await;
    assert!(matches!(closed, Ok(Ok(0))), "{closed:?}: {}", String::from_utf8_lossy(&answer));
    assert_eq!(post(&receiver, "application/x-protobuf", b"").await.0, 200);
}
