//! A delivery's page, when the app's shadow got a copy of it: the live bot's answers and the
//! shadow's side by side (each one's first answer after the delivery arrived, writes, methods,
//! bytes, and with `show_text` the first answer's text), and the shadow's own delivery.

use super::view::Context;
use super::Failure;
use crate::history::query;

/// The live bot's and its shadow's answers to one delivery: what each wrote, how much, and
/// how long after the delivery arrived each first answered.
pub struct SideBySide {
    pub copy: String,
    /// The shadow's own delivery: its status and attempts (its lane's history).
    pub shadow_delivery: String,
    pub live: Answers,
    pub shadow: Answers,
}

#[derive(Default)]
pub struct Answers {
    pub writes: usize,
    pub methods: String,
    pub bytes: u64,
    pub first: String,
    /// The first write's text, when the history kept it (`show_text` on).
    pub text: String,
}

impl Answers {
    fn of<'a>(writes: impl Iterator<Item = &'a serde_json::Value>, received: u64) -> Answers {
        let (mut n, mut methods, mut bytes, mut first) = (0, Vec::<String>::new(), 0, None);
        let mut text = String::new();
        for w in writes {
            n += 1;
            let method = w["method"].as_str().unwrap_or_default().to_string();
            if !methods.contains(&method) {
                methods.push(method);
            }
            bytes += w["bytes"].as_u64().unwrap_or(0);
            first = first.or(w["at"].as_u64());
            if text.is_empty() {
                text = w["text"].as_str().unwrap_or_default().to_string();
            }
        }
        let first = first.map_or_else(|| "no answer".into(), |at| format!("after {} ms", at.saturating_sub(received)));
        Answers { writes: n, methods: methods.join(", "), bytes, first, text }
    }
}

/// Both answers, when the delivery was copied to the app's shadow.
pub async fn of(ctx: &Context<'_>, app: &str, d: &query::Detail) -> Result<Option<SideBySide>, Failure> {
    let copy = d.summary.get("shadow");
    if copy.is_empty() {
        return Ok(None);
    }
    let wrote = |shadow: bool| {
        d.timeline.iter().filter(move |e| {
            let outcome = e["outcome"].as_str().unwrap_or_default();
            e["what"] == "wrote"
                && (outcome == crate::history::SHADOW_KEPT) == shadow
                && (shadow || crate::history::fields::answers(outcome))
        })
    };
    let received = d.summary.received();
    let config = ctx.ops.config();
    let lane = crate::config::shadow_lane_name(app);
    let mut conn = ctx.ops.conn();
    let shadow =
        query::show(&mut conn, &config.redis.key_prefix, &lane, &d.summary.id).await.map_err(Failure::redis)?;
    let shadow_delivery = shadow.map_or_else(
        || "not yet sent to the shadow".to_string(),
        |s| format!("{} after {} attempt(s)", s.summary.get("status"), s.summary.get("attempts")),
    );
    Ok(Some(SideBySide {
        copy: copy.to_string(),
        shadow_delivery,
        live: Answers::of(wrote(false), received),
        shadow: Answers::of(wrote(true), received),
    }))
}
