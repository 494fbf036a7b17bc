"""An unmodified Bolt for Python bot that reads the thread before it answers, as an AI bot does,
put behind slackgate (with its egress) by tests/it/replies_record.rs.

It makes no network call of its own: a custom `authorize` answers for every workspace, and its
Web API client (`conversations.replies`, `say()`) points at SLACK_API_URL, the gateway's egress.
The client keeps slack_sdk's default of not retrying a 429: a thread read Slack refuses reaches
the bot as the error it is, which is what the test tells apart from an answer from the record.

Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
for any free port, printed as `LISTENING <port>` on stdout).

A human `message` that mentions <@UBOT> gets its thread read with `conversations.replies`, then
`context <n> <text of the thread's first message>` in the thread, and `HANDLED answered <ts>
<n>` on stdout; when Slack refused the read (429, `ratelimited`): `no context <ts>` in the
thread and `HANDLED ratelimited <ts>`. Every other message (no mention, an edit, a deletion)
prints `HANDLED skipped <ts>` and gets no reply; the app still listens to it, since Bolt answers
404 to an event nobody listens to, which the gateway would retry.
"""

import logging
import os
import sys
import threading
from http.client import RemoteDisconnected
from socketserver import ThreadingMixIn
from urllib.error import URLError
from wsgiref.simple_server import WSGIServer, make_server

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")

PORT = int(os.environ.get("PORT", "3000"))
MENTION = "<@UBOT>"

PRINTING = threading.Lock()


def handled(line: str) -> None:
    # One whole line at a time: listeners run on several threads.
    with PRINTING:
        sys.stdout.write(f"HANDLED {line}\n")
        sys.stdout.flush()


def authorize(enterprise_id, team_id, user_id, logger):
    return AuthorizeResult(
        enterprise_id=enterprise_id,
        team_id=team_id,
        bot_user_id="UBOT",
        bot_id="BBOT",
        bot_token="xoxb-test",
    )


# Only the base URL points the client elsewhere (and retries on a refused or broken connection,
# as @slack/web-api does by default); no RateLimitErrorRetryHandler, as slack_sdk's default.
retry = ConnectionErrorRetryHandler(
    max_retry_count=5, error_types=[URLError, ConnectionResetError, RemoteDisconnected, TimeoutError]
)
app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    authorize=authorize,
    client=WebClient(base_url=os.environ["SLACK_API_URL"], timeout=30, retry_handlers=[retry]),
)


@app.event("message")
def on_message(event, say, client):
    ts = event.get("ts", "")
    text = event.get("text") or ""
    if event.get("subtype") not in (None, "thread_broadcast") or MENTION not in text:
        handled(f"skipped {ts}")
        return
    thread = event.get("thread_ts") or ts
    try:
        replies = client.conversations_replies(channel=event["channel"], ts=thread)
    except SlackApiError as e:
        if e.response.status_code == 429 or e.response.get("error") == "ratelimited":
            say(text=f"no context {ts}", thread_ts=thread)
            handled(f"ratelimited {ts}")
            return
        raise
    messages = replies.get("messages") or []
    root = messages[0].get("text", "") if messages else ""
    say(text=f"context {len(messages)} {root}", thread_ts=thread)
    handled(f"answered {ts} {len(messages)}")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


if __name__ == "__main__":
    server = make_server("127.0.0.1", PORT, SlackRequestHandler(app), server_class=ThreadingWSGIServer)
    print(f"LISTENING {server.server_port}", flush=True)
    logging.getLogger(__name__).info("Bolt for Python context app on 127.0.0.1:%d", server.server_port)
    server.serve_forever()
