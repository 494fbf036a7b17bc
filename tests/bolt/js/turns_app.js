// An unmodified Bolt for JavaScript bot that answers in thread after a "model call", put behind
// slackgate (with its egress) by tests/it/turns.rs.
//
// It makes no network call of its own: a custom `authorize` answers for every workspace, and its
// Web API client (`say()`, `chat.update`) points at SLACK_API_URL, the gateway's egress.
//
// Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
// for any free port, printed as `LISTENING <port>` on stdout), ACK_FIRST (1, the default: Bolt's
// own ack-first, `processBeforeResponse: false`; 0: process before response), ANSWER_DELAY
// (seconds the "model call" takes, default 1).
//
// A human `message` prints `HANDLED start <ts> <text>`, waits ANSWER_DELAY, replies with `say()`
// in its thread (in a DM without a thread: in the channel, no `thread_ts`), then prints
// `HANDLED answered <ts>`, or `HANDLED withheld <ts>` when the Web API answered
// `{"ok": false, "error": "superseded"}`. A text with "ignore" gets no reply (`HANDLED ignored
// <ts>`); one with "stall" gets a placeholder (`HANDLED stalling <ts>`) that is edited every
// second for ten minutes: a bot stuck mid-turn that keeps writing.

const { App, LogLevel } = require('@slack/bolt');

const PORT = Number(process.env.PORT || 3000);
const ACK_FIRST = (process.env.ACK_FIRST || '1') === '1';
const ANSWER_DELAY = Number(process.env.ANSWER_DELAY || 1);
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

const handled = (line) => process.stdout.write(`HANDLED ${line}\n`);

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

app.event('message', async ({ event, say, client }) => {
  if (event.subtype !== undefined && event.subtype !== 'thread_broadcast') {
    return;
  }
  const { ts, text = '' } = event;
  handled(`start ${ts} ${text}`);
  if (text.includes('ignore')) {
    handled(`ignored ${ts}`);
    return;
  }
  // A DM's top-level message is answered in the channel, the rest in the thread.
  const inDm = event.channel_type === 'im' && !event.thread_ts;
  const where = inDm ? {} : { thread_ts: event.thread_ts || ts };
  if (text.includes('stall')) {
    const placeholder = await say({ text: `thinking about ${ts}`, ...where });
    handled(`stalling ${ts}`);
    for (let i = 1; i <= 600; i += 1) {
      await sleep(1);
      await client.chat.update({ channel: event.channel, ts: placeholder.ts, text: `still thinking (${i} s)` });
    }
    return;
  }
  await sleep(ANSWER_DELAY);
  try {
    await say({ text: `answer to ${ts}`, ...where });
  } catch (error) {
    if (error.data?.error === 'superseded') {
      handled(`withheld ${ts}`);
      return;
    }
    throw error;
  }
  handled(`answered ${ts}`);
});

(async () => {
  const server = await app.start({ port: PORT, host: '127.0.0.1' });
  const port = server.address().port;
  console.log(`LISTENING ${port}`);
  app.logger.info(`Bolt for JavaScript turns app on 127.0.0.1:${port} (ack first: ${ACK_FIRST})`);
})();
