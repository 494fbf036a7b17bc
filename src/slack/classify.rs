//! What a verified Slack request is, decided from its body (never from the path alone: Bolt apps
//! usually take events, commands and interactivity on one `/slack/events`), and the receipt key
//! that absorbs Slack's retries of it.

use std::borrow::Cow;

use serde_json::value::RawValue;
use serde_json::Value;

mod json;

/// The kinds of delivery that are recorded and forwarded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    #[default]
    Event,
    Command,
    Interactivity,
    /// Signed but of a shape we do not know: forwarded as is, never dropped.
    Opaque,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Event => "event",
            Kind::Command => "command",
            Kind::Interactivity => "interactivity",
            Kind::Opaque => "opaque",
        }
    }

    pub fn parse(s: &str) -> Kind {
        match s {
            "event" => Kind::Event,
            "command" => Kind::Command,
            "interactivity" => Kind::Interactivity,
            _ => Kind::Opaque,
        }
    }
}

/// A verified request, classified.
// One `Request` per HTTP request, moved straight into its handler: boxing the big variant
// would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// Answered by the gateway with the challenge; never stored.
    UrlVerification {
        challenge: String,
    },
    /// `ssl_check=1`: answered 200 by the gateway.
    SslCheck,
    /// Slack telling us it is dropping events for this app: acked and counted.
    RateLimited,
    Delivery(Delivery),
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    pub kind: Kind,
    /// What absorbs Slack's redeliveries of this delivery: `e:<event_id>`, `t:<trigger_id>`,
    /// or `h:<sha256 of the body>` for an event without an id or a shape we do not know (Slack
    /// redelivers those byte for byte). `None` for a command or interaction without a
    /// `trigger_id` (`block_suggestion`, `view_closed`, …): Slack never retries those, and the
    /// same body twice is a user acting twice — the same query typed again wants its options.
    pub receipt: Option<String>,
    /// The inner event type, the command, or the interaction type (`view_submission`, …).
    pub detail: String,
    /// The channel the event or interaction happened in, when it names one.
    pub channel: Option<String>,
    /// For `message` and `app_mention` events: what identifies the human message.
    pub message: Option<Message>,
    /// For the other events that name an assistant thread (`assistant_thread_started`,
    /// `assistant_thread_context_changed`): that thread.
    pub assistant_thread: Option<AssistantThread>,
    /// The user ids that `authorizations` marks as this app's bot.
    pub bot_users: Vec<String>,
    /// Where a slash command or interaction may still be answered later.
    pub response_url: Option<String>,
    /// The workspace it came from, when the body names one.
    pub team: Option<String>,
    /// Who acted (the message's author, the command's or interaction's user).
    pub user: Option<String>,
    /// Slack's `event_time` (seconds), for events.
    pub event_time: Option<u64>,
}

/// A message event, reduced to what dedupe, filters and cancellation need.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Message {
    pub team: String,
    pub channel: String,
    /// The human message's own `ts` (for `message_changed`, the edited message's; for
    /// `message_deleted`, the deleted one's).
    pub ts: String,
    /// `message_changed` only: the edit's own timestamp.
    pub edit_ts: Option<String>,
    /// The thread the message is in (its root's `ts`), when it is a reply (for an edit or a
    /// deletion, the changed message's thread).
    pub thread_ts: Option<String>,
    /// In a DM or group DM (`channel_type` `im`/`mpim`, or a `D…` channel).
    pub direct: bool,
    pub subtype: Option<String>,
    /// The author (for an edit, the edited message's author).
    pub user: Option<String>,
    pub bot_id: Option<String>,
    /// The text mentions one of `bot_users`.
    pub mentions_bot: bool,
    /// `message_changed` only: the text before the edit mentioned one of `bot_users`.
    pub previously_mentioned_bot: bool,
}

/// The thread of Slack's assistant container (`assistant_view`) an event is about: a thread of
/// the user's DM with the app, as its `assistant_thread` names it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AssistantThread {
    /// `assistant_thread.channel_id`: the DM.
    pub channel: String,
    /// `assistant_thread.thread_ts`: the thread's root.
    pub thread_ts: String,
    /// `assistant_thread.user_id`: the user who opened it.
    pub user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    #[error("body is not valid JSON")]
    BadJson,
    #[error("JSON body is not an object")]
    NotObject,
    #[error("form has neither `command` nor `payload`")]
    UnknownForm,
    #[error("`payload` is not a JSON object")]
    BadPayload,
}

