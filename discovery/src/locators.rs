//! Select-Locators: which of a peer's addresses to use, in a fixed order.
//!
//! One function, [`select_locators`], serves every use — advertised
//! addresses, configured fallbacks, direct sends and fanout to matched
//! readers — so those uses cannot disagree about which address wins.
//!
//! Rules, in the order they are applied to each candidate:
//!
//! 1. **Deny wins.** A candidate covered by any prefix of the deny list is
//!    dropped, whatever the allow list or the switches say.
//! 2. **Switches.** Loopback (`127.0.0.0/8`, `::1`), wildcard (`0.0.0.0`,
//!    `::`) and multicast (`224.0.0.0/4`, `ff00::/8`) addresses pass only when
//!    their switch is on. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are
//!    classified as the IPv4 address they carry, so mapping cannot dodge a
//!    switch or a prefix.
//! 3. **Allow.** An empty allow list allows everything that got this far;
//!    otherwise the candidate must be covered by one of its prefixes.
//!    Shared-memory locators carry no IP address: no prefix covers them, so
//!    they pass only with an empty allow list.
//!
//! Survivors are sorted by (learned before fallback, priority ascending,
//! kind, address bytes, port) — the order of arrival never matters — and
//! duplicates are removed after the sort with a hash set, keeping the
//! best-ranked copy. The result is capped at
//! [`SelectionPolicy::max_selected`]; every drop is counted in
//! [`SelectionStats`].
//!
//! ```
//! use shoal_discovery::locators::{select_locators, SelectionPolicy};
//! use shoal_discovery::types::{Locator, LocatorCandidate, LocatorOrigin};
//!
//! let policy = SelectionPolicy::new(["10.0.0.0/8"], ["10.9.0.0/16"]).unwrap();
//! let cand = |ip, origin, priority| LocatorCandidate {
//!     locator: Locator::udp_v4(ip, 7400),
//!     origin,
//!     priority,
//! };
//! let picked = select_locators(
//!     &[
//!         cand([10, 9, 0, 1], LocatorOrigin::Learned, 0),  // denied
//!         cand([10, 1, 0, 2], LocatorOrigin::Fallback, 0), // allowed, fallback
//!         cand([10, 1, 0, 1], LocatorOrigin::Learned, 5),  // allowed, learned
//!         cand([192, 168, 1, 1], LocatorOrigin::Learned, 0), // not in allow list
//!     ],
//!     &policy,
//! );
//! assert_eq!(
//!     picked.locators,
//!     vec![Locator::udp_v4([10, 1, 0, 1], 7400), Locator::udp_v4([10, 1, 0, 2], 7400)]
//! );
//! assert_eq!(picked.stats.denied, 1);
//! assert_eq!(picked.stats.not_allowed, 1);
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use ahash::AHashSet;

use crate::types::{Locator, LocatorCandidate, LocatorKind, MAX_LOCATORS};

/// Most prefixes one allow or deny list may hold.
pub const MAX_POLICY_PREFIXES: usize = 64;

/// Default ceiling on how many locators one selection returns: a full learned
/// list plus a full fallback list.
pub const DEFAULT_MAX_SELECTED: usize = 2 * MAX_LOCATORS;

/// Why an address prefix or selection policy is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocatorError {
    /// The text is not an address, nor `address/length`.
    #[error("invalid address prefix {0:?}")]
    InvalidPrefix(String),
    /// The prefix length exceeds the address width (32 or 128).
    #[error("prefix length {len} exceeds {max} bits")]
    PrefixTooLong {
        /// Declared length.
        len: u8,
        /// Width of the address family.
        max: u8,
    },
    /// An allow or deny list longer than [`MAX_POLICY_PREFIXES`].
    #[error("{list} list has {len} prefixes, more than {MAX_POLICY_PREFIXES}")]
    TooManyPrefixes {
        /// `"allow"` or `"deny"`.
        list: &'static str,
        /// Its length.
        len: usize,
    },
    /// `max_selected` of zero would select nothing, ever.
    #[error("max_selected must be at least 1")]
    ZeroMaxSelected,
}

/// An address prefix (CIDR block). A bare address is the exact-match prefix
/// (`/32` or `/128`).
///
/// Host bits below the prefix length are cleared on construction, so
/// `10.1.2.3/8` and `10.0.0.0/8` are the same prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressPrefix {
    network: IpAddr,
    len: u8,
}

impl AddressPrefix {
    /// A prefix of `len` leading bits of `addr`.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, LocatorError> {
        let max = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if len > max {
            return Err(LocatorError::PrefixTooLong { len, max });
        }
        let network = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Ok(Self { network, len })
    }

    /// The prefix that matches exactly one address.
    pub fn exact(addr: IpAddr) -> Self {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Self { network: addr, len }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for `/0`, which covers every address of its family.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `ip` lies inside this prefix. Families never cross: an IPv4
    /// prefix covers only IPv4 addresses (callers pass IPv4-mapped IPv6
    /// addresses in canonical IPv4 form; see [`locator_ip`]).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        }
    }
}

