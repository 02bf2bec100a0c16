//! This node's announcements: the periodic cycle of every own record, packed into as few
//! Discovery frames as fit the frame bound, the same cycle out of turn for new neighbours
//! only (their catch-up), and the immediate frames of a new or removed endpoint.
//!
//! **Owns:** the packing, numbering (`seq`, `cycle`, `part`, `parts`) and order of own
//! frames. **Must not touch:** the records' bytes (built once by the `Announcer`, resent
//! unchanged) or anyone else's records ("a node never describes an endpoint that is not its
//! own": only the announcer's records go out here).

use super::super::config::{DISCOVERY_HEADER_LEN, ENTRY_HEADER_LEN};
use super::{TopicsCore, TopicsOutput};
use crate::wire::DiscoveryEntry;
use bytes::Bytes;
use shoal_discovery::types::Guid;

impl TopicsCore {
    /// An immediate frame (`parts = 0`): the participant record first (a receiver that has
    /// not heard of us yet admits the endpoint only after it), then the new endpoint's record
    /// or the withdrawal.
    pub(super) fn announce_now(&mut self, added: Option<Guid>, withdrawn: Option<Guid>) {
        let mut f = self.frame(self.cycle, 0, 0);
        f.entries.push(DiscoveryEntry::Record(
            self.announcer.participant_record().clone(),
        ));
        if let Some(rec) = added.and_then(|g| self.announcer.endpoint_record(&g)) {
            f.entries.push(DiscoveryEntry::Record(rec.clone()));
        }
        if let Some(g) = withdrawn {
            f.entries
                .push(DiscoveryEntry::Withdraw(super::guid_bytes(&g)));
        }
        self.out.push_back(TopicsOutput::Flood {
            frame: f,
            except: None,
        });
    }

    /// The periodic announce cycle, flooded to every capable link (the links waiting for a
    /// catch-up get it with everyone else).
    pub(super) fn announce_cycle(&mut self) {
        self.catch_up.clear();
        for frame in self.cycle_frames(self.ttl) {
            self.out.push_back(TopicsOutput::Flood {
                frame,
                except: None,
            });
        }
    }

    /// A cycle out of turn for the new capable links only, so a new neighbour hears every
    /// own record at once without the whole mesh hearing them again: sent on those links
    /// with `ttl = 1` (not passed on), numbered as a cycle of its own (the next cycle
    /// number, fresh `seq`s) so its receiver collects a complete, current cycle and prunes
    /// by it, and no other receiver sees part of a cycle it could mistake for a whole one.
    ///
    /// The nodes beyond a new neighbour hear this node's records at its next periodic
    /// cycle (within one period). Flooding the catch-up when every capable link is new (a
    /// node just started or cut off) was tried: in a full mesh booting at once every node
    /// is in that state, and it cost 352 frames at 12 nodes against 132 (`proto_topics`).
    pub(super) fn announce_catch_up(&mut self) {
        let links = std::mem::take(&mut self.catch_up);
        if links.is_empty() {
            return;
        }
        for frame in self.cycle_frames(1) {
            self.out.push_back(TopicsOutput::Send {
                frame,
                links: links.clone(),
            });
        }
    }

    /// One cycle's frames under a new cycle number: every own record, the participant
    /// record first in every frame.
    fn cycle_frames(&mut self, ttl: u8) -> Vec<crate::wire::Discovery> {
        // Room for the signature entry an identity-mode node appends to each frame.
        let budget =
            self.cfg.max_discovery_frame_bytes - crate::wire::DISCOVERY_SIGNATURE_ENTRY_LEN;
        let participant = self.announcer.participant_record().clone();
        let first = DISCOVERY_HEADER_LEN + ENTRY_HEADER_LEN + participant.len();
        let mut frames: Vec<Vec<Bytes>> = vec![vec![participant.clone()]];
        let mut size = first;
        let mut endpoints: Vec<Bytes> = Vec::with_capacity(self.announcer.len());
        self.announcer
            .announce_cycle(|rec| endpoints.push(rec.clone()));
        // The announcer hands the participant record first: it is already in every frame.
        for rec in endpoints.into_iter().skip(1) {
            let need = ENTRY_HEADER_LEN + rec.len();
            if size + need > budget {
                frames.push(vec![participant.clone()]);
                size = first;
            }
            size += need;
            frames.last_mut().expect("one frame at least").push(rec);
        }
        self.cycle = self.cycle.wrapping_add(1);
        let parts = u16::try_from(frames.len()).unwrap_or(u16::MAX);
        let cycle = self.cycle;
        frames
            .into_iter()
            .enumerate()
            .take(usize::from(parts))
            .map(|(i, recs)| {
                let mut f = self.frame(cycle, i as u16, parts);
                f.ttl = ttl;
                f.entries = recs.into_iter().map(DiscoveryEntry::Record).collect();
                f
            })
            .collect()
    }
}