/// Ids longer than this are hashed rather than used raw in a Redis key.
const MAX_ID_LEN: usize = 128;

type Object = serde_json::Map<String, Value>;

/// A string field, or `None` when it is missing or of another type (an unknown shape is
/// forwarded as opaque, never refused for a field's type).
fn text<'a>(object: &'a Object, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// Classify a body that has already passed the signature check.
pub fn classify(content_type: &[u8], body: &[u8]) -> Result<Request, ClassifyError> {
    if is_json(content_type, body) {
        classify_json(body)
    } else {
        classify_form(body)
    }
}

fn is_json(content_type: &[u8], body: &[u8]) -> bool {
    let ct = content_type.to_ascii_lowercase();
    if ct.starts_with(b"application/json") {
        return true;
    }
    if ct.starts_with(b"application/x-www-form-urlencoded") {
        return false;
    }
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn parse_object(bytes: &[u8]) -> Result<Object, ClassifyError> {
    // Checked first so that a huge array is refused without being parsed.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ClassifyError::NotObject);
    }
    // serde_json refuses more than 128 levels of nesting, so hostile depth cannot exhaust the
    // stack; the body cap bounds the memory.
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ClassifyError::NotObject),
        Err(_) => Err(ClassifyError::BadJson),
    }
}

fn classify_json(body: &[u8]) -> Result<Request, ClassifyError> {
    // Checked first so that a huge array is refused without being parsed.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ClassifyError::NotObject);
    }
    // serde_json refuses more than 128 levels of nesting, so hostile depth cannot exhaust the
    // stack; the body cap bounds the memory.
    let keys = ["type", "challenge", "event_id", "team_id", "event_time", "authorizations", "event"];
    let [kind, challenge, event_id, team_id, event_time, authorizations, event] =
        json::pick_body(body, &keys).map_err(|_| ClassifyError::BadJson)?;
    match json::string(kind).as_deref().unwrap_or("") {
        "url_verification" => Ok(Request::UrlVerification { challenge: json::owned(challenge).unwrap_or_default() }),
        "app_rate_limited" => Ok(Request::RateLimited),
        "event_callback" => {
            let receipt = match json::string(event_id) {
                Some(id) if !id.is_empty() => Some(id_key('e', &id)),
                _ => Some(body_key(body)),
            };
            let envelope = Envelope { team_id, event_time, authorizations, event };
            Ok(Request::Delivery(event_delivery(&envelope, receipt)))
        }
        other => Ok(Request::Delivery(Delivery {
            kind: Kind::Opaque,
            receipt: Some(body_key(body)),
            detail: other.to_string(),
            ..Delivery::default()
        })),
    }
}

fn classify_form(body: &[u8]) -> Result<Request, ClassifyError> {
    let mut command = None;
    let mut payload = None;
    let mut trigger_id = None;
    let mut ssl_check = false;
    let (mut channel, mut response_url, mut team, mut user) = (None, None, None, None);
    for (k, v) in form_urlencoded::parse(body) {
        match &*k {
            "command" => command = Some(v),
            "channel_id" => channel = Some(v),
            "team_id" => team = Some(v),
            "user_id" => user = Some(v),
            "response_url" => response_url = Some(v),
            "payload" => payload = Some(v),
            "trigger_id" => trigger_id = Some(v),
            "ssl_check" => ssl_check = v == "1",
            _ => {}
        }
    }
    if ssl_check {
        return Ok(Request::SslCheck);
    }
    if let Some(command) = command {
        let receipt = trigger_id.filter(|t| !t.is_empty()).map(|t| id_key('t', &t));
        return Ok(Request::Delivery(Delivery {
            kind: Kind::Command,
            receipt,
            detail: command.into_owned(),
            channel: channel.map(Cow::into_owned),
            response_url: response_url.map(Cow::into_owned),
            team: team.map(Cow::into_owned),
            user: user.map(Cow::into_owned),
            ..Delivery::default()
        }));
    }
    let payload = payload.ok_or(ClassifyError::UnknownForm)?;
    let inner = parse_object(payload.as_bytes()).map_err(|_| ClassifyError::BadPayload)?;
    let receipt = text(&inner, "trigger_id").filter(|t| !t.is_empty()).map(|t| id_key('t', t));
    let detail = text(&inner, "type").unwrap_or_default().to_string();
    let response_url = text(&inner, "response_url")
        .or_else(|| inner.get("response_urls")?.get(0)?.get("response_url")?.as_str())
        .map(String::from);
    let id_of = |k: &str| inner.get(k).and_then(|c| c.get("id")).and_then(Value::as_str).map(String::from);
    Ok(Request::Delivery(Delivery {
        kind: Kind::Interactivity,
        receipt,
        detail,
        channel: id_of("channel"),
        response_url,
        team: id_of("team"),
        user: id_of("user"),
        ..Delivery::default()
    }))
}

