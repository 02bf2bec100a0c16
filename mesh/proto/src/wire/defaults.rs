//! Protocol constants and the C++ library's defaults that the wire format depends on.
//!
//! **Owns:** the protocol's constants and defaults. **Must not touch:** anything configurable at
//! run time (`config`).

use std::net::{Ipv4Addr, SocketAddrV4};

/// The protocol version carried in announces and Hellos.
pub const PROTOCOL_VERSION: u8 = 1;
/// Default upper bound on a frame's `length` field (16 MiB).
pub const MAX_MESSAGE_BYTES: u32 = 16 * 1024 * 1024;
/// TTL given to a message when it is originated.
pub const INITIAL_TTL: u8 = 8;
/// Default mesh group name.
pub const DEFAULT_GROUP: &str = "default";
/// Default discovery multicast group.
pub const MULTICAST_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 42, 99);
/// Default discovery UDP port.
pub const MULTICAST_PORT: u16 = 45454;
/// Default discovery multicast destination (group and port).
pub const MULTICAST_ADDR: SocketAddrV4 = SocketAddrV4::new(MULTICAST_GROUP, MULTICAST_PORT);
/// IP TTL used for discovery datagrams (they must stay on the local link).
pub const MULTICAST_TTL: u32 = 1;

/// Magic at the start of every discovery datagram.
pub const ANNOUNCE_MAGIC: [u8; 4] = *b"MMCA";
/// Beacon flag bit: the sender runs a secured (PSK) mesh and appended a MAC.
pub const ANNOUNCE_FLAG_SECURED: u8 = 0x01;
/// Length of the keyed MAC that ends a secured announce.
pub const ANNOUNCE_MAC_LEN: usize = 16;

/// Size of the `length` prefix of a TCP frame.
pub const LENGTH_PREFIX_LEN: usize = 4;
/// Size of the `length` prefix plus the frame type byte.
pub const FRAME_HEADER_LEN: usize = 5;
/// Size of a Data frame on the wire without its payload: `4 + 1 + 16 + 16 + 16 + 1 + 4`.
pub const DATA_HEADER_LEN: usize = 58;
/// Longest `str` the wire can carry (its length is one byte).
pub const MAX_STR_LEN: usize = 255;

/// Length of an X25519 ephemeral public key in a secured Hello.
pub const EPH_PUB_KEY_LEN: usize = 32;
/// Length of an Ed25519 identity public key.
pub const ID_PUB_KEY_LEN: usize = 32;
/// Length of an Ed25519 signature.
pub const SIG_LEN: usize = 64;
/// Length of the AuthConfirm PSK confirmation tag.
pub const CONFIRM_TAG_LEN: usize = 32;
/// The longest v1 Hello `length` field: type byte, node id, version, port, a 255-byte group
/// name, nonce, an ephemeral key and an identity with a 255-byte name (606 bytes).
pub const MAX_HELLO_V1_LEN: u32 = 1
    + 16
    + 1
    + 2
    + (1 + MAX_STR_LEN as u32)
    + 8
    + (1 + EPH_PUB_KEY_LEN as u32)
    + (1 + ID_PUB_KEY_LEN as u32 + 1 + MAX_STR_LEN as u32);
/// The largest `length` a frame may announce before the handshake is through. Only Hello,
/// HelloAck and AuthConfirm (98 bytes) are valid then, and the longest v1 Hello is
/// [`MAX_HELLO_V1_LEN`]; the rest leaves Shoal's Hello extension room for a tail of about
/// 3.4 KiB. Without this bound a stranger could make the node buffer a frame of
/// `maxMessageBytes` (16 MiB) per connection before saying who it is.
pub const MAX_HANDSHAKE_FRAME_LEN: u32 = 4096;
