use super::*;

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

const SMALL: Limits = Limits { per_address: 3, global: 7, window: Duration::from_secs(60), addresses: 4 };

#[test]
fn an_address_over_its_limit_waits_out_its_window_and_others_do_not() {
    let t = Throttle::default();
    let start = Instant::now();
    let a = ip("203.0.113.7");
    // Good tokens do not count.
    for _ in 0..20 {
        assert_eq!(t.judge(start, a, true), Ok(()));
    }
    for i in 0..Limits::TOKENS.per_address {
        assert_eq!(t.judge(start + Duration::from_secs(u64::from(i)), a, false), Ok(()), "failure {i}");
    }
    // Past the limit the address is refused, the right token too, until its window (from its
    // first failure) ends; the refusals are not counted.
    let thirty = start + Duration::from_secs(30);
    let refused = Throttled { retry_after: Duration::from_secs(30) };
    assert_eq!(t.judge(thirty, a, true), Err(refused));
    assert_eq!(refused.retry_after_secs(), 30);
    let late = start + Limits::TOKENS.window - Duration::from_millis(1);
    assert_eq!(t.judge(late, a, false).map_err(|e| e.retry_after_secs()), Err(1));
    // Another address logs in meanwhile, and fails on its own count.
    assert_eq!(t.judge(thirty, ip("198.51.100.1"), true), Ok(()));
    assert_eq!(t.judge(thirty, ip("198.51.100.1"), false), Ok(()));
    let next = start + Limits::TOKENS.window;
    assert_eq!(t.judge(next, a, true), Ok(()));
    // A new window counts afresh.
    for _ in 0..Limits::TOKENS.per_address {
        assert_eq!(t.judge(next, a, false), Ok(()));
    }
    assert!(t.judge(next, a, true).is_err());
}

#[test]
fn the_global_ceiling_stops_every_address() {
    let t = Throttle::new(SMALL);
    let now = Instant::now();
    // 7 failures from three addresses (none over its own 3).
    for (i, a) in ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().cycle().take(7).enumerate() {
        assert_eq!(t.judge(now, ip(a), false), Ok(()), "failure {i} from {a}");
    }
    // Everyone waits now, a fresh address with the right token too.
    assert!(t.judge(now, ip("10.0.0.9"), true).is_err());
    assert!(t.judge(now, None, true).is_err());
    assert_eq!(t.judge(now + SMALL.window, ip("10.0.0.9"), true), Ok(()));
}

#[test]
fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
    let t = Throttle::new(SMALL);
    let now = Instant::now();
    for a in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"] {
        assert_eq!(t.judge(now, ip(a), false), Ok(()));
    }
    assert!(t.judge(now, ip("2001:db8:1:2::77"), true).is_err(), "one /64 is one address");
    assert_eq!(t.judge(now, ip("2001:db8:1:3::1"), true), Ok(()), "the next /64 is another");
    for _ in 0..3 {
        assert_eq!(t.judge(now, ip("::ffff:192.0.2.1"), false), Ok(()));
    }
    assert!(t.judge(now, ip("192.0.2.1"), true).is_err());
    // An unknown peer is an address of its own, not `::`'s /64.
    assert_eq!(t.judge(now, None, true), Ok(()));
    assert_eq!(t.judge(now, ip("::1"), true), Ok(()));
}

#[test]
fn the_addresses_remembered_are_bounded() {
    let limits = Limits { global: 1_000, ..SMALL };
    let t = Throttle::new(limits);
    let start = Instant::now();
    for i in 0..4u8 {
        assert_eq!(t.judge(start + Duration::from_secs(u64::from(i)), ip(&format!("10.0.1.{i}")), false), Ok(()));
    }
    assert_eq!(t.addresses(), 4);
    // Full: the oldest window goes for a new address.
    assert_eq!(t.judge(start + Duration::from_secs(10), ip("10.0.2.1"), false), Ok(()));
    assert_eq!(t.addresses(), 4);
    // Ended windows go first, all of them.
    let later = start + limits.window + Duration::from_secs(5);
    assert_eq!(t.judge(later, ip("10.0.3.1"), false), Ok(()));
    assert_eq!(t.addresses(), 2, "10.0.2.1's window (from 10 s) and the new one");
    // Hammering from many addresses never grows the map past its cap.
    for i in 0..200u32 {
        let _ = t.judge(later, Some(IpAddr::from((0x0a00_0000 + i).to_be_bytes())), false);
        assert!(t.addresses() <= limits.addresses);
    }
}
