"""An unmodified Bolt for Python bot that answers in thread after a "model call", put behind
slackgate (with its egress) by tests/it/turns.rs.

It makes no network call of its own: a custom `authorize` answers for every workspace, and its
Web API client (`say()`, `chat.update`) points at SLACK_API_URL, the gateway's egress.

Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
for any free port, printed as `LISTENING <port>` on stdout), ACK_FIRST (1, the default: Bolt's
own ack-first, `process_before_response=False`; 0: process before response), ANSWER_DELAY
(seconds the "model call" takes, default 1).

A human `message` prints `HANDLED run <ts> <X-Slackgate-Run> <X-Slack-Retry-Num>` (`-` for a
header not sent), then `HANDLED start <ts> <text>`, waits ANSWER_DELAY, replies with `say()`
in its thread (in a DM without a thread: in the channel, no `thread_ts`), then prints
`HANDLED answered <ts>`, or `HANDLED withheld <ts>` when the Web API answered
`{"ok": false, "error": "superseded"}`. A text with "ignore" gets no reply (`HANDLED ignored
<ts>`); one with "stall" gets a placeholder (`HANDLED stalling <ts>`) that is edited every
second for ten minutes: a bot stuck mid-turn that keeps writing.
"""

import logging
import os
import sys
import threading
import time
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
ACK_FIRST = os.environ.get("ACK_FIRST", "1") == "1"
ANSWER_DELAY = float(os.environ.get("ANSWER_DELAY", "1"))


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
# as @slack/web-api does by default, for a gateway that restarts).
retry = ConnectionErrorRetryHandler(
    max_retry_count=5, error_types=[URLError, ConnectionResetError, RemoteDisconnected, TimeoutError]
)
app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    authorize=authorize,
    process_before_response=not ACK_FIRST,
    client=WebClient(base_url=os.environ["SLACK_API_URL"], timeout=30, retry_handlers=[retry]),
)


def header(request, name: str) -> str:
    values = request.headers.get(name) or []
    return values[0] if values else "-"


@app.event("message")
def on_message(event, say, client, request):
    if event.get("subtype") not in (None, "thread_broadcast"):
        return
    ts, text = event["ts"], event.get("text", "")
    handled(f"run {ts} {header(request, 'x-slackgate-run')} {header(request, 'x-slack-retry-num')}")
    handled(f"start {ts} {text}")
    if "ignore" in text:
        handled(f"ignored {ts}")
        return
    # A DM's top-level message is answered in the channel, the rest in the thread.
    in_dm = event.get("channel_type") == "im" and not event.get("thread_ts")
    where = {} if in_dm else {"thread_ts": event.get("thread_ts") or ts}
    if "stall" in text:
        placeholder = say(text=f"thinking about {ts}", **where)
        handled(f"stalling {ts}")
        for i in range(600):
            time.sleep(1)
            client.chat_update(channel=event["channel"], ts=placeholder["ts"], text=f"still thinking ({i + 1} s)")
        return
    time.sleep(ANSWER_DELAY)
    try:
        say(text=f"answer to {ts}", **where)
    except SlackApiError as e:
        if e.response.get("error") == "superseded":
            handled(f"withheld {ts}")
            return
        raise
    handled(f"answered {ts}")


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


if __name__ == "__main__":
    server = make_server("127.0.0.1", PORT, SlackRequestHandler(app), server_class=ThreadingWSGIServer)
    print(f"LISTENING {server.server_port}", flush=True)
    logging.getLogger(__name__).info("Bolt for Python turns app on 127.0.0.1:%d (ack first: %s)", server.server_port, ACK_FIRST)
    server.serve_forever()
