// An unmodified Bolt for JavaScript bot that reads the thread before it answers, as an AI bot
// does, put behind slackgate (with its egress) by tests/it/replies_record.rs.
//
// It makes no network call of its own: a custom `authorize` answers for every workspace, and its
// Web API client (`conversations.replies`, `say()`) points at SLACK_API_URL, the gateway's
// egress. @slack/web-api retries a 429 after its Retry-After by default (a minute, at tier 1);
// `rejectRateLimitedCalls` makes a refused read reach the bot at once as the error it is, which
// is what the test tells apart from an answer from the record.
//
// Environment: SLACK_SIGNING_SECRET (required), SLACK_API_URL (required), PORT (default 3000; 0
// for any free port, printed as `LISTENING <port>` on stdout).
//
// A human `message` that mentions <@UBOT> gets its thread read with `conversations.replies`,
// then `context <n> <text of the thread's first message>` in the thread, and `HANDLED answered
// <ts> <n>` on stdout; when Slack refused the read (429): `no context <ts>` in the thread and
// `HANDLED ratelimited <ts>`. Every other message (no mention, an edit, a deletion) prints
// `HANDLED skipped <ts>` and gets no reply.

const { App, LogLevel } = require('@slack/bolt');

const PORT = Number(process.env.PORT || 3000);
const MENTION = '<@UBOT>';

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
  logLevel: LogLevel.INFO,
  // The Web API's base URL points the bot's client elsewhere; a 429 is not waited out.
  clientOptions: { slackApiUrl: process.env.SLACK_API_URL, rejectRateLimitedCalls: true },
});

app.event('message', async ({ event, say, client }) => {
  const { ts = '', text = '' } = event;
  if ((event.subtype !== undefined && event.subtype !== 'thread_broadcast') || !(text || '').includes(MENTION)) {
    handled(`skipped ${ts}`);
    return;
  }
  const thread = event.thread_ts || ts;
  let replies;
  try {
    replies = await client.conversations.replies({ channel: event.channel, ts: thread });
  } catch (error) {
    if (error.code === 'slack_webapi_rate_limited_error' || error.data?.error === 'ratelimited') {
      await say({ text: `no context ${ts}`, thread_ts: thread });
      handled(`ratelimited ${ts}`);
      return;
    }
    throw error;
  }
  const messages = replies.messages || [];
  const root = messages.length > 0 ? messages[0].text || '' : '';
  await say({ text: `context ${messages.length} ${root}`, thread_ts: thread });
  handled(`answered ${ts} ${messages.length}`);
});

(async () => {
  const server = await app.start({ port: PORT, host: '127.0.0.1' });
  const port = server.address().port;
  console.log(`LISTENING ${port}`);
  app.logger.info(`Bolt for JavaScript context app on 127.0.0.1:${port}`);
})();
