// An unmodified Bolt for JavaScript bot in Socket Mode, put behind slackgate (its egress answers
// the bot's `apps.connections.open` with the gateway's own WebSocket) by the Socket Mode tests.
//
// It makes no network call of its own: a custom `authorize` answers for every workspace, so Bolt
// never calls auth.test, and its Web API client points at SLACK_API_URL, the gateway's egress.
// The App passes its `clientOptions` on to the SocketModeReceiver as
// `installerOptions.clientOptions`, so the receiver's `apps.connections.open` goes there too,
// with the app token.
//
// Environment: SLACK_APP_TOKEN (required, `xapp-…`), SLACK_API_URL (required; the egress base
// URL, e.g. `http://127.0.0.1:PORT/api/`), ANSWER (1, the default: answer an app_mention in its
// thread with `say()`; 0: no reply), SLOW_ONCE (seconds to hold the first delivery of each
// event_id before Bolt acks it, default 0: a bot that misses its ack once), THINK (seconds,
// default 0: answer at once with `say()`; above 0: post a placeholder `thinking about <ts>` in
// the thread, think that long, then `chat.update` it into `answer to <ts>`), SKIP_RETRIES (1:
// drop every delivery whose retry number is above 0, as many bots do).
//
// On stdout: `CONNECTED` each time the server's `hello` arrives on a socket (again after every
// reconnect), `DISCONNECT <reason>` for each `disconnect` message, and one `HANDLED …` line per
// listener run:
//   `HANDLED app_mention <event_id> <ts> retry=<retry_attempt, or ->` then `HANDLED replied <ts>`
//   (or `HANDLED reply_failed <ts> <error>`); with THINK, `HANDLED placeholder <ts> <its ts>`
//   then `HANDLED answered <ts> <its ts>`; `HANDLED skipped_retry <event_id> <retry>`;
//   `HANDLED message <ts>`; `HANDLED command /ask <text>`
//   (acked with the inline answer `{"text": "answer to <text>"}`); `HANDLED view form` (acked with
//   `{"response_action": "errors", …}`).
// Bolt's own logging goes to the console at INFO, as in app.js.

const { App, LogLevel } = require('@slack/bolt');

const APP_TOKEN = process.env.SLACK_APP_TOKEN;
const API_URL = process.env.SLACK_API_URL;
const ANSWER = (process.env.ANSWER || '1') === '1';
const SLOW_ONCE = Number(process.env.SLOW_ONCE || 0);
const THINK = Number(process.env.THINK || 0);
const SKIP_RETRIES = process.env.SKIP_RETRIES === '1';
const seen = new Set();
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

const line = (text) => process.stdout.write(`${text}\n`);
const handled = (text) => line(`HANDLED ${text}`);

const app = new App({
  socketMode: true,
  appToken: APP_TOKEN,
  // Bolt acks an event right after `authorize`, before any middleware: holding the first
  // delivery here is what delays its ack.
  authorize: async ({ teamId, enterpriseId }, body) => {
    const eventId = body?.event_id;
    if (SLOW_ONCE > 0 && eventId && !seen.has(eventId)) {
      seen.add(eventId);
      await sleep(SLOW_ONCE);
    }
    return { teamId, enterpriseId, botUserId: 'UBOT', botId: 'BBOT', botToken: 'xoxb-test' };
  },
  logLevel: LogLevel.INFO,
  // Only the Web API's base URL points the bot's client, and the socket's
  // apps.connections.open, elsewhere.
  clientOptions: { slackApiUrl: API_URL },
});

// As bots that must never answer twice do: Slack's retries are dropped unseen.
app.use(async ({ body, context, next }) => {
  if (SKIP_RETRIES && context.retryNum) {
    handled(`skipped_retry ${body.event_id} ${context.retryNum}`);
    return;
  }
  await next();
});

app.event('app_mention', async ({ body, event, say, context, client }) => {
  // Bolt puts the envelope's retry_attempt in context.retryNum (HTTP mode: X-Slack-Retry-Num).
  handled(`app_mention ${body.event_id} ${event.ts} retry=${context.retryNum ?? '-'}`);
  if (!ANSWER) {
    return;
  }
  try {
    if (THINK > 0) {
      // An AI bot's answer: a placeholder at once, the answer into it once thought through.
      const placeholder = await client.chat.postMessage({ channel: event.channel, thread_ts: event.ts, text: `thinking about ${event.ts}` });
      handled(`placeholder ${event.ts} ${placeholder.ts}`);
      await sleep(THINK);
      await client.chat.update({ channel: event.channel, ts: placeholder.ts, text: `answer to ${event.ts}` });
      handled(`answered ${event.ts} ${placeholder.ts}`);
      return;
    }
    await say({ text: `on it: ${event.text}`, thread_ts: event.ts });
  } catch (e) {
    handled(`reply_failed ${event.ts} ${e.data?.error ?? e.code ?? e.message}`);
    return;
  }
  handled(`replied ${event.ts}`);
});

app.message(async ({ message }) => {
  handled(`message ${message.ts}`);
});

app.command('/ask', async ({ ack, command }) => {
  // The ack carries the inline answer as its payload: {"text": "answer to …"}.
  await ack(`answer to ${command.text}`);
  handled(`command ${command.command} ${command.text}`);
});

app.view('form', async ({ ack }) => {
  await ack({ response_action: 'errors', errors: { field: 'too short' } });
  handled('view form');
});

// The receiver's SocketModeClient emits `connected` on each `hello`, and every raw frame as
// `ws_message` (a `disconnect` is handled inside the client and reaches no listener).
const socket = app.receiver.client;
socket.on('connected', () => line('CONNECTED'));
socket.on('ws_message', (data) => {
  try {
    const message = JSON.parse(typeof data === 'string' ? data : new TextDecoder().decode(data));
    if (message.type === 'disconnect') {
      line(`DISCONNECT ${message.reason}`);
    }
  } catch {
    // not JSON: the client ignores it too
  }
});

(async () => {
  await app.start();
  app.logger.info('Bolt for JavaScript app connected in Socket Mode');
})();
