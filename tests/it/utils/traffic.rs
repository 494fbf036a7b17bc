//! Slack's traffic at its own pace, one event after another, until the test says the moment
//! it must span (a hand-over, a reload) is over: never a guess at how long that moment lasts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{event, try_send, Req, SECRET};

pub struct Traffic {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<Result<u16, String>>>,
}

impl Traffic {
    /// Signed events `<prefix><n>` to `port`, one every `every`, at least `min` of them.
    pub fn start(port: u16, prefix: &str, every: Duration, min: usize) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, prefix) = (stop.clone(), prefix.to_string());
        let task = tokio::spawn(async move {
            let mut pace = pace(every);
            let mut answers = Vec::new();
            while answers.len() < min || !flag.load(Ordering::Relaxed) {
                pace.tick().await;
                let req = Req::signed("/slack/events", event(&format!("{prefix}{:04}", answers.len())), SECRET);
                answers.push(try_send(port, req).await.map(|(status, _)| status));
            }
            answers
        });
        Traffic { stop, task }
    }

    /// Stop after the event in flight; every answer, in order.
    pub async fn stop(self) -> Vec<Result<u16, String>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Slack's pace for a test's own loop: one tick every `every` (the first at once; a late tick
/// delays the next rather than bunching them). What paces the load, never a wait for a state.
pub fn pace(every: Duration) -> tokio::time::Interval {
    let mut pace = tokio::time::interval(every);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    pace
}
