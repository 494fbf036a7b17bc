"""An unmodified Bolt for Python app traced with the OpenTelemetry Python SDK, put behind
slackgate by tests/it/bolt/traces.rs.

Nothing in the app knows about slackgate: its spans come from OpenTelemetry's standard
instrumentation, configured the way any Python service would be:

- a TracerProvider (service.name "bolt-bot") exporting through a BatchSpanProcessor and the
  OTLP/HTTP exporter to OTEL_EXPORTER_OTLP_ENDPOINT (`<endpoint>/v1/traces`);
- `OpenTelemetryMiddleware` (opentelemetry-instrumentation-wsgi) around Bolt's WSGI adapter: the
  request's W3C `traceparent` (slackgate's "deliver to bot" span) becomes the server span's parent;
- `ThreadingInstrumentor` (opentelemetry-instrumentation-threading): Bolt acks first
  (`process_before_response` off) and runs the listener on its ThreadPoolExecutor; the
  instrumentation wraps `ThreadPoolExecutor.submit`, so the listener runs in the context that was
  current where Bolt submitted it — the WSGI server span. No explicit propagation is needed;
- `URLLibInstrumentor` (opentelemetry-instrumentation-urllib): the WebClient's urllib calls get a
  client span and carry its `traceparent` to the Web API (slackgate's egress).

The app_mention listener opens a span "answer" (where a bot would call its model), then replies in
the mention's thread with `say()`, through the WebClient whose base URL is SLACK_API_URL. A
custom `authorize` answers for every workspace, so Bolt never calls auth.test.

Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required: the egress's `/api/`),
OTEL_EXPORTER_OTLP_ENDPOINT (required: the collector's base URL), PORT (default 3000; 0 for any
free port, printed as `LISTENING <port>` on stdout).

Every event that reaches a listener prints `HANDLED …` lines to stdout, after the spans of its
run were flushed to the collector.
"""

import logging
import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.threading import ThreadingInstrumentor
from opentelemetry.instrumentation.urllib import URLLibInstrumentor
from opentelemetry.instrumentation.wsgi import OpenTelemetryMiddleware
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")

PORT = int(os.environ.get("PORT", "3000"))
API_URL = os.environ["SLACK_API_URL"]
OTLP_ENDPOINT = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/")

provider = TracerProvider(resource=Resource.create({"service.name": "bolt-bot"}))
# A short delay, so that what the listener does not flush itself (the WSGI server span, which
# ends once Bolt acked) reaches the collector promptly too.
provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{OTLP_ENDPOINT}/v1/traces"), schedule_delay_millis=100)
)
trace.set_tracer_provider(provider)
ThreadingInstrumentor().instrument()
URLLibInstrumentor().instrument()
tracer = trace.get_tracer("bolt-bot")


def handled(line: str) -> None:
    print(f"HANDLED {line}", flush=True)


def authorize(enterprise_id, team_id, user_id, logger):
    return AuthorizeResult(
        enterprise_id=enterprise_id,
        team_id=team_id,
        bot_user_id="UBOT",
        bot_id="BBOT",
        bot_token="xoxb-test",
    )


app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    authorize=authorize,
    # Ack first: Bolt answers the delivery at once and runs the listener on its thread pool.
    process_before_response=False,
    client=WebClient(base_url=API_URL),
)


@app.event("app_mention")
def on_app_mention(event, say):
    # Whether the delivery's context crossed into Bolt's worker thread (for the test's log).
    parent = trace.get_current_span().get_span_context()
    handled(f"context {format(parent.trace_id, '032x')} {format(parent.span_id, '016x')}")
    with tracer.start_as_current_span("answer") as span:
        # What a model call would record: sizes and names, never the message.
        span.set_attribute("bot.prompt_chars", len(event.get("text", "")))
        answer = "on it"
    say(text=answer, thread_ts=event.get("ts"))
    handled(f"replied {event.get('ts')}")
    provider.force_flush(5000)
    handled(f"app_mention {event.get('ts')}")


@app.event("message")
def on_message(event):
    handled(f"message {event.get('ts')}")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


if __name__ == "__main__":
    wsgi_app = OpenTelemetryMiddleware(SlackRequestHandler(app))
    server = make_server("127.0.0.1", PORT, wsgi_app, server_class=ThreadingWSGIServer)
    # PORT=0 takes any free port: say which, for whoever started us.
    print(f"LISTENING {server.server_port}", flush=True)
    logging.getLogger(__name__).info(
        "traced Bolt for Python app listening on 127.0.0.1:%d/slack/events", server.server_port
    )
    server.serve_forever()
