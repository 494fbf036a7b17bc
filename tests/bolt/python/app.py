"""An unmodified Bolt for Python app, put behind slackgate by tests/it/bolt.rs.

It makes no network call: a custom `authorize` answers for every workspace, so Bolt never
calls auth.test, and no listener uses the Web API or a response_url.

Environment: SLACK_SIGNING_SECRET (required), PORT (default 3000; 0 for any free port, printed
as `LISTENING <port>` on stdout), SLOW (seconds the
app_mention listener sleeps before it finishes, default 0).

Every accepted request that reaches a listener prints one `HANDLED …` line to stdout. Requests
Bolt rejects (a bad signature gets 401) are logged by Bolt itself ("Invalid request signature
detected") and by the HTTP server's access log, both on stderr.

Served by Bolt's own WSGI adapter on a threaded wsgiref server bound to 127.0.0.1 (Bolt's
`app.start()` dev server binds 0.0.0.0 and handles one request at a time).
"""

import logging
import os
import sys
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")

PORT = int(os.environ.get("PORT", "3000"))
SLOW = float(os.environ.get("SLOW", "0"))
# Only the first run of each event is slow (a redelivery then answers in time).
SLOW_ONCE = float(os.environ.get("SLOW_ONCE", "0"))
# The Web API base URL (slackgate's egress); when set, app_mention is answered in its thread.
API_URL = os.environ.get("SLACK_API_URL")
API_TIMEOUT = float(os.environ.get("SLACK_API_TIMEOUT", "30"))
SEEN = set()


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


def web_client():
    """The bot's Web API client: only its base URL (and its timeout and retries on timeouts, so
    that a lost answer is retried the way @slack/web-api does by default) point it elsewhere."""
    from http.client import RemoteDisconnected
    from urllib.error import URLError

    from slack_sdk import WebClient
    from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler

    retry = ConnectionErrorRetryHandler(
        max_retry_count=2, error_types=[URLError, ConnectionResetError, RemoteDisconnected, TimeoutError]
    )
    return WebClient(base_url=API_URL, timeout=API_TIMEOUT, retry_handlers=[retry])


app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    authorize=authorize,
    process_before_response=True,
    **({"client": web_client()} if API_URL else {}),
)


@app.event("app_mention")
def on_app_mention(event, say):
    if API_URL:
        reply = say(text=f"on it: {event.get('text')}", thread_ts=event.get("ts"))
        handled(f"replied {event.get('ts')}")
        # The token's scopes, from Slack's answer headers as the client got them.
        scopes = next((v for k, v in reply.headers.items() if k.lower() == "x-oauth-scopes"), "")
        handled(f"scopes {scopes}")
    if SLOW > 0:
        time.sleep(SLOW)
    if SLOW_ONCE > 0 and event.get("ts") not in SEEN:
        SEEN.add(event.get("ts"))
        time.sleep(SLOW_ONCE)
    handled(f"app_mention {event.get('ts')} {event.get('text')}")


@app.event("message")
def on_message(event):
    handled(f"message {event.get('ts')}")


@app.command("/deploy")
def on_deploy(ack, command):
    ack(f"deploying {command.get('text', '')}")
    handled(f"command {command.get('command')} {command.get('text', '')}")


@app.view_submission("form")
def on_form(ack):
    ack(response_action="errors", errors={"field": "too short"})
    handled("view_submission form")


@app.options("picker")
def on_picker(ack):
    ack(options=[{"text": {"type": "plain_text", "text": "Alpha"}, "value": "a"}])
    handled("block_suggestion picker")


@app.action("button")
def on_button(ack):
    ack()
    handled("block_action")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


if __name__ == "__main__":
    server = make_server("127.0.0.1", PORT, SlackRequestHandler(app), server_class=ThreadingWSGIServer)
    # PORT=0 takes any free port: say which, for whoever started us.
    print(f"LISTENING {server.server_port}", flush=True)
    logging.getLogger(__name__).info("Bolt for Python app listening on 127.0.0.1:%d/slack/events", server.server_port)
    server.serve_forever()
