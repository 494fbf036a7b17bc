//! Turns (`turns` of the app a write's source was delivered to): a write of a conversation's
//! turn renews it, or ends it (`chat.stopStream`); with `on_newer = "withhold"` a new post of a
//! turn whose conversation has a newer message waiting is withheld — the newer question is about
//! to be answered with the whole thread in view — and that ends the turn. An update or append
//! to a message already posted always goes (never a half-answer), and so does every write the
//! store cannot judge: when unsure, post. A run the app tracks (`rerun_lost`) with no order is
//! watched the same way, as a turn of its own that holds nothing back.

use tracing::{debug, info};

use super::ctx::Ctx;
use super::model::error::Error;
use super::model::{Attributed, Gone, Reply, Target, Write};
use super::plan;
use super::store::EgressStore;
use crate::clock::now_ms;
use crate::config::Order;
use crate::outbox::{TurnWrite, WriteKind};

/// The write's step in its turn; `Some` with the answer when it is withheld.
pub(super) async fn turn(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write) -> Option<Reply> {
    let source = to.source.as_ref()?;
    let kind = plan::turn_write(&w.call.method, w.call.fields.status.as_deref())?;
    step(ctx, store, source, kind, w).await
}

/// The gateway closed the stream of `source`'s answer (its question is gone): its turn ends
/// as a stop would end it.
pub(super) async fn closed(ctx: &Ctx, store: &EgressStore, source: &Attributed, w: &Write) {
    step(ctx, store, source, WriteKind::Close, w).await;
}

/// A write of `kind` in the turn of `source`'s conversation.
async fn step(ctx: &Ctx, store: &EgressStore, source: &Attributed, kind: WriteKind, w: &Write) -> Option<Reply> {
    if source.conversation.is_empty() {
        return None;
    }
    let app = ctx.app(&source.app)?;
    let rules = app.turns.when_on().or_else(|| app.run_rules())?;
    // A watched run (no order) is a turn of its own, keyed by its delivery.
    let conversation = match rules.order {
        Order::Watch => format!("{}#{}", source.conversation, source.delivery),
        _ => source.conversation.clone(),
    };
    let write =
        TurnWrite { app: &source.app, delivery: &source.delivery, conversation: &conversation, ts: &source.ts, kind };
    let turns = store.turns();
    let step = turns.write(&write, &rules, now_ms());
    let verdict = match ctx.step(w, step).await {
        Ok(v) => v,
        Err(e) => {
            debug!(error = %e, "cannot judge the write by its turn; posting it");
            return None;
        }
    };
    if let Some(ended) = &verdict.ended {
        crate::history::turns::ended(&ctx.shared, &source.app, ended);
    }
    if !verdict.withhold {
        return None;
    }
    info!(
        target: "slackgate::audit",
        app = %source.app,
        delivery = %source.delivery,
        method = %w.call.method,
        "write withheld: a newer message of its conversation waits"
    );
    Some(ctx.withheld(store, w, source, Error::Withheld(Gone::Superseded)).await)
}
