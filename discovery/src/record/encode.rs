//! Participant and endpoint descriptions to record bytes.
//!
//! Every field the description holds is written, defaults included: the
//! receiver must see the endpoint's own policies, never its own defaults.

use bytes::{BufMut, Bytes, BytesMut};

use super::{endpoint_field as ef, participant_field as pf, EncodeError, RecordKind, RecordWriter};
use crate::qos::{
    AccessScope, DestinationOrderKind, DurabilityKind, EndpointQos, History, Limit, LivelinessKind,
    OwnershipKind, QosDuration, ReliabilityKind,
};
use crate::types::{EndpointInfo, EndpointKind, Locator, ParticipantInfo};

/// Encodes a participant's description. Validates every bounded field first.
pub fn encode_participant(p: &ParticipantInfo) -> Result<Bytes, EncodeError> {
    p.validate()?;
    let cap = 128
        + p.name.len()
        + 21 * (p.discovery_locators.len() + p.user_locators.len())
        + pf::LINK_REPORT_LEN * p.links.len();
    let mut w = RecordWriter::new(RecordKind::Participant, cap);
    w.field(pf::GUID_PREFIX, &p.prefix.0)?;
    w.field(pf::NAME, p.name.as_bytes())?;
    w.field(
        pf::LEASE_DURATION,
        &p.lease_duration.as_nanos().to_be_bytes(),
    )?;
    w.field_with(pf::DISCOVERY_LOCATORS, |b| {
        put_locators(b, &p.discovery_locators)
    })?;
    w.field_with(pf::USER_LOCATORS, |b| put_locators(b, &p.user_locators))?;
    w.field(pf::SHARED_MEMORY, &[u8::from(p.shared_memory)])?;
    if let Some(ms) = p.started_ms {
        w.field(pf::STARTED, &ms.to_be_bytes())?;
    }
    if !p.links.is_empty() {
        w.field_with(pf::LINKS, |b| {
            // validate() bounds the count by MAX_LINK_REPORTS, far below u16::MAX.
            b.put_u16(p.links.len() as u16);
            for l in &p.links {
                b.put_slice(&l.peer);
                b.put_u32(l.rtt_us);
                b.put_u8(u8::from(l.extended));
            }
        })?;
    }
    w.finish()
}

/// Encodes one endpoint's description with every policy it holds.
/// Validates every bounded field and QoS range first.
pub fn encode_endpoint(e: &EndpointInfo) -> Result<Bytes, EncodeError> {
    e.validate()?;
    let names: usize = e.partitions.names().iter().map(|n| 2 + n.len()).sum();
    let cap =
        256 + e.topic.as_str().len() + e.type_name.as_str().len() + names + 21 * e.locators.len();
    let mut w = RecordWriter::new(RecordKind::Endpoint, cap);
    let mut guid = [0u8; 16];
    guid[..12].copy_from_slice(&e.guid.prefix.0);
    guid[12..].copy_from_slice(&e.guid.entity.0);
    w.field(ef::GUID, &guid)?;
    w.field(
        ef::KIND,
        &[match e.kind {
            EndpointKind::Writer => 0,
            EndpointKind::Reader => 1,
        }],
    )?;
    w.field(ef::TOPIC, e.topic.as_str().as_bytes())?;
    w.field(ef::TYPE_NAME, e.type_name.as_str().as_bytes())?;
    w.field(ef::TYPE_HASH, &e.type_hash.0)?;
    w.field_with(ef::PARTITIONS, |b| {
        let names = e.partitions.names();
        // validate() bounds the count by MAX_PARTITIONS and each name by
        // MAX_NAME_LEN, both far below u16::MAX.
        b.put_u16(names.len() as u16);
        for n in names {
            b.put_u16(n.len() as u16);
            b.put_slice(n.as_bytes());
        }
    })?;
    w.field_with(ef::LOCATORS, |b| put_locators(b, &e.locators))?;
    put_qos(&mut w, &e.qos)?;
    w.finish()
}

fn put_locators(b: &mut BytesMut, list: &[Locator]) {
    for l in list {
        // Kind codes are 1..=16, so the u8 is exact.
        b.put_u8(l.kind.code() as u8);
        b.put_u32(l.port);
        b.put_slice(&l.address);
    }
}

fn dur(d: QosDuration) -> [u8; 8] {
    d.as_nanos().to_be_bytes()
}

fn put_limit(b: &mut BytesMut, l: Limit) {
    match l {
        Limit::Unlimited => {
            b.put_u8(0);
            b.put_u32(0);
        }
        Limit::AtMost(n) => {
            b.put_u8(1);
            b.put_u32(n);
        }
    }
}

fn put_qos(w: &mut RecordWriter, q: &EndpointQos) -> Result<(), EncodeError> {
    w.field_with(ef::RELIABILITY, |b| {
        b.put_u8(match q.reliability.kind {
            ReliabilityKind::BestEffort => 0,
            ReliabilityKind::Reliable => 1,
        });
        b.put_slice(&dur(q.reliability.max_blocking_time));
    })?;
    w.field(
        ef::DURABILITY,
        &[match q.durability {
            DurabilityKind::Volatile => 0,
            DurabilityKind::TransientLocal => 1,
            DurabilityKind::Transient => 2,
            DurabilityKind::Persistent => 3,
        }],
    )?;
    w.field(ef::DEADLINE, &dur(q.deadline.period))?;
    w.field(ef::LATENCY_BUDGET, &dur(q.latency_budget.duration))?;
    w.field(
        ef::OWNERSHIP,
        &[match q.ownership {
            OwnershipKind::Shared => 0,
            OwnershipKind::Exclusive => 1,
        }],
    )?;
    w.field(ef::OWNERSHIP_STRENGTH, &q.ownership_strength.to_be_bytes())?;
    w.field_with(ef::LIVELINESS, |b| {
        b.put_u8(match q.liveliness.kind {
            LivelinessKind::Automatic => 0,
            LivelinessKind::ManualByParticipant => 1,
            LivelinessKind::ManualByTopic => 2,
        });
        b.put_slice(&dur(q.liveliness.lease_duration));
    })?;
    w.field(
        ef::DESTINATION_ORDER,
        &[match q.destination_order {
            DestinationOrderKind::ByReceptionTimestamp => 0,
            DestinationOrderKind::BySourceTimestamp => 1,
        }],
    )?;
    w.field(
        ef::PRESENTATION,
        &[
            match q.presentation.access_scope {
                AccessScope::Instance => 0,
                AccessScope::Topic => 1,
                AccessScope::Group => 2,
            },
            u8::from(q.presentation.coherent_access),
            u8::from(q.presentation.ordered_access),
        ],
    )?;
    w.field_with(ef::HISTORY, |b| match q.history {
        History::KeepLast { depth } => {
            b.put_u8(0);
            b.put_u32(depth);
        }
        History::KeepAll => {
            b.put_u8(1);
            b.put_u32(0);
        }
    })?;
    w.field_with(ef::RESOURCE_LIMITS, |b| {
        let rl = &q.resource_limits;
        put_limit(b, rl.max_samples);
        put_limit(b, rl.max_instances);
        put_limit(b, rl.max_samples_per_instance);
    })?;
    w.field(ef::LIFESPAN, &dur(q.lifespan.duration))?;
    Ok(())
}
