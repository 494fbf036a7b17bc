// An unmodified Bolt for JavaScript bot that streams its answer in thread with
// @slack/web-api's own helper, `client.chatStream({...})` (chat.startStream, chat.appendStream,
// chat.stopStream, its ChatStreamer's 256-character buffer), as an AI agent's model output would
// arrive: put in front of the fake Slack (tests/it/fake_stream_selftest.rs) or behind slackgate's
// egress.
//
// It makes no network call of its own: a custom `authorize` answers for every workspace, and its
// Web API client points at SLACK_API_URL.
//
// Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
// for any free port, printed as `LISTENING <port>` on stdout), ACK_FIRST (1, the default: Bolt's
// own ack-first, `processBeforeResponse: false`; 0: process before response), STATUS_FIRST (1:
// set the thread's status "is thinking…" with assistant.threads.setStatus first; default 0),
// THINK (seconds before the first piece, default 0), ANSWER_LEN (characters of the answer,
// default 600), CHUNK (characters a piece, default 40), CHUNK_EVERY (seconds between pieces,
// default 0.05), TOOL_PAUSE (seconds of a "tool call" once half the answer is out, default 0).
//
// The answer to the message at `ts` is `answer(ts, ANSWER_LEN)`: `answer to <ts>: ` then
// `0001 0002 0003 …`, cut at ANSWER_LEN characters, so a test can compute it.
//
// A human `message` (no subtype, or `thread_broadcast`) or an `app_mention` prints `HANDLED
// start <ts>`, streams the answer in its thread (`thread_ts`: the event's, else its ts), then
// prints `HANDLED streamed <ts> <stream_ts>`. When a Web API call fails it prints `HANDLED error
// <ts> <code>` (Slack's `error`, else the error's code or name) and the server goes on.

const { App, LogLevel } = require('@slack/bolt');

const PORT = Number(process.env.PORT || 3000);
const ACK_FIRST = (process.env.ACK_FIRST || '1') === '1';
const STATUS_FIRST = process.env.STATUS_FIRST === '1';
const THINK = Number(process.env.THINK || 0);
const ANSWER_LEN = Number(process.env.ANSWER_LEN || 600);
const CHUNK = Number(process.env.CHUNK || 40);
const CHUNK_EVERY = Number(process.env.CHUNK_EVERY || 0.05);
const TOOL_PAUSE = Number(process.env.TOOL_PAUSE || 0);
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

const handled = (line) => process.stdout.write(`HANDLED ${line}\n`);

// The whole answer to the message at `ts`: what the tests expect the stream to hold.
const answer = (ts, length) => {
  let text = `answer to ${ts}: `;
  for (let i = 1; text.length < length; i += 1) {
    text += `${String(i).padStart(4, '0')} `;
  }
  return text.slice(0, length);
};

const app = new App({
  signingSecret: process.env.SLACK_SIGNING_SECRET,
  authorize: async ({ teamId, enterpriseId }) => ({
    teamId,
    enterpriseId,
    botUserId: 'UBOT',
    botId: 'BBOT',
    botToken: 'xoxb-test',
  }),
  processBeforeResponse: !ACK_FIRST,
  logLevel: LogLevel.INFO,
  // Only the Web API's base URL points the bot's client elsewhere.
  clientOptions: { slackApiUrl: process.env.SLACK_API_URL },
});

const streamAnswer = async (event, client, teamId) => {
  const { ts, channel } = event;
  const threadTs = event.thread_ts || ts;
  handled(`start ${ts}`);
  let streamer;
  try {
    if (STATUS_FIRST) {
      await client.assistant.threads.setStatus({ channel_id: channel, thread_ts: threadTs, status: 'is thinking…' });
    }
    await sleep(THINK);
    streamer = client.chatStream({
      channel,
      thread_ts: threadTs,
      recipient_team_id: event.team || teamId,
      recipient_user_id: event.user,
    });
    const text = answer(ts, ANSWER_LEN);
    let paused = false;
    for (let at = 0; at < text.length; at += CHUNK) {
      if (at > 0) {
        await sleep(CHUNK_EVERY);
      }
      await streamer.append({ markdown_text: text.slice(at, at + CHUNK) });
      if (!paused && at + CHUNK >= text.length / 2) {
        // A tool call halfway through the answer.
        paused = true;
        await sleep(TOOL_PAUSE);
      }
    }
    await streamer.stop();
  } catch (error) {
    handled(`error ${ts} ${error.data?.error || error.code || error.name}`);
    return;
  }
  handled(`streamed ${ts} ${streamer.ts}`);
};

app.event('message', async ({ event, client, context }) => {
  if (event.subtype !== undefined && event.subtype !== 'thread_broadcast') {
    return;
  }
  await streamAnswer(event, client, context.teamId);
});

app.event('app_mention', async ({ event, client, context }) => {
  await streamAnswer(event, client, context.teamId);
});

(async () => {
  const server = await app.start({ port: PORT, host: '127.0.0.1' });
  const port = server.address().port;
  console.log(`LISTENING ${port}`);
  app.logger.info(`Bolt for JavaScript stream app on 127.0.0.1:${port} (ack first: ${ACK_FIRST})`);
})();
