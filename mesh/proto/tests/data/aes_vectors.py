#!/usr/bin/env python3
"""Derives the AES-256-GCM vectors of mesh/proto/protocol/aes-256-gcm.md independently of Shoal's
code (Python `cryptography` for X25519 and AES-GCM, `hashlib.blake2b` with the digest-length
parameter, as libsodium's crypto_generichash). Run: python3 aes_vectors.py"""
import hashlib
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def b2(key, msg, n):
    return hashlib.blake2b(msg, key=key, digest_size=n).digest()


def pub(sk):
    return X25519PrivateKey.from_private_bytes(sk).public_key().public_bytes_raw()


psk, group = b"test-psk", b"vector-group"
sk_a = bytes(range(0x00, 0x20))
sk_b = bytes(range(0x20, 0x40))
# A: extension version 1, features EXTENDED_FRAMES | SIGNED_RECORDS | AES_GCM_RECORDS, no tail.
ext_a = b"SHOL" + bytes([1]) + (7).to_bytes(8, "big") + (0).to_bytes(2, "big")
# B: a later extension version 2 with a 2-byte tail (bound like any other byte).
ext_b = b"SHOL" + bytes([2]) + (7).to_bytes(8, "big") + (2).to_bytes(2, "big") + b"\xbe\xef"

k = b2(b"multimaster-psk-v1", psk, 32)
pk_a, pk_b = pub(sk_a), pub(sk_b)
dh = X25519PrivateKey.from_private_bytes(sk_a).exchange(X25519PublicKey.from_public_bytes(pk_b))
lo, hi = sorted([pk_a, pk_b])
master = b2(k, dh + lo + hi + group, 64)
ext_lo, ext_hi = (ext_a, ext_b) if pk_a == lo else (ext_b, ext_a)
t = len(ext_lo).to_bytes(4, "big") + ext_lo + len(ext_hi).to_bytes(4, "big") + ext_hi
kab = b2(master, b"shoal-aes256gcm-keys-v1" + t, 64)
ka, kb = kab[:32], kab[32:]
confirm = b2(master, b"shoal-aes256gcm-confirm-v1" + t, 32)
tx_a = ka if pk_a == lo else kb
tx_b = kb if pk_a == lo else ka


def record(key, ctr, frame):
    sealed = AESGCM(key).encrypt(bytes(4) + ctr.to_bytes(8, "big"), frame, None)
    return len(sealed).to_bytes(4, "big") + sealed


membership = bytes.fromhex(
    "0000002b060102030405060708090a0b0c0d0e0f10000001a228303e2b0001f0"
    "e0d0c0b0a090807060504030201000"
)
heartbeat = bytes.fromhex("0000000103")
for name, v in [
    ("ext_A", ext_a), ("ext_B", ext_b), ("eph_pk_A", pk_a), ("eph_pk_B", pk_b),
    ("dh", dh), ("master", master), ("T", t), ("kA||kB", kab), ("confirmKey", confirm),
    ("tag_A", b2(confirm, pk_a, 32)), ("tag_B", b2(confirm, pk_b, 32)),
    ("tx_A", tx_a), ("tx_B", tx_b),
    ("record_A0", record(tx_a, 0, membership)), ("record_A1", record(tx_a, 1, heartbeat)),
]:
    print(f"{name} = {v.hex()}")
