//! Resolve-Route: where each kind of traffic goes once a match completes.
//!
//! Traffic goes to whoever *receives* it, not to whoever it is about:
//!
//! | Sending | Uses the address of |
//! |---|---|
//! | samples, fragments, the writer's announcements, irrelevance declarations | the remote **reader** |
//! | requests and fragment requests (acknowledgements, repairs) | the remote **writer** |
//!
//! An endpoint's own addresses win; when it advertises none that survive
//! [`select_locators`], the participant's default user addresses apply. Both
//! are filtered and ordered by the same [`select_locators`] used everywhere
//! else. Endpoints whose GUID prefix is not the participant's are refused:
//! another participant cannot direct this association's traffic.
//!
//! The result is a [`Route`]: two socket addresses and the two GUIDs they
//! belong to. Sending on it is one comparison and one copy — no lookup, no
//! hashing, no allocation:
//!
//! ```
//! use shoal_discovery::locators::SelectionPolicy;
//! use shoal_discovery::routes::{resolve_route, Traffic};
//! use shoal_discovery::types::*;
//!
//! let prefix = GuidPrefix([7; 12]);
//! let mut p = ParticipantInfo::new(prefix, "peer");
//! p.user_locators = vec![Locator::udp_v4([127, 0, 0, 1], 7410)];
//! let topic = TopicName::new("t").unwrap();
//! let ty = TypeName::new("T").unwrap();
//! let w = EndpointInfo::new(Guid::new(prefix, EntityId([0, 0, 1, 2])),
//!     EndpointKind::Writer, topic.clone(), ty.clone(), TypeHash([1; 16]));
//! let mut r = EndpointInfo::new(Guid::new(prefix, EntityId([0, 0, 1, 7])),
//!     EndpointKind::Reader, topic, ty, TypeHash([1; 16]));
//! r.locators = vec![Locator::udp_v4([127, 0, 0, 2], 7420)];
//!
//! let route = resolve_route(&p, &w, &r, &SelectionPolicy::default()).unwrap();
//! // A sample goes to the reader's own address...
//! assert_eq!(route.address_for(Traffic::Sample, r.guid),
//!            Some("127.0.0.2:7420".parse().unwrap()));
//! // ...an acknowledgement to the writer, which falls back to the participant.
//! assert_eq!(route.address_for(Traffic::Request, w.guid),
//!            Some("127.0.0.1:7410".parse().unwrap()));
//! // Traffic addressed to the wrong endpoint of the pair is refused.
//! assert_eq!(route.address_for(Traffic::Sample, w.guid), None);
//! ```

use std::net::{IpAddr, SocketAddr};

use crate::locators::{candidates, locator_ip, select_locators, SelectionPolicy};
use crate::types::{
    EndpointInfo, EndpointKind, Guid, GuidPrefix, Locator, LocatorKind, LocatorOrigin,
    ParticipantInfo,
};

/// Why a route cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The endpoint's GUID prefix is not the participant's.
    #[error("endpoint {endpoint:?} does not belong to participant {participant:?}")]
    ForeignEndpoint {
        /// The endpoint refused.
        endpoint: Guid,
        /// The participant being associated with.
        participant: GuidPrefix,
    },
    /// The endpoint passed as writer is a reader, or the other way round.
    #[error("endpoint {endpoint:?} is a {actual:?}, expected a {expected:?}")]
    WrongKind {
        /// The endpoint.
        endpoint: Guid,
        /// The role it was passed in.
        expected: EndpointKind,
        /// Its declared kind.
        actual: EndpointKind,
    },
    /// Neither the endpoint nor its participant has an address that passes
    /// the policy and converts to a socket address.
    #[error("no usable address for endpoint {0:?}")]
    NoUsableAddress(Guid),
}

/// Which endpoint of a matched pair a piece of traffic is addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Sent by the writer, received by the reader.
    ToReader,
    /// Sent by the reader, received by the writer.
    ToWriter,
}

/// The seven record kinds that travel on a matched pair. Each takes the same
/// directional rule ([`Traffic::direction`]), so none can disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Traffic {
    /// A sample.
    Sample,
    /// A fragment of a sample.
    Fragment,
    /// The writer announcing which samples it has.
    WriterAnnouncement,
    /// The writer announcing which fragments it has.
    FragmentAnnouncement,
    /// The writer declaring samples irrelevant (a gap).
    Irrelevance,
    /// The reader's acknowledgement / request for repair.
    Request,
    /// The reader's request for missing fragments.
    FragmentRequest,
}

