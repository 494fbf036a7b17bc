//! Re-runs (opt-in, `rerun_replay`; always for an app that re-runs lost runs, `rerun_lost`):
//! the k-th write of a method during run n of a delivery returns the k-th such write of an
//! earlier run instead of posting again; the first run to post a k-th write keeps its answer.

use super::ctx::Ctx;
use super::model::{Cached, Outcome, Reply, Target, Write};
use super::plan::{self, Rerun};
use super::store::EgressStore;

/// `Err` with the earlier run's answer; else which k-th write of its run this is, when
/// re-runs apply and Redis could say.
pub(super) async fn rerun(ctx: &Ctx, store: &EgressStore, to: &Target<'_>, w: &Write) -> Result<Option<u64>, Reply> {
    let Some(s) = &to.source else { return Ok(None) };
    // An app that re-runs lost runs replays them whatever `rerun` says.
    let tracked = ctx.app(&s.app).is_some_and(|a| a.runs.is_on());
    if !plan::rerun_applies(ctx.cfg().rerun_replay || tracked, &w.call.method, true) {
        return Ok(None);
    }
    let window = ctx.cfg().attribution_window;
    match ctx.step(w, store.rerun_next(&to.place(), &s.delivery, s.run, &w.call.method, window)).await {
        Ok((k, earlier)) => match plan::rerun(k, earlier, s.run) {
            Rerun::Replay(earlier) => {
                if w.call.method == plan::START_STREAM {
                    super::stream::rerun(ctx, store, to, w, &earlier).await;
                }
                Err(Reply::new(earlier, Outcome::ReplayedRerun))
            }
            Rerun::Record(k) => Ok(Some(k)),
        },
        Err(_) => Ok(None),
    }
}

/// After a successful post: the re-run record of its k-th write.
#[allow(clippy::too_many_arguments)]
pub(super) async fn record(
    ctx: &Ctx,
    store: &EgressStore,
    to: &Target<'_>,
    w: &Write,
    k: Option<u64>,
    answer: &Cached,
) {
    let (Some(source), Some(k)) = (&to.source, k) else { return };
    let window = ctx.cfg().attribution_window;
    let place = to.place();
    let record = store.rerun_record(&place, &source.delivery, &w.call.method, k, source.run, answer, window);
    let _ = ctx.step(w, record).await;
}
