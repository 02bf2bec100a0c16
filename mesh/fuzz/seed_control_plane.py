#!/usr/bin/env python3
"""Writes the seed corpus of the control_plane fuzz target (mesh/fuzz/seeds/control_plane).

Each seed is a sequence of the target's operations (see the table at the top of
fuzz_targets/control_plane.rs): an honest peer announcing, sending samples and reliability
frames, and the single-frame attacks of issue 24 (a prefix twin withdrawing the node's own
writer, an empty complete cycle, seq = u64::MAX, a participant record under another origin,
AckNack count = u32::MAX, Gap last = u64::MAX, Membership version = u64::MAX), a Samples
run ending at u64::MAX (the fuzzer's first find), link churn, a dial race (the
harness's second connections are inbound, so the older one wins and no late claim is refused),
and junk. The target never fails on any input; the seeds only get it past the decoders.
Usage: python3 mesh/fuzz/seed_control_plane.py
"""
import os

here = os.path.dirname(os.path.abspath(__file__))
out_dir = os.path.join(here, "seeds", "control_plane")

# pick_id bytes
ME, TWIN_ME, P0, P1, SLOT2_TWIN, P3, X50, X60 = 0, 1, 2, 3, 4, 5, 6, 7
# pick_seq bytes
NEXT, SAME, MAX = 0, 4, 5
# pick_guid bytes: own endpoints (writer t, reader t, writer u, reader u)
OWN_WT, OWN_RT, OWN_WU, OWN_RU = 0, 3, 6, 9
ENT_W, ENT_R = 1, 4  # entity 0x102 / 0x107 under a picked id's prefix


def participant(lease_30s=True):
    return [25 if lease_30s else 0]


def endpoint(writer, topic="t", reliable=True, partitions=0):
    k = {("t", True): 1, ("t", False): 2, ("u", True): 36, ("u", False): 32}[(topic, writer)]
    return [k, ENT_W if writer else ENT_R, 0, 1 if reliable else 0, partitions]


def withdraw(guid):
    return [3] + guid


def discovery(slot, origin, seq, entries, parts=0, ttl=3, signed=False):
    c = (parts & 3) << 2 | (0x80 if signed else 0)
    out = [1, slot, origin, seq, ttl, c, len(entries)]
    for e in entries:
        out += e
    if signed:
        out += [0x42] * 96
    return out


def heartbeat(slot, writer, first_sel=0, delta=3):
    return [2, slot, 0] + writer + [OWN_RT, 0, first_sel, delta]


def acknack(slot, writer, reader, count_max=False, base_sel=0):
    k = 1 | (4 if count_max else 0)
    tail = [] if count_max else [5]
    return [2, slot, k] + writer + reader + [0, base_sel, 0, 0] + tail


def gap(slot, writer, reader, first_sel=0):
    return [2, slot, 3] + writer + reader + [0, first_sel, 0]


def samples(slot, writer, count=3, first=None):
    sel = [0] if first is None else [2] + list(first.to_bytes(8, "big"))
    return [4, slot] + writer + sel + [count, 0]


def membership(slot, origin, seq, neighbours, signed=False):
    k = len(neighbours) | (0x80 if signed else 0)
    out = [3, slot, origin, seq, k] + neighbours
    if signed:
        out += [0x42] * 96
    return out


def advance_ms(ms):
    return [5, 0, (ms >> 8) & 0x03, ms & 0xFF]


def advance_s(s, silent=False):
    return [5, 0, 0xC0 if silent else 0x80, (s - 1) & 0x3F]


P0_W = [ENT_W, P0]
P0_R = [ENT_R, P0]
honest = (
    membership(0, P0, NEXT, [ME, X50])
    + discovery(0, P0, NEXT, [participant(), endpoint(True), endpoint(False)], parts=1)
    + advance_ms(50)
    + samples(0, P0_W)
    + heartbeat(0, P0_W)
    + acknack(0, [OWN_WT], P0_R)
    + advance_ms(300)
)

seeds = {
    "honest": honest,
    "twin-withdraws-own-writer": honest
    + discovery(2, SLOT2_TWIN, NEXT, [withdraw([OWN_WT])])
    + discovery(0, TWIN_ME, NEXT, [withdraw([OWN_RT]), withdraw([OWN_WU])]),
    "empty-complete-cycle": honest + discovery(1, P0, NEXT, [], parts=1) + advance_ms(100),
    "seq-max": honest + discovery(1, P0, MAX, [participant()]) + advance_s(5) + honest,
    "participant-under-other-origin": honest
    + discovery(1, P1, NEXT, [[130, P0], endpoint(True)]),
    "acknack-count-max": honest
    + acknack(1, [OWN_WT], P0_R, count_max=True, base_sel=2)
    + acknack(0, [OWN_WT], P0_R),
    "gap-last-max": honest + gap(0, P0_W, [OWN_RT], first_sel=2) + heartbeat(0, P0_W, 2),
    "membership-version-max": honest + membership(1, ME, MAX, [P1]) + membership(1, P1, MAX, [ME]),
    "signed-junk": honest
    + membership(0, P0, NEXT, [ME], signed=True)
    + discovery(0, P0, NEXT, [participant()], signed=True),
    "link-churn": honest
    + [6, 0]
    + advance_s(3)
    + [7, 0]
    + honest
    + [8, 1]
    + advance_s(40, silent=True)
    + [7, 1],
    # A second connection of slot 0's peer while the first is up: a dial race (the newer
    # inbound one loses and is retired); the winner's samples wait until the loser, read as
    # the winner, ends (the peer closes it), or until the hold runs out (time passes).
    "dial-race": honest
    + [7, 0x80]
    + samples(0, P0_W)
    + samples(0x80, P0_W)
    + [6, 0x80]
    + samples(0, P0_W)
    + [7, 0x80]
    + samples(0, P0_W)
    + advance_s(2)
    + samples(0, P0_W),
    "samples-end-of-time": honest + samples(0, P0_W, 2, first=2**64 - 2) + samples(0, P0_W),
    "raw-junk": honest + [0, 0, 0, 9, 0, 0, 0, 5, 4, 1, 2, 3, 4] + [0, 3, 0, 4, 0xFF, 0xFF, 0xFF, 0xFF],
}

os.makedirs(out_dir, exist_ok=True)
for name, ops in seeds.items():
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(bytes(b & 0xFF for b in ops))
print(f"{len(seeds)} seeds in {out_dir}")
