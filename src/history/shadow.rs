//! The list's word on apps' shadows: of the deliveries it lists that were copied to a shadow,
//! who answered (both bots, only the live one, only the shadow, neither) and how fast.

use serde::Serialize;

use super::query::Summary;

/// Of the deliveries listed that an app copied to its shadow: how many both bots answered,
/// only the live one, only the shadow, neither; and each one's first answer's latency from
/// the delivery's arrival (median, p90; ms).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ShadowStats {
    pub app: String,
    pub copied: u64,
    pub both: u64,
    pub only_live: u64,
    pub only_shadow: u64,
    pub neither: u64,
    pub live_p50_ms: Option<u64>,
    pub live_p90_ms: Option<u64>,
    pub shadow_p50_ms: Option<u64>,
    pub shadow_p90_ms: Option<u64>,
}

/// [`ShadowStats`] of `rows`, per app.
pub fn shadow_stats(rows: &[Summary]) -> Vec<ShadowStats> {
    let mut by_app: Vec<(ShadowStats, Vec<u64>, Vec<u64>)> = Vec::new();
    for r in rows.iter().filter(|r| r.get("shadow") == "copied") {
        let i = match by_app.iter().position(|(s, ..)| s.app == r.app) {
            Some(i) => i,
            None => {
                by_app.push((ShadowStats { app: r.app.clone(), ..ShadowStats::default() }, Vec::new(), Vec::new()));
                by_app.len() - 1
            }
        };
        let (st, live, shadow) = &mut by_app[i];
        st.copied += 1;
        let after = |k: &str| (r.num(k) > 0).then(|| r.num(k).saturating_sub(r.received()));
        match (after("answered"), after("shadow_answered")) {
            (Some(l), Some(s)) => {
                st.both += 1;
                live.push(l);
                shadow.push(s);
            }
            (Some(l), None) => {
                st.only_live += 1;
                live.push(l);
            }
            (None, Some(s)) => {
                st.only_shadow += 1;
                shadow.push(s);
            }
            (None, None) => st.neither += 1,
        }
    }
    by_app
        .into_iter()
        .map(|(mut st, mut live, mut shadow)| {
            (st.live_p50_ms, st.live_p90_ms) = (percentile(&mut live, 50), percentile(&mut live, 90));
            (st.shadow_p50_ms, st.shadow_p90_ms) = (percentile(&mut shadow, 50), percentile(&mut shadow, 90));
            st
        })
        .collect()
}

/// The `p`th percentile (nearest rank) of `v`; `None` when empty.
fn percentile(v: &mut [u64], p: usize) -> Option<u64> {
    v.sort_unstable();
    let rank = (v.len() * p).div_ceil(100).max(1);
    v.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::query::Filter;

    fn summary(pairs: &[(&str, &str)]) -> Summary {
        Summary::of(pairs)
    }

    #[test]
    fn shadow_stats_count_who_answered_and_how_fast() {
        let row = |fields: &[(&str, &str)]| {
            let mut all = vec![("shadow", "copied"), ("received", "1000")];
            all.extend_from_slice(fields);
            summary(&all)
        };
        let rows = vec![
            row(&[("answered", "1100"), ("shadow_answered", "1300"), ("replies", "1"), ("shadow_replies", "2")]),
            row(&[("answered", "1200"), ("replies", "1")]),
            row(&[("shadow_answered", "1500"), ("shadow_replies", "1")]),
            row(&[]),
            summary(&[("answered", "1100"), ("replies", "1")]),
        ];
        let st = &shadow_stats(&rows)[0];
        assert_eq!((st.copied, st.both, st.only_live, st.only_shadow, st.neither), (4, 1, 1, 1, 1));
        assert_eq!((st.live_p50_ms, st.live_p90_ms), (Some(100), Some(200)));
        assert_eq!((st.shadow_p50_ms, st.shadow_p90_ms), (Some(300), Some(500)));
        let differs = Filter { status: "shadow_differs".into(), ..Filter::default() };
        let matched: Vec<bool> = rows.iter().map(|r| r.matches(&differs, 0)).collect();
        assert_eq!(matched, [false, true, true, false, false], "only one of them answered");
    }
}
