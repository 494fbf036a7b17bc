//! Operator actions, shared by the CLI (`slackgate stats`, `slackgate dlq …`) and the admin
//! API: outbox counts per app, and the dead letters — list, show, replay, purge.

use std::sync::Arc;

use serde::Serialize;

use crate::clock::now_ms;
use crate::config::{AppConfig, Config};
use crate::outbox::{self, DeadLetter, OutboxStats, ShardKeys, Store, StoreError};
use crate::pauses::{Pause, ANY};

#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error("no app named `{0}` in the config")]
    UnknownApp(String),
    #[error("the config has several apps: name one with --app")]
    AppRequired,
    #[error("`{0}` is not a delivery id (they look like 0-1a2b3c4d5e6f7a8b)")]
    BadId(String),
    #[error("delivery {0} is not in the dead-letter stream")]
    NotDead(String),
    #[error("`{0}` is not a cursor of the egress's notes (they look like 1700000000000-0)")]
    BadCursor(String),
    #[error("{0}")]
    BadScope(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The shard of a delivery id (`<shard>-<hex>`), when it is one.
pub fn shard_of(id: &str) -> Option<u16> {
    id.split_once('-')
        .filter(|(_, hex)| !hex.is_empty() && hex.len() <= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|(s, _)| s.parse::<u16>().ok())
        .filter(|s| *s < 1024)
}

/// Whether `id` is a delivery id (`<shard>-<hex>`).
pub fn looks_like_id(id: &str) -> bool {
    shard_of(id).is_some()
}

/// What a pause or resume names: an app (the only one when `None`), and a team or channel of
/// it (`None`: any).
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    pub app: Option<&'a str>,
    pub team: Option<&'a str>,
    pub channel: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct AppStats {
    pub app: String,
    #[serde(flatten)]
    pub stats: OutboxStats,
}

/// What a redelivery sends again (from the delivery history).
pub struct Redelivery<'a> {
    pub body: &'a [u8],
    pub path: &'a str,
    pub content_type: &'a str,
    pub kind: &'a str,
    pub detail: &'a str,
}

/// One page of each list the egress keeps for a day (at most 1,000 notes each), newest first.
#[derive(Debug, Serialize)]
pub struct EgressNotes {
    pub withheld: Vec<serde_json::Value>,
    pub unknown: Vec<serde_json::Value>,
    pub withheld_total: u64,
    pub unknown_total: u64,
    /// The cursor of the next (older) page of each list, when there is one.
    pub withheld_next: Option<String>,
    pub unknown_next: Option<String>,
}