impl Traffic {
    /// Every kind, for exhaustive tests and tables.
    pub const ALL: [Traffic; 7] = [
        Traffic::Sample,
        Traffic::Fragment,
        Traffic::WriterAnnouncement,
        Traffic::FragmentAnnouncement,
        Traffic::Irrelevance,
        Traffic::Request,
        Traffic::FragmentRequest,
    ];

    /// Who receives this kind of traffic.
    pub const fn direction(self) -> Direction {
        match self {
            Traffic::Sample
            | Traffic::Fragment
            | Traffic::WriterAnnouncement
            | Traffic::FragmentAnnouncement
            | Traffic::Irrelevance => Direction::ToReader,
            Traffic::Request | Traffic::FragmentRequest => Direction::ToWriter,
        }
    }
}

/// A resolved route for one (remote writer, remote reader) pair of a
/// participant: computed once per match, read on every send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The remote writer.
    pub writer: Guid,
    /// The remote reader.
    pub reader: Guid,
    /// Where traffic received by the reader goes.
    pub to_reader: SocketAddr,
    /// Where traffic received by the writer goes.
    pub to_writer: SocketAddr,
}

impl Route {
    /// The destination for `traffic` addressed to endpoint `to`, or `None`
    /// when `to` is not the endpoint that receives that kind of traffic on
    /// this route. One comparison, one copy.
    #[inline]
    pub fn address_for(&self, traffic: Traffic, to: Guid) -> Option<SocketAddr> {
        let (expected, addr) = match traffic.direction() {
            Direction::ToReader => (self.reader, self.to_reader),
            Direction::ToWriter => (self.writer, self.to_writer),
        };
        (expected == to).then_some(addr)
    }

    /// The destination for one direction, without checking the endpoint.
    #[inline]
    pub fn address(&self, direction: Direction) -> SocketAddr {
        match direction {
            Direction::ToReader => self.to_reader,
            Direction::ToWriter => self.to_writer,
        }
    }
}

/// To-Socket: the socket address of an IP locator; `None` for shared memory
/// and for ports that do not fit 16 bits.
pub fn to_socket(loc: &Locator) -> Option<SocketAddr> {
    if loc.kind == LocatorKind::Shm {
        return None;
    }
    let port = u16::try_from(loc.port).ok()?;
    let ip: IpAddr = locator_ip(loc)?;
    Some(SocketAddr::new(ip, port))
}

/// The address traffic *to* endpoint `e` of participant `p` goes to: the
/// best of `e`'s own addresses, else the best of `p`'s default user
/// addresses, each list passed through [`select_locators`].
///
/// Refuses an endpoint whose prefix is not `p`'s.
pub fn endpoint_address(
    p: &ParticipantInfo,
    e: &EndpointInfo,
    policy: &SelectionPolicy,
) -> Result<SocketAddr, RouteError> {
    if e.guid.prefix != p.prefix {
        return Err(RouteError::ForeignEndpoint {
            endpoint: e.guid,
            participant: p.prefix,
        });
    }
    first_socket(&e.locators, policy)
        .or_else(|| first_socket(&p.user_locators, policy))
        .ok_or(RouteError::NoUsableAddress(e.guid))
}

fn first_socket(list: &[Locator], policy: &SelectionPolicy) -> Option<SocketAddr> {
    if list.is_empty() {
        return None;
    }
    let cands: Vec<_> = candidates(list, LocatorOrigin::Learned, 0).collect();
    select_locators(&cands, policy)
        .locators
        .iter()
        .find_map(to_socket)
}

/// Resolve-Route: checks that `w` and `r` both belong to `p` and are a writer
/// and a reader, then resolves each direction once.
pub fn resolve_route(
    p: &ParticipantInfo,
    w: &EndpointInfo,
    r: &EndpointInfo,
    policy: &SelectionPolicy,
) -> Result<Route, RouteError> {
    for (e, expected) in [(w, EndpointKind::Writer), (r, EndpointKind::Reader)] {
        if e.guid.prefix != p.prefix {
            return Err(RouteError::ForeignEndpoint {
                endpoint: e.guid,
                participant: p.prefix,
            });
        }
        if e.kind != expected {
            return Err(RouteError::WrongKind {
                endpoint: e.guid,
                expected,
                actual: e.kind,
            });
        }
    }
    Ok(Route {
        writer: w.guid,
        reader: r.guid,
        to_reader: endpoint_address(p, r, policy)?,
        to_writer: endpoint_address(p, w, policy)?,
    })
}