impl FromStr for AddressPrefix {
    type Err = LocatorError;

    /// Parses `a.b.c.d`, `a.b.c.d/n`, an IPv6 address, or `ipv6/n`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LocatorError::InvalidPrefix(s.to_owned());
        match s.split_once('/') {
            None => Ok(Self::exact(s.parse().map_err(|_| bad())?)),
            Some((addr, len)) => {
                let addr: IpAddr = addr.parse().map_err(|_| bad())?;
                // u8::from_str accepts a leading '+'; a prefix length should not.
                if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let len: u8 = len.parse().map_err(|_| bad())?;
                Self::new(addr, len)
            }
        }
    }
}

impl fmt::Display for AddressPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// The IP address a locator carries, IPv4-mapped IPv6 folded to IPv4; `None`
/// for shared-memory locators, which have no IP address.
pub fn locator_ip(loc: &Locator) -> Option<IpAddr> {
    match loc.kind {
        LocatorKind::Shm => None,
        LocatorKind::UdpV4 | LocatorKind::TcpV4 => {
            let mut ip = [0; 4];
            ip.copy_from_slice(&loc.address[12..]);
            Some(IpAddr::V4(Ipv4Addr::from(ip)))
        }
        LocatorKind::UdpV6 | LocatorKind::TcpV6 => {
            Some(IpAddr::V6(Ipv6Addr::from(loc.address)).to_canonical())
        }
    }
}

/// The socket address of an IP locator; `None` for shared memory and for ports that do not
/// fit 16 bits.
pub fn to_socket(loc: &Locator) -> Option<SocketAddr> {
    let port = u16::try_from(loc.port).ok()?;
    Some(SocketAddr::new(locator_ip(loc)?, port))
}

/// Clears the bytes an IPv4 locator does not use, so two spellings of one
/// IPv4 address sort and deduplicate as one.
fn normalized(mut loc: Locator) -> Locator {
    if loc.kind.is_v4() {
        loc.address[..12].fill(0);
    }
    loc
}

/// The allow/deny prefix lists and the loopback, wildcard and multicast
/// switches that Select-Locators applies.
///
/// [`SelectionPolicy::default`] allows everything except wildcard addresses
/// (a wildcard is a bind address, never a destination).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectionPolicy {
    allow: Vec<AddressPrefix>,
    deny: Vec<AddressPrefix>,
    /// Whether loopback addresses may be selected. Default on.
    pub loopback: bool,
    /// Whether wildcard (unspecified) addresses may be selected. Default off.
    pub wildcard: bool,
    /// Whether multicast addresses may be selected. Default on.
    pub multicast: bool,
    max_selected: usize,
}

impl Default for SelectionPolicy {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            loopback: true,
            wildcard: false,
            multicast: true,
            max_selected: DEFAULT_MAX_SELECTED,
        }
    }
}

impl SelectionPolicy {
    /// A policy with these allow and deny lists (each entry an address or
    /// `address/length`) and the default switches.
    pub fn new<A, D, S1, S2>(allow: A, deny: D) -> Result<Self, LocatorError>
    where
        A: IntoIterator<Item = S1>,
        D: IntoIterator<Item = S2>,
        S1: AsRef<str>,
        S2: AsRef<str>,
    {
        let allow = parse_list(allow, "allow")?;
        let deny = parse_list(deny, "deny")?;
        Self::from_prefixes(allow, deny)
    }

    /// A policy from already-parsed prefix lists and the default switches.
    pub fn from_prefixes(
        allow: Vec<AddressPrefix>,
        deny: Vec<AddressPrefix>,
    ) -> Result<Self, LocatorError> {
        for (list, v) in [("allow", &allow), ("deny", &deny)] {
            if v.len() > MAX_POLICY_PREFIXES {
                return Err(LocatorError::TooManyPrefixes { list, len: v.len() });
            }
        }
        Ok(Self {
            allow,
            deny,
            ..Self::default()
        })
    }

    /// Sets the loopback switch.
    pub fn with_loopback(mut self, on: bool) -> Self {
        self.loopback = on;
        self
    }

    /// Sets the wildcard switch.
    pub fn with_wildcard(mut self, on: bool) -> Self {
        self.wildcard = on;
        self
    }

    /// Sets the multicast switch.
    pub fn with_multicast(mut self, on: bool) -> Self {
        self.multicast = on;
        self
    }