/// The fields of an `event_callback` envelope that classification reads (raw JSON).
struct Envelope<'a> {
    team_id: Option<&'a RawValue>,
    event_time: Option<&'a RawValue>,
    authorizations: Option<&'a RawValue>,
    event: Option<&'a RawValue>,
}

/// The fields of an event that classification reads, by name; [`ev`] names their places.
const EVENT_KEYS: [&str; 15] = [
    "type",
    "channel",
    "item",
    "user",
    "team",
    "subtype",
    "text",
    "channel_type",
    "ts",
    "thread_ts",
    "bot_id",
    "deleted_ts",
    "message",
    "previous_message",
    "assistant_thread",
];

/// The places of [`EVENT_KEYS`].
mod ev {
    pub const TYPE: usize = 0;
    pub const CHANNEL: usize = 1;
    pub const ITEM: usize = 2;
    pub const USER: usize = 3;
    pub const TEAM: usize = 4;
    pub const SUBTYPE: usize = 5;
    pub const TEXT: usize = 6;
    pub const CHANNEL_TYPE: usize = 7;
    pub const TS: usize = 8;
    pub const THREAD_TS: usize = 9;
    pub const BOT_ID: usize = 10;
    pub const DELETED_TS: usize = 11;
    pub const MESSAGE: usize = 12;
    pub const PREVIOUS_MESSAGE: usize = 13;
    pub const ASSISTANT_THREAD: usize = 14;
}

/// An event's fields, in the order of [`EVENT_KEYS`].
struct Event<'a>([Option<&'a RawValue>; 15]);

impl<'a> Event<'a> {
    fn text(&self, field: usize) -> Option<Cow<'a, str>> {
        json::string(self.0[field])
    }

    /// An inner message (`message`, `previous_message`): its ts, thread, author, bot and text.
    fn inner(&self, field: usize) -> Option<Inner<'a>> {
        json::pick(self.0[field]?.get(), &["ts", "thread_ts", "user", "bot_id", "text"]).map(Inner)
    }

    /// `assistant_thread`, when it names both its channel and its thread.
    fn assistant_thread(&self) -> Option<AssistantThread> {
        let [channel, thread_ts, user] =
            json::pick(self.0[ev::ASSISTANT_THREAD]?.get(), &["channel_id", "thread_ts", "user_id"])?;
        Some(AssistantThread {
            channel: json::owned(channel)?,
            thread_ts: json::owned(thread_ts)?,
            user: json::owned(user),
        })
    }
}

struct Inner<'a>([Option<&'a RawValue>; 5]);

impl<'a> Inner<'a> {
    fn text(&self, i: usize) -> Option<Cow<'a, str>> {
        json::string(self.0[i])
    }
}

