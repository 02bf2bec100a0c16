//! Select-Locators: every rule, ordering, dedup and the ceiling; a locator's socket address.

use std::net::IpAddr;

use proptest::prelude::*;
use shoal_discovery::locators::{
    select_locators, to_socket, AddressPrefix, LocatorError, SelectionPolicy, Verdict,
    MAX_POLICY_PREFIXES,
};
use shoal_discovery::types::{Locator, LocatorCandidate, LocatorKind, LocatorOrigin};

fn v4(ip: [u8; 4], port: u32) -> Locator {
    Locator::udp_v4(ip, port)
}

fn learned(loc: Locator, priority: u16) -> LocatorCandidate {
    LocatorCandidate {
        locator: loc,
        origin: LocatorOrigin::Learned,
        priority,
    }
}

fn fallback(loc: Locator, priority: u16) -> LocatorCandidate {
    LocatorCandidate {
        locator: loc,
        origin: LocatorOrigin::Fallback,
        priority,
    }
}

fn mapped(ip: [u8; 4], port: u32) -> Locator {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&ip);
    Locator::udp_v6(a, port)
}

#[test]
fn prefix_parsing() {
    let p: AddressPrefix = "10.1.2.3/8".parse().unwrap();
    assert_eq!(p.network(), "10.0.0.0".parse::<IpAddr>().unwrap());
    assert_eq!(p.len(), 8);
    assert_eq!(p.to_string(), "10.0.0.0/8");
    let exact: AddressPrefix = "192.168.1.5".parse().unwrap();
    assert_eq!(exact.len(), 32);
    assert!(exact.contains("192.168.1.5".parse().unwrap()));
    assert!(!exact.contains("192.168.1.6".parse().unwrap()));
    let v6: AddressPrefix = "fe80::/10".parse().unwrap();
    assert!(v6.contains("fe80::1".parse().unwrap()));
    assert!(v6.contains("febf::1".parse().unwrap()));
    assert!(!v6.contains("fec0::1".parse().unwrap()));
    assert!(
        !v6.contains("10.0.0.1".parse().unwrap()),
        "families never cross"
    );
    let all: AddressPrefix = "0.0.0.0/0".parse().unwrap();
    assert!(all.is_empty());
    assert!(all.contains("203.0.113.9".parse().unwrap()));
    assert!(!all.contains("::1".parse().unwrap()));
    for bad in [
        "",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0/8",
        "x/1",
        "10.0.0.0/8/8",
    ] {
        assert!(
            matches!(
                bad.parse::<AddressPrefix>(),
                Err(LocatorError::InvalidPrefix(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        "10.0.0.0/33".parse::<AddressPrefix>(),
        Err(LocatorError::PrefixTooLong { len: 33, max: 32 })
    );
    assert_eq!(
        "::/129".parse::<AddressPrefix>(),
        Err(LocatorError::PrefixTooLong { len: 129, max: 128 })
    );
}

#[test]
fn deny_wins_over_allow() {
    let policy = SelectionPolicy::new(["10.0.0.0/8"], ["10.0.0.0/8"]).unwrap();
    assert_eq!(policy.verdict(&v4([10, 0, 0, 1], 1)), Verdict::Denied);
    // Deny also wins over the switches: a denied loopback is denied, not gated.
    let policy = SelectionPolicy::new::<[&str; 0], _, &str, _>([], ["127.0.0.0/8"]).unwrap();
    assert_eq!(policy.verdict(&v4([127, 0, 0, 1], 1)), Verdict::Denied);
    let sel = select_locators(
        &[
            learned(v4([127, 0, 0, 1], 1), 0),
            learned(v4([10, 0, 0, 1], 1), 0),
        ],
        &policy,
    );
    assert_eq!(sel.locators, vec![v4([10, 0, 0, 1], 1)]);
    assert_eq!(sel.stats.denied, 1);
}

#[test]
fn empty_allow_list_allows_everything_not_denied() {
    let policy = SelectionPolicy::default();
    assert!(policy.allow().is_empty());
    for loc in [
        v4([10, 0, 0, 1], 1),
        v4([203, 0, 113, 7], 2),
        Locator::udp_v6(
            "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
            3,
        ),
        Locator {
            kind: LocatorKind::Shm,
            address: [9; 16],
            port: 0,
        },
    ] {
        assert_eq!(policy.verdict(&loc), Verdict::Selected, "{loc:?}");
    }
}

#[test]
fn nonempty_allow_list_restricts() {
    let policy =
        SelectionPolicy::new(["192.168.0.0/16", "2001:db8::/32"], [] as [&str; 0]).unwrap();
    assert_eq!(policy.verdict(&v4([192, 168, 4, 4], 1)), Verdict::Selected);
    assert_eq!(policy.verdict(&v4([10, 0, 0, 1], 1)), Verdict::NotAllowed);
    let v6 = |s: &str| Locator::udp_v6(s.parse::<std::net::Ipv6Addr>().unwrap().octets(), 1);
    assert_eq!(policy.verdict(&v6("2001:db8:1::5")), Verdict::Selected);
    assert_eq!(policy.verdict(&v6("2001:db9::5")), Verdict::NotAllowed);
    // Shared memory has no IP address, so no prefix can allow it.
    let shm = Locator {
        kind: LocatorKind::Shm,
        address: [0; 16],
        port: 0,
    };
    assert_eq!(policy.verdict(&shm), Verdict::NotAllowed);
}

#[test]
fn switches_gate_loopback_wildcard_multicast() {
    let on = SelectionPolicy::default()
        .with_loopback(true)
        .with_wildcard(true)
        .with_multicast(true);
    let off = SelectionPolicy::default()
        .with_loopback(false)
        .with_wildcard(false)
        .with_multicast(false);
    let v6 = |s: &str| Locator::udp_v6(s.parse::<std::net::Ipv6Addr>().unwrap().octets(), 1);
    let special = [
        v4([127, 0, 0, 1], 1),
        v4([127, 9, 9, 9], 1),
        v6("::1"),
        v4([0, 0, 0, 0], 1),
        v6("::"),
        v4([239, 255, 0, 1], 1),
        v4([224, 0, 0, 1], 1),
        v6("ff02::1"),
        mapped([127, 0, 0, 1], 1),
        mapped([239, 1, 1, 1], 1),
    ];
    for loc in special {
        assert_eq!(on.verdict(&loc), Verdict::Selected, "{loc:?}");
        assert_eq!(off.verdict(&loc), Verdict::Gated, "{loc:?}");
    }
    // Each switch gates only its own class.
    let only_loop_off = SelectionPolicy::default()
        .with_wildcard(true)
        .with_loopback(false);
    assert_eq!(
        only_loop_off.verdict(&v4([127, 0, 0, 1], 1)),
        Verdict::Gated
    );
    assert_eq!(
        only_loop_off.verdict(&v4([0, 0, 0, 0], 1)),
        Verdict::Selected
    );
    assert_eq!(
        only_loop_off.verdict(&v4([239, 0, 0, 1], 1)),
        Verdict::Selected
    );
    // Ordinary unicast is never gated.
    assert_eq!(off.verdict(&v4([10, 1, 1, 1], 1)), Verdict::Selected);
    // Defaults: loopback and multicast on, wildcard off.
    let d = SelectionPolicy::default();
    assert!(d.loopback && d.multicast && !d.wildcard);
}

#[test]
fn switch_does_not_override_allow_list() {
    // Loopback switched on but not on a non-empty allow list: not allowed.
    let policy = SelectionPolicy::new(["10.0.0.0/8"], [] as [&str; 0]).unwrap();
    assert_eq!(policy.verdict(&v4([127, 0, 0, 1], 1)), Verdict::NotAllowed);
}

#[test]
fn ipv4_mapped_addresses_match_ipv4_prefixes() {
    let policy = SelectionPolicy::new(["10.0.0.0/8"], ["10.9.0.0/16"]).unwrap();
    assert_eq!(policy.verdict(&mapped([10, 1, 1, 1], 1)), Verdict::Selected);
    assert_eq!(policy.verdict(&mapped([10, 9, 1, 1], 1)), Verdict::Denied);
    assert_eq!(
        policy.verdict(&mapped([11, 1, 1, 1], 1)),
        Verdict::NotAllowed
    );
}

#[test]
fn exact_addresses_in_lists() {
    let policy = SelectionPolicy::new(["10.0.0.0/8"], ["10.0.0.7"]).unwrap();
    assert_eq!(policy.verdict(&v4([10, 0, 0, 7], 1)), Verdict::Denied);
    assert_eq!(policy.verdict(&v4([10, 0, 0, 8], 1)), Verdict::Selected);
}

#[test]
fn sort_order_learned_priority_address_port() {
    let policy = SelectionPolicy::default();
    let input = [
        fallback(v4([1, 1, 1, 1], 1), 0),
        learned(v4([9, 9, 9, 9], 9), 2),
        learned(v4([5, 5, 5, 5], 2), 1),
        learned(v4([5, 5, 5, 5], 1), 1),
        learned(v4([4, 4, 4, 4], 9), 1),
        fallback(v4([0, 0, 0, 1], 1), 3),
    ];
    let sel = select_locators(&input, &policy);
    assert_eq!(
        sel.locators,
        vec![
            v4([4, 4, 4, 4], 9), // learned, prio 1, lowest address
            v4([5, 5, 5, 5], 1), // same address, lower port
            v4([5, 5, 5, 5], 2),
            v4([9, 9, 9, 9], 9), // learned, prio 2
            v4([1, 1, 1, 1], 1), // fallbacks last, whatever their priority
            v4([0, 0, 0, 1], 1),
        ]
    );
}

#[test]
fn duplicates_removed_keeping_best_rank() {
    let policy = SelectionPolicy::default();
    let a = v4([10, 0, 0, 1], 7400);
    let b = v4([10, 0, 0, 2], 7400);
    // `a` appears as a fallback (prio 0), and learned (prio 5): learned wins,
    // so `a` sorts after `b` (learned prio 1), once.
    let input = [
        fallback(a, 0),
        learned(b, 1),
        learned(a, 5),
        learned(b, 1),
        fallback(b, 0),
    ];
    let sel = select_locators(&input, &policy);
    assert_eq!(sel.locators, vec![b, a]);
    assert_eq!(sel.stats.duplicates, 3);
}

#[test]
fn v4_spellings_dedup_as_one() {
    // An IPv4 locator with junk in the unused bytes is the same address.
    let mut junk = v4([10, 0, 0, 1], 1);
    junk.address[0] = 0xaa;
    let sel = select_locators(
        &[learned(junk, 0), learned(v4([10, 0, 0, 1], 1), 0)],
        &SelectionPolicy::default(),
    );
    assert_eq!(sel.locators, vec![v4([10, 0, 0, 1], 1)]);
    assert_eq!(sel.stats.duplicates, 1);
}

#[test]
fn ceiling_truncates_and_counts() {
    let policy = SelectionPolicy::default().with_max_selected(2).unwrap();
    let input: Vec<_> = (0..5u8)
        .rev()
        .map(|i| learned(v4([10, 0, 0, i], 1), 0))
        .collect();
    let sel = select_locators(&input, &policy);
    assert_eq!(
        sel.locators,
        vec![v4([10, 0, 0, 0], 1), v4([10, 0, 0, 1], 1)]
    );
    assert_eq!(sel.stats.truncated, 3);
    assert_eq!(
        SelectionPolicy::default().with_max_selected(0),
        Err(LocatorError::ZeroMaxSelected)
    );
}

#[test]
fn prefix_lists_are_bounded() {
    let many: Vec<String> = (0..=MAX_POLICY_PREFIXES)
        .map(|i| format!("10.0.{i}.0/24"))
        .collect();
    assert_eq!(
        SelectionPolicy::new(&many, [] as [&str; 0]),
        Err(LocatorError::TooManyPrefixes {
            list: "allow",
            len: MAX_POLICY_PREFIXES + 1
        })
    );
    assert!(matches!(
        SelectionPolicy::new([] as [&str; 0], &many),
        Err(LocatorError::TooManyPrefixes { list: "deny", .. })
    ));
    assert!(SelectionPolicy::new(&many[..MAX_POLICY_PREFIXES], [] as [&str; 0]).is_ok());
}

#[test]
fn empty_input_selects_nothing() {
    let sel = select_locators(&[], &SelectionPolicy::default());
    assert!(sel.locators.is_empty());
    assert_eq!(sel.first(), None);
}

fn arb_candidate() -> impl Strategy<Value = LocatorCandidate> {
    (
        prop::sample::select(vec![
            [10u8, 0, 0, 1],
            [10, 0, 0, 2],
            [127, 0, 0, 1],
            [239, 0, 0, 1],
            [0; 4],
            [192, 168, 1, 1],
        ]),
        prop::sample::select(vec![7400u32, 7401]),
        any::<bool>(),
        0u16..3,
    )
        .prop_map(|(ip, port, is_learned, prio)| {
            if is_learned {
                learned(v4(ip, port), prio)
            } else {
                fallback(v4(ip, port), prio)
            }
        })
}

proptest! {
    /// Arrival order never changes the result, and the result is sorted,
    /// duplicate-free and every member passes the policy.
    #[test]
    fn order_independent_and_well_formed(
        mut input in prop::collection::vec(arb_candidate(), 0..24),
        seed in any::<u64>(),
        allow_all in any::<bool>(),
    ) {
        let policy = if allow_all {
            SelectionPolicy::default()
        } else {
            SelectionPolicy::new(["10.0.0.0/8", "127.0.0.0/8"], ["10.0.0.2"]).unwrap().with_multicast(false)
        };
        let a = select_locators(&input, &policy);
        // Deterministic shuffle from the seed.
        let mut s = seed | 1;
        for i in (1..input.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            input.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let b = select_locators(&input, &policy);
        prop_assert_eq!(&a, &b);
        let mut uniq = std::collections::HashSet::new();
        for l in &a.locators {
            prop_assert!(uniq.insert(*l));
            prop_assert_eq!(policy.verdict(l), Verdict::Selected);
        }
        let s = a.stats;
        prop_assert_eq!(
            (s.denied + s.gated + s.not_allowed + s.duplicates + s.truncated) as usize + a.locators.len(),
            input.len()
        );
    }
}

#[test]
fn shm_and_oversized_ports_are_not_sockets() {
    let shm = Locator {
        kind: LocatorKind::Shm,
        address: [0; 16],
        port: 1,
    };
    assert_eq!(to_socket(&shm), None);
    assert_eq!(to_socket(&Locator::udp_v4([10, 0, 0, 1], 70_000)), None);
    assert_eq!(
        to_socket(&Locator::udp_v6(std::net::Ipv6Addr::LOCALHOST.octets(), 5)),
        Some("[::1]:5".parse().unwrap())
    );
}
