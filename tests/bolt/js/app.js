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
});

app.event('app_mention', async ({ event }) => {
  if (SLOW > 0) {
    await new Promise((resolve) => setTimeout(resolve, SLOW * 1000));
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