/// Which page of the egress's notes to read: `limit` per list (100 unless said, at most
/// 1,000), each list from its cursor (a `…_next` of an earlier page) or from the newest.
#[derive(Debug, Default)]
pub struct NotesQuery {
    pub limit: Option<usize>,
    pub withheld_cursor: Option<String>,
    pub unknown_cursor: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AppSuperseded {
    pub app: String,
    #[serde(flatten)]
    pub entry: crate::outbox::Superseded,
}

#[derive(Debug, Serialize)]
pub struct AppDeadLetter {
    pub app: String,
    #[serde(flatten)]
    pub letter: DeadLetter,
}

/// One dead letter in full, body included (what an operator needs before a replay).
#[derive(Debug, Serialize)]
pub struct DeadDetail {
    pub app: String,
    pub delivery: String,
    pub kind: String,
    pub detail: String,
    pub path: String,
    pub content_type: String,
    pub received_ms: u64,
    pub attempts: u64,
    pub last_status: Option<u16>,
    pub last_error: String,
    pub body: String,
}

pub struct Ops {
    config: Arc<Config>,
    store: Store,
    /// The egress's notes of withheld and unknown writes.
    notes: outbox::Notes,
}

impl Ops {
    pub fn new(config: Arc<Config>, store: Store, notes: outbox::Notes) -> Self {
        Ops { config, store, notes }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The connection the outbox uses, for the delivery history's reads.
    pub fn conn(&self) -> crate::store::Conn {
        self.store.conn()
    }

    /// The named app, or the only one.
    pub fn app(&self, name: Option<&str>) -> Result<&Arc<AppConfig>, OpsError> {
        match name {
            Some(n) => self.config.apps.iter().find(|a| a.name == n).ok_or_else(|| OpsError::UnknownApp(n.into())),
            None if self.config.apps.len() == 1 => Ok(&self.config.apps[0]),
            None => Err(OpsError::AppRequired),
        }
    }

    fn apps(&self, name: Option<&str>) -> Result<Vec<&Arc<AppConfig>>, OpsError> {
        match name {
            Some(_) => Ok(vec![self.app(name)?]),
            None => Ok(self.config.apps.iter().collect()),
        }
    }

    /// Every shard the app's deliveries may be in (more than configured after `shards` was
    /// lowered: the old ones are drained, and the tools see them until they are).
    async fn shards(&self, app: &AppConfig) -> Result<Vec<ShardKeys>, OpsError> {
        let (prefix, n) = (&self.config.redis.key_prefix, self.config.redis.shards);
        let in_use = self.store.shards_in_use(prefix, &app.name, n, false).await?;
        Ok((0..in_use).map(|i| ShardKeys::new(prefix, &app.name, i)).collect())
    }

    /// Every pause in force, of every app.
    pub async fn pauses(&self) -> Result<Vec<Pause>, OpsError> {
        Ok(self.store.pauses(&self.config.redis.key_prefix).await?)
    }

    /// Pause `app` (its `team`, its `channel`; `None` for any) as `by`: the pause, and whether
    /// it is new (a pause of that scope posted twice acts once: the first stays).
    pub async fn pause(&self, scope: Scope<'_>, by: &str) -> Result<(Pause, bool), OpsError> {
        let (app, team, channel) = self.scope(scope)?;
        let by: String = by.chars().filter(|c| !c.is_control()).take(64).collect();
        let p = Pause { app, team, channel, by, at_ms: now_ms() };
        let new = self.store.pause(&self.config.redis.key_prefix, &p).await?;
        if !new {
            let now = self.pauses().await?;
            let first = now.into_iter().find(|q| (&q.app, &q.team, &q.channel) == (&p.app, &p.team, &p.channel));
            return Ok((first.unwrap_or(p), false));
        }
        tracing::info!(target: "slackgate::audit", app = %p.app, team = %p.team, channel = %p.channel, by = %p.by, "pause");
        Ok((p, true))
    }

    /// End the pause of that scope: the pause it ended (`None`: there was none). What it held
    /// is delivered within a few seconds, by whichever gateway's workers look first.
    pub async fn resume(&self, scope: Scope<'_>, by: &str) -> Result<Option<Pause>, OpsError> {
        let (app, team, channel) = self.scope(scope)?;
        let ended = self.store.resume(&self.config.redis.key_prefix, &app, &team, &channel).await?;
        if let Some(p) = &ended {
            tracing::info!(target: "slackgate::audit", app = %p.app, team = %p.team, channel = %p.channel, by, paused_by = %p.by, "resume");
        }
        Ok(ended)
    }

    /// A scope checked: an app of the config, and ids that are ids.
    fn scope(&self, s: Scope<'_>) -> Result<(String, String, String), OpsError> {
        let app = self.app(s.app)?.name.clone();
        let part = |name: &str, v: Option<&str>| -> Result<String, OpsError> {
            match v.map(str::trim) {
                None | Some("") | Some(ANY) => Ok(ANY.into()),
                Some(v) if v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') => {
                    Ok(v.into())
                }
                Some(v) => Err(OpsError::BadScope(format!("`{v}` is not a Slack {name} id"))),
            }
        };
        Ok((app, part("team", s.team)?, part("channel", s.channel)?))
    }

