"""An unmodified Bolt for Python bot in Socket Mode, put behind slackgate (its egress answers the
bot's `apps.connections.open` with the gateway's own WebSocket) by the Socket Mode tests.

It makes no network call of its own: a custom `authorize` answers for every workspace, so Bolt
never calls auth.test, and its Web API client points at SLACK_API_URL, the gateway's egress.
Bolt's `SocketModeHandler` (the built-in, dependency-free client of slack_sdk) opens its socket
with `app.client`, so `apps.connections.open` goes there too, with the app token.

Environment: SLACK_APP_TOKEN (required, `xapp-…`), SLACK_API_URL (required; the egress base URL,
ending in `/`, e.g. `http://127.0.0.1:PORT/api/`: the client joins method names with urljoin,
so without the slash `apps.connections.open` would replace the last path segment), ANSWER (1,
the default: answer an app_mention in its thread with `say()`; 0: no reply), SLOW_ONCE (seconds
to hold the first delivery of each event_id before Bolt acks it, default 0: a bot that misses
its ack once), THINK (seconds, default 0: answer at once with `say()`; above 0: answer an
app_mention as an AI bot does — post a placeholder `thinking about <ts>` in its thread, think
that long, then `chat_update` the placeholder into `answer to <ts>`), SKIP_RETRIES (1: drop
every delivery whose retry number is above 0, as many bots do to never answer twice), STREAM
(1: with THINK, stream the answer instead — `chat.startStream` with its first half, THINK
seconds, the second half, `chat.stopStream` — through slack_sdk's `chat_stream` helper).

On stdout: `CONNECTED` each time the server's `hello` arrives on a socket (again after every
reconnect), `DISCONNECT <reason>` for each `disconnect` message, and one `HANDLED …` line per
listener run:
  `HANDLED app_mention <event_id> <ts> retry=<retry_attempt, or ->` then `HANDLED replied <ts>`
  (or `HANDLED reply_failed <ts> <error>`); with THINK, `HANDLED placeholder <ts> <its ts>`
  then `HANDLED answered <ts> <its ts>` (with STREAM: `HANDLED streaming <ts> <its ts> <pid>` then
  `HANDLED streamed <ts> <its ts>`); `HANDLED skipped_retry <event_id> <retry>`;
  `HANDLED message <ts>`; `HANDLED command /ask <text>`
  (acked with the inline answer `{"text": "answer to <text>"}`); `HANDLED view form` (acked with
  `{"response_action": "errors", …}`).
Bolt's own logging (the socket client's connects and reconnects) goes to stderr.
"""

import json
import logging
import os
import sys
import threading
import time
from http.client import RemoteDisconnected
from urllib.error import URLError

from slack_bolt import App
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")

APP_TOKEN = os.environ["SLACK_APP_TOKEN"]
API_URL = os.environ["SLACK_API_URL"]
ANSWER = os.environ.get("ANSWER", "1") == "1"
SLOW_ONCE = float(os.environ.get("SLOW_ONCE", "0"))
THINK = float(os.environ.get("THINK", "0"))
STREAM = os.environ.get("STREAM", "0") == "1"
SKIP_RETRIES = os.environ.get("SKIP_RETRIES", "0") == "1"
SEEN = set()
SEEN_LOCK = threading.Lock()
PRINTING = threading.Lock()


def say_line(line: str) -> None:
    # One whole line at a time: listeners run on the socket client's worker threads.
    with PRINTING:
        sys.stdout.write(f"{line}\n")
        sys.stdout.flush()


def handled(line: str) -> None:
    say_line(f"HANDLED {line}")


def authorize(enterprise_id, team_id, user_id, logger):
    return AuthorizeResult(
        enterprise_id=enterprise_id,
        team_id=team_id,
        bot_user_id="UBOT",
        bot_id="BBOT",
        bot_token="xoxb-test",
    )


# Only the base URL points the client elsewhere (and retries on a refused or broken connection,
# for a gateway that restarts). No signing secret: Socket Mode requests are not signed.
retry = ConnectionErrorRetryHandler(
    max_retry_count=5, error_types=[URLError, ConnectionResetError, RemoteDisconnected, TimeoutError]
)
app = App(
    authorize=authorize,
    client=WebClient(base_url=API_URL, timeout=30, retry_handlers=[retry]),
)


