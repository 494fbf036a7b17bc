// An unmodified Bolt for JavaScript app, put behind slackgate by tests/it/bolt.rs.
//
// It makes no network call: a custom `authorize` answers for every workspace, so Bolt never
// calls auth.test, and no listener uses the Web API or a response_url.
//
// Environment: SLACK_SIGNING_SECRET (required), PORT (default 3000; 0 for any free port, printed
// as `LISTENING <port>` on stdout), SLOW (seconds the
// app_mention listener sleeps before it finishes, default 0).
//
// Every accepted request that reaches a listener prints one `HANDLED …` line to stdout. Requests
// Bolt rejects (a bad signature gets 401) are logged by Bolt itself on stderr ("Failed to parse
// and verify the request data").
//
// Served by Bolt's default HTTPReceiver on 127.0.0.1:PORT, endpoint /slack/events.

const { App, LogLevel } = require('@slack/bolt');

const PORT = Number(process.env.PORT || 3000);
const SLOW = Number(process.env.SLOW || 0);
// Only the first run of each event is slow (a redelivery then answers in time).
const SLOW_ONCE = Number(process.env.SLOW_ONCE || 0);
// The Web API base URL (slackgate's egress); when set, app_mention is answered in its thread.
const API_URL = process.env.SLACK_API_URL;
const API_TIMEOUT_MS = Number(process.env.SLACK_API_TIMEOUT || 0) * 1000;
const seen = new Set();
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
  processBeforeResponse: true,
  logLevel: LogLevel.INFO,
  // Only the Web API's base URL (and a client timeout) point the bot's client elsewhere.
  ...(API_URL ? { clientOptions: { slackApiUrl: API_URL, timeout: API_TIMEOUT_MS } } : {}),
});

app.event('app_mention', async ({ event, say }) => {
  if (API_URL) {
    const reply = await say({ text: `on it: ${event.text}`, thread_ts: event.ts });
    handled(`replied ${event.ts}`);
    // @slack/web-api reads the token's scopes from Slack's answer headers.
    handled(`scopes ${(reply.response_metadata?.scopes ?? []).join(',')}`);
  }
  if (SLOW > 0) {
    await sleep(SLOW);
  }
  if (SLOW_ONCE > 0 && !seen.has(event.ts)) {
    seen.add(event.ts);
    await sleep(SLOW_ONCE);
  }
  handled(`app_mention ${event.ts} ${event.text}`);
});

app.message(async ({ message }) => {
  handled(`message ${message.ts}`);
});

app.command('/deploy', async ({ ack, command }) => {
  await ack(`deploying ${command.text}`);
  handled(`command ${command.command} ${command.text}`);
});

app.view('form', async ({ ack }) => {
  await ack({ response_action: 'errors', errors: { field: 'too short' } });
  handled('view_submission form');
});

app.options('picker', async ({ ack }) => {
  await ack({ options: [{ text: { type: 'plain_text', text: 'Alpha' }, value: 'a' }] });
  handled('block_suggestion picker');
});

app.action('button', async ({ ack }) => {
  await ack();
  handled('block_action');
});

(async () => {
  const server = await app.start({ port: PORT, host: '127.0.0.1' });
  // PORT=0 takes any free port: say which, for whoever started us.
  const port = server.address().port;
  console.log(`LISTENING ${port}`);
  app.logger.info(`Bolt for JavaScript app listening on 127.0.0.1:${port}/slack/events`);
})();