    /// A delivery id starts with its shard: `<shard>-<hex>`.
    fn shard_keys(&self, app: &AppConfig, id: &str) -> Result<ShardKeys, OpsError> {
        let shard = shard_of(id).ok_or_else(|| OpsError::BadId(id.into()))?;
        Ok(ShardKeys::new(&self.config.redis.key_prefix, &app.name, shard))
    }

    pub fn egress_enabled(&self) -> bool {
        self.config.egress.listen.is_some()
    }

    /// The egress's notes of the last day, a page of each: writes withheld (their source was
    /// deleted or edited) and writes whose outcome is unknown.
    pub async fn egress_notes(&self, q: &NotesQuery) -> Result<EgressNotes, OpsError> {
        use crate::outbox::NoteList;
        for c in [&q.withheld_cursor, &q.unknown_cursor].into_iter().flatten() {
            if !outbox::is_cursor(c) {
                return Err(OpsError::BadCursor(c.clone()));
            }
        }
        let notes = &self.notes;
        let (now, limit) = (now_ms(), q.limit.unwrap_or(100));
        let withheld = notes.page(NoteList::Withheld, limit, q.withheld_cursor.as_deref(), now).await?;
        let unknown = notes.page(NoteList::Unknown, limit, q.unknown_cursor.as_deref(), now).await?;
        Ok(EgressNotes {
            withheld: withheld.notes,
            unknown: unknown.notes,
            withheld_total: withheld.total,
            unknown_total: unknown.total,
            withheld_next: withheld.next,
            unknown_next: unknown.next,
        })
    }

    pub async fn stats(&self, app: Option<&str>) -> Result<Vec<AppStats>, OpsError> {
        let mut out = Vec::new();
        for a in self.apps(app)? {
            let stats = outbox::app_stats(&self.store, &self.shards(a).await?, now_ms()).await?;
            out.push(AppStats { app: a.name.clone(), stats });
        }
        Ok(out)
    }

    /// The newest `limit` deliveries `order = "latest"` passed over, of each app (of one,
    /// with `app`), newest first.
    pub async fn superseded(&self, app: Option<&str>, limit: usize) -> Result<Vec<AppSuperseded>, OpsError> {
        let mut out = Vec::new();
        for a in self.apps(app)? {
            for keys in self.shards(a).await? {
                for entry in self.store.superseded(&keys, limit).await? {
                    out.push(AppSuperseded { app: a.name.clone(), entry });
                }
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.entry.at_ms));
        out.truncate(limit);
        Ok(out)
    }

    /// The oldest `limit` dead letters of each app (of one, with `app`).
    pub async fn list(&self, app: Option<&str>, limit: usize) -> Result<Vec<AppDeadLetter>, OpsError> {
        let mut out = Vec::new();
        for a in self.apps(app)? {
            for keys in self.shards(a).await? {
                for letter in self.store.dead_letters(&keys, limit).await? {
                    out.push(AppDeadLetter { app: a.name.clone(), letter });
                }
            }
        }
        out.sort_by_key(|d| d.letter.parked_ms);
        out.truncate(limit);
        Ok(out)
    }

    pub async fn show(&self, app: Option<&str>, id: &str) -> Result<DeadDetail, OpsError> {
        let a = self.app(app)?;
        let keys = self.shard_keys(a, id)?;
        let d = self.store.load(&keys, id).await?.filter(|d| d.dead).ok_or_else(|| OpsError::NotDead(id.into()))?;
        Ok(DeadDetail {
            app: a.name.clone(),
            delivery: id.into(),
            kind: d.kind.as_str().into(),
            detail: d.detail,
            path: d.path,
            content_type: d.content_type,
            received_ms: d.received_ms,
            attempts: d.retries,
            last_status: d.last_status,
            last_error: d.last_error,
            body: String::from_utf8_lossy(&d.body).into_owned(),
        })
    }

