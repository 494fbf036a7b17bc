"""An example Bolt for Python bot for deploy/docker/docker-compose.yml: plain Bolt, nothing
slackgate-specific. slackgate forwards Slack's requests to it at http://bot:3000/slack/events,
signed with the same signing secret, so Bolt's own signature check stays on.

Environment: SLACK_SIGNING_SECRET (the Slack app's Signing Secret, the same one slackgate
has) and SLACK_BOT_TOKEN (its Bot User OAuth Token, xoxb-...). At start Bolt calls auth.test
with the token, so the container needs the Slack API on the internet and a valid token.
"""

import logging
import os

from slack_bolt import App

logging.basicConfig(level=logging.INFO)

app = App(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    token=os.environ["SLACK_BOT_TOKEN"],
)


@app.event("app_mention")
def on_app_mention(event, say):
    # Answer in the thread of the message that mentioned the bot.
    thread = event.get("thread_ts") or event["ts"]
    say(text=f"Hi <@{event['user']}>, I got your message.", thread_ts=thread)


@app.command("/hello")
def on_hello(ack):
    # The command's immediate reply: slackgate passes it back to Slack when it comes within
    # its inline budget (inline.command, 2.5 s by default).
    ack("hello")


if __name__ == "__main__":
    # Bolt's built-in HTTP server: 0.0.0.0:3000, path /slack/events. It handles one request at
    # a time, which is enough for an example; serve a real bot with a WSGI/ASGI server.
    app.start(port=3000)