/// An `event_callback`: its type, channel, bot users and, for messages, the message identity.
fn event_delivery(env: &Envelope<'_>, receipt: Option<String>) -> Delivery {
    let event = env.event.and_then(|e| json::pick(e.get(), &EVENT_KEYS)).map(Event);
    let field = |k: usize| event.as_ref().and_then(|e| e.text(k)).map(Cow::into_owned);
    let detail = field(ev::TYPE).unwrap_or_default();
    let item_channel = || {
        let item = event.as_ref()?.0[ev::ITEM]?;
        let [channel] = json::pick(item.get(), &["channel"])?;
        json::owned(channel)
    };
    let is_message = matches!(detail.as_str(), "message" | "app_mention");
    // A message names its own channel and thread; other events of an assistant thread name
    // them in `assistant_thread` (where Bolt's `extractEventChannelId` looks last, too).
    let assistant_thread = event.as_ref().filter(|_| !is_message).and_then(Event::assistant_thread);
    let channel =
        field(ev::CHANNEL).or_else(item_channel).or_else(|| assistant_thread.as_ref().map(|a| a.channel.clone()));
    let bot_users: Vec<String> = json::elements(env.authorizations)
        .into_iter()
        .filter_map(|a| json::pick(a.get(), &["is_bot", "user_id"]))
        .filter(|[is_bot, _]| json::boolean(*is_bot) == Some(true))
        .filter_map(|[_, user_id]| json::owned(user_id))
        .collect();
    let team = json::owned(env.team_id);
    let message = match &event {
        Some(e) if is_message => message_of(team.as_deref(), e, &bot_users),
        _ => None,
    };
    let user = field(ev::USER)
        .or_else(|| message.as_ref().and_then(|m| m.user.clone()))
        .or_else(|| assistant_thread.as_ref().and_then(|a| a.user.clone()));
    let event_time = json::unsigned(env.event_time);
    Delivery {
        kind: Kind::Event,
        receipt,
        detail,
        channel,
        message,
        assistant_thread,
        bot_users,
        response_url: None,
        team,
        user,
        event_time,
    }
}

fn message_of(team_id: Option<&str>, event: &Event<'_>, bot_users: &[String]) -> Option<Message> {
    let owned = |v: Option<Cow<'_, str>>| v.map(Cow::into_owned);
    let team = event.text(ev::TEAM).as_deref().or(team_id).unwrap_or_default().to_string();
    let channel = event.text(ev::CHANNEL)?.into_owned();
    let subtype = owned(event.text(ev::SUBTYPE));
    let mentions = |text: Option<Cow<'_, str>>| {
        let t = text.unwrap_or_default();
        bot_users.iter().any(|u| t.contains(&format!("<@{u}>")))
    };
    let direct = matches!(event.text(ev::CHANNEL_TYPE).as_deref(), Some("im" | "mpim")) || channel.starts_with('D');
    let mut m = Message { team, channel, subtype: subtype.clone(), direct, ..Message::default() };
    // An inner message's fields, by position: ts, thread_ts, user, bot_id, text.
    let (ts, thread_ts, user, bot_id, text) = (0, 1, 2, 3, 4);
    match subtype.as_deref() {
        Some("message_changed") => {
            let edited = event.inner(ev::MESSAGE)?;
            m.ts = edited.text(ts)?.into_owned();
            m.thread_ts = owned(edited.text(thread_ts));
            m.edit_ts = owned(event.text(ev::TS));
            m.user = owned(edited.text(user));
            m.bot_id = owned(edited.text(bot_id));
            m.mentions_bot = mentions(edited.text(text));
            m.previously_mentioned_bot = event.inner(ev::PREVIOUS_MESSAGE).is_some_and(|p| mentions(p.text(text)));
        }
        Some("message_deleted") => {
            let previous = event.inner(ev::PREVIOUS_MESSAGE);
            let deleted = event.text(ev::DELETED_TS).or_else(|| previous.as_ref().and_then(|p| p.text(ts)));
            m.ts = deleted?.into_owned();
            m.thread_ts = previous.and_then(|p| owned(p.text(thread_ts)));
        }
        _ => {
            m.ts = event.text(ev::TS)?.into_owned();
            m.thread_ts = owned(event.text(ev::THREAD_TS));
            m.user = owned(event.text(ev::USER));
            m.bot_id = owned(event.text(ev::BOT_ID));
            m.mentions_bot = mentions(event.text(ev::TEXT));
        }
    }
    Some(m)
}

fn id_key(tag: char, id: &str) -> String {
    if id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic()) {
        format!("{tag}:{id}")
    } else {
        format!("{tag}#{}", super::digest(id.as_bytes()))
    }
}

fn body_key(body: &[u8]) -> String {
    format!("h:{}", super::digest(body))
}

#[cfg(test)]
mod tests;
