"""An unmodified Bolt for Python bot that streams its answer in thread with slack_sdk's own
helper, `client.chat_stream(...)` (chat.startStream, chat.appendStream, chat.stopStream, its
256-character buffer), as an AI agent's model output would arrive: put in front of the fake
Slack (tests/it/fake_stream_selftest.rs) or behind slackgate's egress.

It makes no network call of its own: a custom `authorize` answers for every workspace, and its
Web API client points at SLACK_API_URL.

Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
for any free port, printed as `LISTENING <port>` on stdout), ACK_FIRST (1, the default: Bolt's
own ack-first, `process_before_response=False`; 0: process before response), STATUS_FIRST (1:
set the thread's status "is thinking…" with assistant.threads.setStatus first; default 0),
THINK (seconds before the first piece, default 0), ANSWER_LEN (characters of the answer,
default 600), CHUNK (characters a piece, default 40), CHUNK_EVERY (seconds between pieces,
default 0.05), TOOL_PAUSE (seconds of a "tool call" once half the answer is out, default 0).

The answer to the message at `ts` is `answer(ts, ANSWER_LEN)`: `answer to <ts>: ` then
`0001 0002 0003 …`, cut at ANSWER_LEN characters, so a test can compute it.

A human `message` (no subtype, or `thread_broadcast`) or an `app_mention` prints `HANDLED
start <ts>`, streams the answer in its thread (`thread_ts`: the event's, else its ts), then
prints `HANDLED streamed <ts> <stream_ts>`. When a Web API call fails it prints `HANDLED error
<ts> <code>` (Slack's `error`, else the exception's class name) and the server goes on.
"""

import logging
import os
import sys
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")

PORT = int(os.environ.get("PORT", "3000"))
ACK_FIRST = os.environ.get("ACK_FIRST", "1") == "1"
STATUS_FIRST = os.environ.get("STATUS_FIRST", "0") == "1"
THINK = float(os.environ.get("THINK", "0"))
ANSWER_LEN = int(os.environ.get("ANSWER_LEN", "600"))
CHUNK = int(os.environ.get("CHUNK", "40"))
CHUNK_EVERY = float(os.environ.get("CHUNK_EVERY", "0.05"))
TOOL_PAUSE = float(os.environ.get("TOOL_PAUSE", "0"))

PRINTING = threading.Lock()


def handled(line: str) -> None:
    # One whole line at a time: listeners run on several threads.
    with PRINTING:
        sys.stdout.write(f"HANDLED {line}\n")
        sys.stdout.flush()


def answer(ts: str, length: int) -> str:
    """The whole answer to the message at `ts`: what the tests expect the stream to hold."""
    text = f"answer to {ts}: "
    i = 0
    while len(text) < length:
        i += 1
        text += f"{i:04d} "
    return text[:length]


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
    process_before_response=not ACK_FIRST,
    client=WebClient(base_url=os.environ["SLACK_API_URL"], timeout=30),
)


def stream_answer(event, client, team_id):
    ts, channel = event["ts"], event["channel"]
    thread_ts = event.get("thread_ts") or ts
    handled(f"start {ts}")
    try:
        if STATUS_FIRST:
            client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status="is thinking…")
        time.sleep(THINK)
        streamer = client.chat_stream(
            channel=channel,
            thread_ts=thread_ts,
            recipient_team_id=event.get("team") or team_id,
            recipient_user_id=event.get("user"),
        )
        text = answer(ts, ANSWER_LEN)
        paused = False
        for at in range(0, len(text), CHUNK):
            if at:
                time.sleep(CHUNK_EVERY)
            streamer.append(markdown_text=text[at : at + CHUNK])
            if not paused and at + CHUNK >= len(text) / 2:
                # A tool call halfway through the answer.
                paused = True
                time.sleep(TOOL_PAUSE)
        streamer.stop()
    except SlackApiError as e:
        handled(f"error {ts} {e.response.get('error')}")
        return
    except Exception as e:  # noqa: BLE001 -- a bot that fails a turn keeps serving the next
        handled(f"error {ts} {type(e).__name__}")
        return
    handled(f"streamed {ts} {streamer.ts}")


@app.event("message")
def on_message(event, client, context):
    if event.get("subtype") not in (None, "thread_broadcast"):
        return
    stream_answer(event, client, context.team_id)


@app.event("app_mention")
def on_mention(event, client, context):
    stream_answer(event, client, context.team_id)


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


if __name__ == "__main__":
    server = make_server("127.0.0.1", PORT, SlackRequestHandler(app), server_class=ThreadingWSGIServer)
    print(f"LISTENING {server.server_port}", flush=True)
    logging.getLogger(__name__).info("Bolt for Python stream app on 127.0.0.1:%d (ack first: %s)", server.server_port, ACK_FIRST)
    server.serve_forever()