    /// Sets the ceiling on selected locators (at least 1).
    pub fn with_max_selected(mut self, max: usize) -> Result<Self, LocatorError> {
        if max == 0 {
            return Err(LocatorError::ZeroMaxSelected);
        }
        self.max_selected = max;
        Ok(self)
    }

    /// The allow list (empty = allow everything not denied).
    pub fn allow(&self) -> &[AddressPrefix] {
        &self.allow
    }

    /// The deny list.
    pub fn deny(&self) -> &[AddressPrefix] {
        &self.deny
    }

    /// Most locators one selection returns.
    pub fn max_selected(&self) -> usize {
        self.max_selected
    }

    /// What the policy decides for one locator, before sorting.
    pub fn verdict(&self, loc: &Locator) -> Verdict {
        let ip = locator_ip(loc);
        if let Some(ip) = ip {
            if self.deny.iter().any(|p| p.contains(ip)) {
                return Verdict::Denied;
            }
            let gated = (ip.is_loopback() && !self.loopback)
                || (ip.is_unspecified() && !self.wildcard)
                || (ip.is_multicast() && !self.multicast);
            if gated {
                return Verdict::Gated;
            }
        }
        if self.allow.is_empty() || ip.is_some_and(|ip| self.allow.iter().any(|p| p.contains(ip))) {
            Verdict::Selected
        } else {
            Verdict::NotAllowed
        }
    }
}

fn parse_list<I, S>(items: I, list: &'static str) -> Result<Vec<AddressPrefix>, LocatorError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = Vec::new();
    for s in items {
        if out.len() == MAX_POLICY_PREFIXES {
            return Err(LocatorError::TooManyPrefixes {
                list,
                len: MAX_POLICY_PREFIXES + 1,
            });
        }
        out.push(s.as_ref().trim().parse()?);
    }
    Ok(out)
}

/// The policy's decision for one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Covered by the deny list.
    Denied,
    /// Refused by the loopback, wildcard or multicast switch.
    Gated,
    /// The allow list is not empty and does not cover it.
    NotAllowed,
    /// Kept.
    Selected,
}

/// How many candidates each rule dropped in one selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SelectionStats {
    /// Dropped by the deny list.
    pub denied: u32,
    /// Dropped by a switch.
    pub gated: u32,
    /// Dropped for not being on a non-empty allow list.
    pub not_allowed: u32,
    /// Dropped as duplicates of a better-ranked copy.
    pub duplicates: u32,
    /// Dropped because [`SelectionPolicy::max_selected`] was reached.
    pub truncated: u32,
}

/// The ordered, duplicate-free result of [`select_locators`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Locators in preference order; the first is the one to use.
    pub locators: Vec<Locator>,
    /// What was dropped and why.
    pub stats: SelectionStats,
}

impl Selection {
    /// The preferred locator, if any survived.
    pub fn first(&self) -> Option<&Locator> {
        self.locators.first()
    }
}

/// Select-Locators: filters `candidates` through `policy`, sorts them
/// deterministically, removes duplicates, and caps the result.
///
/// Runs once per change of a peer's addresses or of the policy; the caller
/// keeps the result and reuses it for every send.
pub fn select_locators(candidates: &[LocatorCandidate], policy: &SelectionPolicy) -> Selection {
    let mut stats = SelectionStats::default();
    let mut kept: Vec<LocatorCandidate> = Vec::with_capacity(candidates.len());
    for c in candidates {
        match policy.verdict(&c.locator) {
            Verdict::Denied => stats.denied += 1,
            Verdict::Gated => stats.gated += 1,
            Verdict::NotAllowed => stats.not_allowed += 1,
            Verdict::Selected => kept.push(LocatorCandidate {
                locator: normalized(c.locator),
                ..*c
            }),
        }
    }
    // The key is total over everything that tells candidates apart, so an
    // unstable sort is still deterministic.
    kept.sort_unstable_by_key(LocatorCandidate::sort_key);
    let mut seen: AHashSet<Locator> = AHashSet::with_capacity(kept.len());
    let mut locators = Vec::with_capacity(kept.len().min(policy.max_selected));
    for c in kept {
        if !seen.insert(c.locator) {
            stats.duplicates += 1;
        } else if locators.len() == policy.max_selected {
            stats.truncated += 1;
        } else {
            locators.push(c.locator);
        }
    }
    if stats.truncated > 0 {
        tracing::debug!(
            truncated = stats.truncated,
            max = policy.max_selected,
            "locator selection hit its ceiling"
        );
    }
    Selection { locators, stats }
}

/// Candidates of one origin and priority from a plain list, in list order.
pub fn candidates(
    list: &[Locator],
    origin: crate::types::LocatorOrigin,
    priority: u16,
) -> impl Iterator<Item = LocatorCandidate> + '_ {
    list.iter().map(move |&locator| LocatorCandidate {
        locator,
        origin,
        priority,
    })
}
