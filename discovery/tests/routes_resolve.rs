//! Resolve-Route: direction rule, fallback to the participant, foreign
//! endpoints refused.

use std::net::SocketAddr;

use shoal_discovery::locators::SelectionPolicy;
use shoal_discovery::routes::{
    endpoint_address, resolve_route, to_socket, Direction, RouteError, Traffic,
};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, Locator, LocatorKind, ParticipantInfo,
    TopicName, TypeHash, TypeName,
};

const P: GuidPrefix = GuidPrefix([1; 12]);
const OTHER: GuidPrefix = GuidPrefix([2; 12]);

fn participant() -> ParticipantInfo {
    let mut p = ParticipantInfo::new(P, "remote");
    p.user_locators = vec![Locator::udp_v4([10, 0, 0, 1], 7410)];
    p
}

fn endpoint(prefix: GuidPrefix, entity: u8, kind: EndpointKind) -> EndpointInfo {
    EndpointInfo::new(
        Guid::new(prefix, EntityId([0, 0, entity, 0])),
        kind,
        TopicName::new("topic").unwrap(),
        TypeName::new("Type").unwrap(),
        TypeHash([3; 16]),
    )
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn samples_go_to_reader_requests_to_writer() {
    let p = participant();
    let mut w = endpoint(P, 1, EndpointKind::Writer);
    let mut r = endpoint(P, 2, EndpointKind::Reader);
    w.locators = vec![Locator::udp_v4([10, 0, 0, 2], 7000)];
    r.locators = vec![Locator::udp_v4([10, 0, 0, 3], 8000)];
    let route = resolve_route(&p, &w, &r, &SelectionPolicy::default()).unwrap();
    assert_eq!(route.to_reader, sa("10.0.0.3:8000"));
    assert_eq!(route.to_writer, sa("10.0.0.2:7000"));
    for t in Traffic::ALL {
        let (to, other, want) = match t.direction() {
            Direction::ToReader => (r.guid, w.guid, route.to_reader),
            Direction::ToWriter => (w.guid, r.guid, route.to_writer),
        };
        assert_eq!(route.address_for(t, to), Some(want), "{t:?}");
        // The endpoint the traffic is *about* is never its destination.
        assert_eq!(route.address_for(t, other), None, "{t:?}");
        assert_eq!(route.address(t.direction()), want);
    }
    // The seed's table, spelled out.
    for t in [
        Traffic::Sample,
        Traffic::Fragment,
        Traffic::WriterAnnouncement,
        Traffic::FragmentAnnouncement,
        Traffic::Irrelevance,
    ] {
        assert_eq!(t.direction(), Direction::ToReader);
    }
    for t in [Traffic::Request, Traffic::FragmentRequest] {
        assert_eq!(t.direction(), Direction::ToWriter);
    }
}

#[test]
fn endpoint_without_address_uses_participant_default() {
    let p = participant();
    let w = endpoint(P, 1, EndpointKind::Writer);
    let mut r = endpoint(P, 2, EndpointKind::Reader);
    r.locators = vec![Locator::udp_v4([10, 0, 0, 3], 8000)];
    let route = resolve_route(&p, &w, &r, &SelectionPolicy::default()).unwrap();
    assert_eq!(route.to_writer, sa("10.0.0.1:7410"));
    assert_eq!(route.to_reader, sa("10.0.0.3:8000"));
}

#[test]
fn endpoint_addresses_filtered_by_policy_then_fallback() {
    let p = participant();
    let mut r = endpoint(P, 2, EndpointKind::Reader);
    // Its only address is denied, so the participant default applies.
    r.locators = vec![Locator::udp_v4([192, 168, 0, 9], 8000)];
    let policy = SelectionPolicy::new([] as [&str; 0], ["192.168.0.0/16"]).unwrap();
    assert_eq!(endpoint_address(&p, &r, &policy), Ok(sa("10.0.0.1:7410")));
    // With several, the policy's order picks the first.
    r.locators = vec![
        Locator::udp_v4([10, 0, 0, 9], 8000),
        Locator::udp_v4([10, 0, 0, 4], 8000),
    ];
    assert_eq!(endpoint_address(&p, &r, &policy), Ok(sa("10.0.0.4:8000")));
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
        Some(sa("[::1]:5"))
    );
    // A reader advertising only unusable addresses falls back.
    let p = participant();
    let mut r = endpoint(P, 2, EndpointKind::Reader);
    r.locators = vec![shm, Locator::udp_v4([10, 0, 0, 1], 70_000)];
    assert_eq!(
        endpoint_address(&p, &r, &SelectionPolicy::default()),
        Ok(sa("10.0.0.1:7410"))
    );
}

#[test]
fn no_usable_address_is_an_error() {
    let mut p = participant();
    p.user_locators.clear();
    let w = endpoint(P, 1, EndpointKind::Writer);
    let r = endpoint(P, 2, EndpointKind::Reader);
    assert_eq!(
        resolve_route(&p, &w, &r, &SelectionPolicy::default()),
        Err(RouteError::NoUsableAddress(r.guid))
    );
}

#[test]
fn foreign_endpoints_are_refused() {
    let p = participant();
    let w = endpoint(P, 1, EndpointKind::Writer);
    let r = endpoint(P, 2, EndpointKind::Reader);
    let fw = endpoint(OTHER, 1, EndpointKind::Writer);
    let fr = endpoint(OTHER, 2, EndpointKind::Reader);
    let policy = SelectionPolicy::default();
    assert_eq!(
        resolve_route(&p, &fw, &r, &policy),
        Err(RouteError::ForeignEndpoint {
            endpoint: fw.guid,
            participant: P
        })
    );
    assert_eq!(
        resolve_route(&p, &w, &fr, &policy),
        Err(RouteError::ForeignEndpoint {
            endpoint: fr.guid,
            participant: P
        })
    );
    assert!(matches!(
        endpoint_address(&p, &fr, &policy),
        Err(RouteError::ForeignEndpoint { .. })
    ));
}

#[test]
fn kinds_must_be_writer_then_reader() {
    let p = participant();
    let w = endpoint(P, 1, EndpointKind::Writer);
    let r = endpoint(P, 2, EndpointKind::Reader);
    assert!(matches!(
        resolve_route(&p, &r, &w, &SelectionPolicy::default()),
        Err(RouteError::WrongKind {
            expected: EndpointKind::Writer,
            ..
        })
    ));
}