    /// Put one dead letter back on the outbox, with a fresh give-up window.
    pub async fn replay(&self, app: Option<&str>, id: &str) -> Result<(), OpsError> {
        let a = self.app(app)?;
        let keys = self.shard_keys(a, id)?;
        match self.store.replay(&keys, id, now_ms()).await? {
            true => Ok(()),
            false => Err(OpsError::NotDead(id.into())),
        }
    }

    /// Send a delivery the bot already had to it again, as a new delivery on the same shard
    /// (no receipt or message claim: it is the operator's, not Slack's); its id.
    pub async fn redeliver(&self, app: &str, id: &str, again: Redelivery<'_>) -> Result<String, OpsError> {
        let a = self.app(Some(app))?;
        let keys = self.shard_keys(a, id)?;
        let shard = id.split_once('-').map_or("0", |(s, _)| s);
        // An operator's delivery is always kept in the history.
        let new_id = format!("{shard}-{:016x}", rand::random::<u64>() | crate::history::KEPT);
        let new = outbox::NewDelivery {
            id: &new_id,
            receipt: None,
            body: again.body,
            content_type: again.content_type.as_bytes(),
            path: again.path,
            kind: crate::slack::Kind::parse(again.kind),
            received_ms: now_ms(),
            ttl: a.receipt_ttl,
            placement: outbox::Placement::Stream,
            claim: None,
            cancel: None,
            detail: again.detail,
            response_url: "",
            conversation: "",
            carry: !a.turns.is_on(),
        };
        self.store.record(&keys, &new).await?;
        Ok(new_id)
    }

    pub async fn purge(&self, app: Option<&str>, id: &str) -> Result<(), OpsError> {
        let a = self.app(app)?;
        let keys = self.shard_keys(a, id)?;
        match self.store.purge(&keys, id).await? {
            true => Ok(()),
            false => Err(OpsError::NotDead(id.into())),
        }
    }

    /// Replay every dead letter of one app that was dead when this started; `progress(done,
    /// total)`. Letters that die again meanwhile are not read again, so it always ends.
    pub async fn replay_all(&self, app: Option<&str>, progress: impl FnMut(u64, u64)) -> Result<BulkCount, OpsError> {
        self.all(app, Bulk::Replay, progress).await
    }

    /// Purge every dead letter of one app that was dead when this started.
    pub async fn purge_all(&self, app: Option<&str>, progress: impl FnMut(u64, u64)) -> Result<BulkCount, OpsError> {
        self.all(app, Bulk::Purge, progress).await
    }

    async fn all(
        &self,
        app: Option<&str>,
        how: Bulk,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<BulkCount, OpsError> {
        let a = self.app(app)?;
        let total = outbox::app_stats(&self.store, &self.shards(a).await?, now_ms()).await?.dead;
        let mut count = BulkCount::default();
        for keys in self.shards(a).await? {
            // The snapshot: the newest letter now. Anything parked after it is not ours.
            let Some(last) = self.store.dead_snapshot(&keys).await? else { continue };
            let mut after: Option<String> = None;
            loop {
                let batch = self.store.dead_letters_between(&keys, after.as_deref(), &last, 500).await?;
                let Some(end) = batch.last().map(|l| l.entry.clone()) else { break };
                for letter in batch {
                    let ok = match how {
                        Bulk::Purge => self.store.purge(&keys, &letter.delivery).await?,
                        Bulk::Replay => self.store.replay(&keys, &letter.delivery, now_ms()).await?,
                    };
                    if ok {
                        count.done += 1;
                    } else {
                        // A dead-letter entry whose delivery is gone: drop the stale entry.
                        self.store.drop_dead_entry(&keys, &letter.entry).await?;
                        count.skipped += 1;
                    }
                    progress(count.done + count.skipped, total.max(count.done + count.skipped));
                }
                after = Some(end);
            }
        }
        Ok(count)
    }
}

#[derive(Debug, Clone, Copy)]
enum Bulk {
    Replay,
    Purge,
}

/// What a replay-all or purge-all did: letters acted on, and stale entries dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BulkCount {
    pub done: u64,
    pub skipped: u64,
}