@app.middleware
def slow_once(body, next):
    # Runs before the listener, so before Bolt's automatic ack of an event.
    event_id = body.get("event_id")
    if SLOW_ONCE > 0 and event_id:
        with SEEN_LOCK:
            first = event_id not in SEEN
            SEEN.add(event_id)
        if first:
            time.sleep(SLOW_ONCE)
    next()


def header(request, name: str) -> str:
    values = request.headers.get(name) or []
    return values[0] if values else "-"


@app.middleware
def skip_retries(body, request, next):
    # As bots that must never answer twice do: Slack's retries are dropped unseen.
    retry_num = header(request, "x-slack-retry-num")
    if SKIP_RETRIES and retry_num not in ("-", "0"):
        handled(f"skipped_retry {body.get('event_id')} {retry_num}")
        return
    next()


def think_and_stream(client, event, team_id: str) -> None:
    # An AI bot's streamed answer: its first half at once, the rest once thought through.
    ts = event.get("ts")
    streamer = client.chat_stream(
        channel=event.get("channel"),
        thread_ts=ts,
        recipient_team_id=event.get("team") or team_id,
        recipient_user_id=event.get("user"),
        buffer_size=1,
    )
    # Each run words its answer its own way (as a model does): by this process's id.
    streamer.append(markdown_text=f"answer to {ts} by {os.getpid()}: the first half")
    handled(f"streaming {ts} {streamer.ts} {os.getpid()}")
    time.sleep(THINK)
    streamer.append(markdown_text="; the second half.")
    streamer.stop()
    handled(f"streamed {ts} {streamer.ts}")


def think_and_answer(client, channel: str, ts: str) -> None:
    # An AI bot's answer: a placeholder at once, the answer into it once thought through.
    placeholder = client.chat_postMessage(channel=channel, thread_ts=ts, text=f"thinking about {ts}")
    handled(f"placeholder {ts} {placeholder['ts']}")
    time.sleep(THINK)
    client.chat_update(channel=channel, ts=placeholder["ts"], text=f"answer to {ts}")
    handled(f"answered {ts} {placeholder['ts']}")


@app.event("app_mention")
def on_app_mention(body, event, say, request, client):
    ts = event.get("ts")
    # Bolt puts the envelope's retry_attempt where HTTP mode has X-Slack-Retry-Num.
    handled(f"app_mention {body.get('event_id')} {ts} retry={header(request, 'x-slack-retry-num')}")
    if not ANSWER:
        return
    try:
        if THINK > 0 and STREAM:
            think_and_stream(client, event, body.get("team_id"))
            return
        if THINK > 0:
            think_and_answer(client, event.get("channel"), ts)
            return
        say(text=f"on it: {event.get('text')}", thread_ts=ts)
    except SlackApiError as e:
        handled(f"reply_failed {ts} {e.response.get('error')}")
        return
    except Exception as e:  # a refused or broken connection to the egress
        handled(f"reply_failed {ts} {type(e).__name__}")
        return
    handled(f"replied {ts}")


@app.event("message")
def on_message(event):
    handled(f"message {event.get('ts')}")


@app.command("/ask")
def on_ask(ack, command):
    # The ack carries the inline answer as its payload: {"text": "answer to …"}.
    ack(f"answer to {command.get('text', '')}")
    handled(f"command {command.get('command')} {command.get('text', '')}")


@app.view_submission("form")
def on_form(ack):
    ack(response_action="errors", errors={"field": "too short"})
    handled("view form")


def on_raw_message(raw: str) -> None:
    # Every text frame, before the client acts on it (a `disconnect` never reaches a listener).
    try:
        message = json.loads(raw)
    except ValueError:
        return
    if message.get("type") == "hello":
        say_line("CONNECTED")
    elif message.get("type") == "disconnect":
        say_line(f"DISCONNECT {message.get('reason')}")


if __name__ == "__main__":
    handler = SocketModeHandler(app, APP_TOKEN)
    handler.client.on_message_listeners.append(on_raw_message)
    handler.start()
