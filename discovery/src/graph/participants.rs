//! Participants: admission (a known prefix refreshed in place, a new one needing room),
//! leases, expiry and removal with everything they own.
//!
//! **Owns:** the participant table's changes. **Must not touch:** endpoint matching (a
//! removed participant's endpoints go through `endpoints.rs`).

use tracing::{debug, info};

use super::entries::{slot, ParticipantEntry};
use super::{AdmitError, DiscoveryGraph, ParticipantAdmission, Removal, Table};
use crate::qos::QosDuration;
use crate::types::{GuidPrefix, ParticipantInfo, Time};

impl DiscoveryGraph {
    /// A participant's endpoint count and their footprint in bytes.
    pub fn participant_usage(&self, prefix: &GuidPrefix) -> Option<(usize, usize)> {
        self.by_prefix.get(prefix).map(|&ps| {
            let p = &self.participants[ps as usize];
            (p.endpoints.len(), p.bytes)
        })
    }

    /// The lease a remote participant announcing `lease` is admitted with:
    /// at most [`super::Capacities::max_lease`].
    pub fn admitted_lease(&self, lease: QosDuration) -> QosDuration {
        // A cap configured at zero would make every record invalid: one nanosecond is
        // the least lease there is.
        lease.min(
            self.config
                .capacities
                .max_lease
                .max(QosDuration::from_nanos(1)),
        )
    }

    /// When a participant's lease runs out (`Time(u64::MAX)`: never, a local one).
    pub fn participant_expiry(&self, prefix: &GuidPrefix) -> Option<Time> {
        self.by_prefix
            .get(prefix)
            .map(|&ps| self.participants[ps as usize].expires_at)
    }

    /// Renews a remote participant's lease as heard at `now` without a new record (its
    /// node proved it lives some other way: a link to it is up) and returns the new
    /// expiry; `None` for an unknown prefix or a local participant. The lease is the one
    /// it was admitted with (capped at [`super::Capacities::max_lease`]), never longer.
    pub fn renew_participant(&mut self, prefix: &GuidPrefix, now: Time) -> Option<Time> {
        let &ps = self.by_prefix.get(prefix)?;
        let entry = &mut self.participants[ps as usize];
        if entry.local {
            return None;
        }
        entry.expires_at = now.saturating_add(entry.info.lease_duration);
        Some(entry.expires_at)
    }

    /// Registers one of this process's own participants. Local participants
    /// never expire.
    pub fn add_local_participant(
        &mut self,
        info: ParticipantInfo,
    ) -> Result<ParticipantAdmission, AdmitError> {
        self.admit_participant_inner(info, true, Time(u64::MAX))
    }

    /// Admit-Record for a participant announcement heard at `now`: a known
    /// prefix is replaced in place and its lease renewed even when the table
    /// is full; a new one needs room. Its lease is capped at
    /// [`super::Capacities::max_lease`] (the stored record carries the capped lease), so a
    /// participant that stops announcing always expires.
    pub fn admit_participant(
        &mut self,
        mut info: ParticipantInfo,
        now: Time,
    ) -> Result<ParticipantAdmission, AdmitError> {
        info.lease_duration = self.admitted_lease(info.lease_duration);
        let expires_at = now.saturating_add(info.lease_duration);
        self.admit_participant_inner(info, false, expires_at)
    }

    fn admit_participant_inner(
        &mut self,
        info: ParticipantInfo,
        local: bool,
        expires_at: Time,
    ) -> Result<ParticipantAdmission, AdmitError> {
        let table = if local {
            Table::LocalParticipants
        } else {
            Table::RemoteParticipants
        };
        if let Err(source) = info.validate() {
            return self.reject(AdmitError::Invalid { table, source });
        }
        if let Some(&ps) = self.by_prefix.get(&info.prefix) {
            let entry = &mut self.participants[ps as usize];
            if entry.local != local {
                return self.reject(AdmitError::WrongLocality { table });
            }
            entry.info = info;
            entry.expires_at = expires_at;
            return Ok(ParticipantAdmission::Refreshed);
        }
        let capacity = self.capacity(table);
        if self.occupancy[table as usize] >= capacity {
            return self.reject(AdmitError::TableFull { table, capacity });
        }
        let prefix = info.prefix;
        let ps = slot(self.participants.insert(ParticipantEntry {
            info,
            local,
            expires_at,
            endpoints: Vec::new(),
            bytes: 0,
        }));
        self.by_prefix.insert(prefix, ps);
        self.occupancy[table as usize] += 1;
        debug!(?prefix, local, "participant admitted");
        Ok(ParticipantAdmission::Inserted)
    }

    /// The participant with this prefix, if known.
    pub fn participant(&self, prefix: &GuidPrefix) -> Option<&ParticipantInfo> {
        self.by_prefix
            .get(prefix)
            .map(|&ps| &self.participants[ps as usize].info)
    }

    /// True if the prefix belongs to a known participant.
    pub fn knows_participant(&self, prefix: &GuidPrefix) -> bool {
        self.by_prefix.contains_key(prefix)
    }

    /// True if the prefix belongs to a local participant.
    pub fn is_local_participant(&self, prefix: &GuidPrefix) -> bool {
        self.by_prefix
            .get(prefix)
            .is_some_and(|&ps| self.participants[ps as usize].local)
    }

    /// Known participant prefixes, sorted.
    pub fn participant_prefixes(&self) -> Vec<GuidPrefix> {
        let mut v: Vec<GuidPrefix> = self
            .participants
            .iter()
            .map(|(_, p)| p.info.prefix)
            .collect();
        v.sort_unstable();
        v
    }

    /// Removes a participant with all its endpoints and their matches:
    /// O(its endpoints + their matches). `None` if unknown.
    pub fn remove_participant(&mut self, prefix: &GuidPrefix) -> Option<Removal> {
        let mut removal = Removal::default();
        self.remove_participant_into(prefix, &mut removal)
            .then_some(removal)
    }

    fn remove_participant_into(&mut self, prefix: &GuidPrefix, out: &mut Removal) -> bool {
        let Some(ps) = self.by_prefix.remove(prefix) else {
            return false;
        };
        // Popping from the end means no swap inside the participant's list.
        while let Some(&es) = self.participants[ps as usize].endpoints.last() {
            let (id, guid, n) = self.remove_endpoint_slot(es);
            out.endpoints.push((id, guid));
            out.matches += n;
        }
        let entry = self.participants.remove(ps as usize);
        let table = if entry.local {
            Table::LocalParticipants
        } else {
            Table::RemoteParticipants
        };
        self.occupancy[table as usize] -= 1;
        out.participants.push(*prefix);
        true
    }

    /// Removes every remote participant whose lease ended before `now`, with
    /// all their endpoints and matches, in one call. Local participants and
    /// infinite leases never expire.
    pub fn expire(&mut self, now: Time) -> Removal {
        let mut expired: Vec<GuidPrefix> = self
            .participants
            .iter()
            .filter(|(_, p)| !p.local && p.expires_at < now)
            .map(|(_, p)| p.info.prefix)
            .collect();
        expired.sort_unstable();
        let mut removal = Removal::default();
        for prefix in &expired {
            self.remove_participant_into(prefix, &mut removal);
        }
        if !expired.is_empty() {
            info!(
                participants = removal.participants.len(),
                endpoints = removal.endpoints.len(),
                matches = removal.matches,
                "participants expired"
            );
        }
        removal
    }
}
