//! A delivery's trace, from its id. Slack sends no trace, so the ingress starts one at arrival
//! — and the delivery's id, kept with it in Redis, is all any process needs to continue it:
//! the trace id and the Slack request's span id are derived from the id (SHA-256), and whether
//! the trace is sampled is one bit of it ([`TRACED`]), set by the ingress when it makes the id,
//! as the history's [`crate::history::KEPT`] is. A worker on another replica, a retry an hour
//! later, the egress attributing a reply: each reads the same trace from the id, asking no one.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use sha2::{Digest, Sha256};

/// The bit of a delivery id's nonce that says its trace is sampled (exported).
pub const TRACED: u64 = 1 << 62;

/// Whether `delivery`'s trace is sampled (see [`TRACED`]); `false` for anything not an id.
pub fn traced(delivery: &str) -> bool {
    delivery
        .split_once('-')
        .and_then(|(_, hex)| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|nonce| nonce & TRACED != 0)
}

/// One delivery's trace: its id, the span id of the Slack request that began it (the parent
/// of every later span of the delivery), and whether it is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryTrace {
    pub trace_id: TraceId,
    pub root: SpanId,
    pub sampled: bool,
}

impl DeliveryTrace {
    /// The trace of `delivery` (an id as the ingress makes them).
    pub fn of(delivery: &str) -> DeliveryTrace {
        let digest = Sha256::new().chain_update(b"slackgate trace\0").chain_update(delivery.as_bytes()).finalize();
        let mut trace = [0u8; 16];
        trace.copy_from_slice(&digest[..16]);
        let mut root = [0u8; 8];
        root.copy_from_slice(&digest[16..24]);
        // Never the invalid all-zero ids (a chance of 2^-64, but an id that is one is refused).
        let trace_id = TraceId::from_bytes(trace);
        let root = SpanId::from_bytes(root);
        let (trace_id, root) = (
            if trace_id == TraceId::INVALID { TraceId::from(1u128) } else { trace_id },
            if root == SpanId::INVALID { SpanId::from(1u64) } else { root },
        );
        DeliveryTrace { trace_id, root, sampled: traced(delivery) }
    }

    /// The Slack request's span, as a parent or a link.
    pub fn root_context(&self) -> SpanContext {
        context(self.trace_id, self.root, self.sampled, false)
    }
}

/// A span context of ours (`remote`: it came from another process).
pub fn context(trace_id: TraceId, span_id: SpanId, sampled: bool, remote: bool) -> SpanContext {
    let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    SpanContext::new(trace_id, span_id, flags, remote, TraceState::default())
}

/// W3C `traceparent` for a span: version 00, flags 01 when sampled, 00 when not (so the bot's
/// own sampling follows the decision).
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> String {
    format!("00-{trace_id}-{span_id}-{}", if sampled { "01" } else { "00" })
}

/// A W3C `traceparent` (version 00, or a later one read as 00 says), and its `tracestate`;
/// `None` when malformed or all-zero.
pub fn parse_traceparent(value: &str, state: Option<&str>) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = state.and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, TraceFlags::new(flags & 1), true, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deliverys_trace_is_the_same_wherever_it_is_read_and_its_sampling_is_a_bit_of_its_id() {
        let traced_id = format!("3-{:016x}", TRACED | 0x1234);
        let plain_id = format!("3-{:016x}", 0x1234u64);
        let a = DeliveryTrace::of(&traced_id);
        assert_eq!(a, DeliveryTrace::of(&traced_id), "derived, not drawn");
        assert!(a.sampled && !DeliveryTrace::of(&plain_id).sampled);
        assert_ne!(a.trace_id, DeliveryTrace::of(&plain_id).trace_id);
        assert!(!traced("junk") && !traced("3-zz"));
    }

    #[test]
    fn traceparent_round_trips_and_refuses_what_is_malformed() {
        let t = DeliveryTrace::of("0-00000000000000ff");
        let tp = traceparent(t.trace_id, t.root, true);
        assert_eq!(tp.len(), 55);
        let back = parse_traceparent(&tp, Some("vendor=x")).unwrap();
        assert_eq!((back.trace_id(), back.span_id(), back.is_sampled()), (t.trace_id, t.root, true));
        assert_eq!(back.trace_state().get("vendor"), Some("x"));
        assert!(!parse_traceparent(&traceparent(t.trace_id, t.root, false), None).unwrap().is_sampled());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad, None).is_none(), "{bad}");
        }
    }
}
