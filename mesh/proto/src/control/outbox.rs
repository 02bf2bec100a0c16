//! The control core's outbox to the shards, in two lanes: link and table changes first, then
//! frames.
//!
//! **Owns:** the order in which shard commands leave the control core, and the outbox ceiling.
//! **Must not touch:** what the commands say (the rest of the core decides that).
//!
//! Why two lanes. A shard takes the commands one after the other, and a busy one takes them
//! slowly; a node whose links come up together floods its own record on every one and catches
//! each new neighbour up (thousands of Membership frames at 40 nodes). In one FIFO, the
//! hand-over of a link established later (its `AddLink`) waited behind all of them: at 40
//! processes on two cores, up to 7 600 commands and 5.7 s, while the peer, whose end was
//! established at the handshake, heard nothing on it and closed it after `heartbeat_timeout`
//! (3 s); the redial was refused as a late claim until this end timed out in turn, and every
//! close re-flooded two records to everyone (the storm's link churn, issue 29). So the
//! commands that set up or change links and tables go ahead of the frames:
//!
//! - **setup lane**: `AddLink`, `Install`, `Uninstall`, `SampleRoutes`, `ReversePaths`,
//!   `PauseDiscovery`, `Sync`. None of them depends on a frame queued before it: a frame is
//!   queued only for a link already placed, so a link's `AddLink` still precedes its frames;
//!   tables route Data and samples, not these control frames; a `Sync` answers for the tables
//!   (the held events wait for routes, not for frames).
//! - **frame lane**: `SendRaw`, and what must follow the frames queued before it: `Close` (a
//!   link's last frames, then its Goodbye) and `Stop`.
//!
//! Within each lane the order is kept; the setup lane is always drained first, so a command
//! keeps its place relative to every command of its own lane and to every frame queued after
//! it. Only frames are dropped at the ceiling ([`OUTBOX_CAP`] frames; the next flood repairs
//! them), never link or table changes.

use super::ShardPost;
use crate::cmd::ToShard;
use std::collections::VecDeque;

/// Ceiling of the outbox's frame lane; only Membership, Discovery and identity frames are
/// dropped at it (the next periodic flood repairs them), never link or routing changes.
pub const OUTBOX_CAP: usize = 65_536;

/// The shard outbox (see the module docs).
#[derive(Debug, Default)]
pub(super) struct ShardOutbox {
    setup: VecDeque<ShardPost>,
    frames: VecDeque<ShardPost>,
}

impl ShardOutbox {
    /// Queues `post` in its lane; false (and nothing queued) when it is a frame and the frame
    /// lane is at its ceiling.
    pub(super) fn push(&mut self, post: ShardPost) -> bool {
        match post.1 {
            ToShard::SendRaw { .. } if self.frames.len() >= OUTBOX_CAP => false,
            ToShard::SendRaw { .. }
            | ToShard::Close { .. }
            | ToShard::Retire { .. }
            | ToShard::Stop => {
                self.frames.push_back(post);
                true
            }
            ToShard::AddLink(_)
            | ToShard::Install { .. }
            | ToShard::Uninstall { .. }
            | ToShard::SampleRoutes(_)
            | ToShard::ReversePaths(_)
            | ToShard::PauseDiscovery { .. }
            | ToShard::Sync(_) => {
                self.setup.push_back(post);
                true
            }
        }
    }

    /// The next command to hand to a shard.
    pub(super) fn pop(&mut self) -> Option<ShardPost> {
        self.setup.pop_front().or_else(|| self.frames.pop_front())
    }

    /// Commands waiting.
    pub(super) fn len(&self) -> usize {
        self.setup.len() + self.frames.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.setup.is_empty() && self.frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkId;
    use bytes::Bytes;

    fn frame(link: u64) -> ShardPost {
        let link = LinkId(link);
        (
            0,
            ToShard::SendRaw {
                link,
                frame: Bytes::from_static(b"x"),
            },
        )
    }

    fn kind(p: &ShardPost) -> String {
        match &p.1 {
            ToShard::SendRaw { link, .. } => format!("frame {}", link.0),
            ToShard::Close { link, .. } => format!("close {}", link.0),
            ToShard::Uninstall { link, .. } => format!("uninstall {}", link.0),
            ToShard::Sync(t) => format!("sync {t}"),
            ToShard::Stop => "stop".into(),
            _ => "other".into(),
        }
    }

    #[test]
    fn setup_goes_ahead_of_frames_and_a_close_follows_its_frames() {
        let mut o = ShardOutbox::default();
        assert!(o.push(frame(1)));
        assert!(o.push(frame(2)));
        assert!(o.push((
            0,
            ToShard::Close {
                link: LinkId(1),
                goodbye: true
            }
        )));
        assert!(o.push((
            0,
            ToShard::Uninstall {
                peer: crate::PeerId([1; 16]),
                link: LinkId(3)
            }
        )));
        assert!(o.push(frame(2)));
        assert!(o.push((0, ToShard::Sync(7))));
        assert!(o.push((0, ToShard::Stop)));
        assert_eq!(o.len(), 7);
        let order: Vec<String> = std::iter::from_fn(|| o.pop()).map(|p| kind(&p)).collect();
        assert_eq!(
            order,
            [
                "uninstall 3",
                "sync 7",
                "frame 1",
                "frame 2",
                "close 1",
                "frame 2",
                "stop"
            ]
        );
        assert!(o.is_empty());
    }

    #[test]
    fn only_frames_are_dropped_at_the_ceiling() {
        let mut o = ShardOutbox::default();
        for _ in 0..OUTBOX_CAP {
            assert!(o.push(frame(1)));
        }
        assert!(!o.push(frame(1)));
        assert!(o.push((
            0,
            ToShard::Close {
                link: LinkId(1),
                goodbye: false
            }
        )));
        assert!(o.push((0, ToShard::Sync(1))));
        assert_eq!(o.len(), OUTBOX_CAP + 2);
    }
}
