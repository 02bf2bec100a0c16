//! The measurement behind the record cipher's choice (issue 14, `bench/notes/secured.md`, "Record crypto"):
//! seal + open in place of one record (64 B, 1 KiB, 16 KiB) with ring, aws-lc-rs and the
//! pure-Rust chacha20poly1305 used before, in interleaved rounds, timed in thread CPU time so
//! other processes on a shared machine do not count.
//!
//! `cargo run --release --features ring,aws-lc-rs,chacha20poly1305 -- 15` (15 rounds); build
//! time per library: `cargo build --release -j2 --features ring --target-dir target/ring` (and
//! `aws-lc-rs`) from clean. `.cargo/config.toml` carries the AVX-512 cfg the old crate needed.
use std::hint::black_box;

const SIZES: [usize; 3] = [64, 1024, 16 * 1024];
const KEY: [u8; 32] = [0x42; 32];

fn nonce12(ctr: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&ctr.to_be_bytes());
    n
}

trait Aead {
    const NAME: &'static str;
    fn new() -> Self;
    /// Seals buf[..len] in place, appends the tag, then opens it again.
    fn seal_open(&self, ctr: u64, buf: &mut Vec<u8>, len: usize);
}

#[cfg(feature = "ring")]
struct Ring(ring::aead::LessSafeKey);
#[cfg(feature = "ring")]
impl Aead for Ring {
    const NAME: &'static str = "ring";
    fn new() -> Self {
        use ring::aead::*;
        Ring(LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, &KEY).unwrap(),
        ))
    }
    fn seal_open(&self, ctr: u64, buf: &mut Vec<u8>, len: usize) {
        use ring::aead::*;
        buf.truncate(len);
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce12(ctr)),
                Aad::empty(),
                &mut buf[..],
            )
            .unwrap();
        buf.extend_from_slice(tag.as_ref());
        let pt = self
            .0
            .open_in_place(
                Nonce::assume_unique_for_key(nonce12(ctr)),
                Aad::empty(),
                &mut buf[..],
            )
            .unwrap();
        black_box(pt);
    }
}

#[cfg(feature = "aws-lc-rs")]
struct Lc(aws_lc_rs::aead::LessSafeKey);
#[cfg(feature = "aws-lc-rs")]
impl Aead for Lc {
    const NAME: &'static str = "aws-lc-rs";
    fn new() -> Self {
        use aws_lc_rs::aead::*;
        Lc(LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, &KEY).unwrap(),
        ))
    }
    fn seal_open(&self, ctr: u64, buf: &mut Vec<u8>, len: usize) {
        use aws_lc_rs::aead::*;
        buf.truncate(len);
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce12(ctr)),
                Aad::empty(),
                &mut buf[..],
            )
            .unwrap();
        buf.extend_from_slice(tag.as_ref());
        let pt = self
            .0
            .open_in_place(
                Nonce::assume_unique_for_key(nonce12(ctr)),
                Aad::empty(),
                &mut buf[..],
            )
            .unwrap();
        black_box(pt);
    }
}

#[cfg(feature = "chacha20poly1305")]
struct Rc(chacha20poly1305::ChaCha20Poly1305);
#[cfg(feature = "chacha20poly1305")]
impl Aead for Rc {
    const NAME: &'static str = "chacha20poly1305";
    fn new() -> Self {
        use chacha20poly1305::{Key, KeyInit};
        Rc(chacha20poly1305::ChaCha20Poly1305::new(<&Key>::from(&KEY)))
    }
    fn seal_open(&self, ctr: u64, buf: &mut Vec<u8>, len: usize) {
        use chacha20poly1305::{AeadInOut, Tag};
        buf.truncate(len);
        let n = nonce12(ctr).into();
        let tag = self
            .0
            .encrypt_inout_detached(&n, &[], (&mut buf[..]).into())
            .unwrap();
        buf.extend_from_slice(&tag);
        let (body, t) = buf.split_at_mut(len);
        let t = Tag::try_from(&*t).unwrap();
        self.0
            .decrypt_inout_detached(&n, &[], body.into(), &t)
            .unwrap();
        black_box(body);
    }
}

/// This thread's CPU time, ns: on a shared machine, time spent descheduled is not counted.
fn thread_cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// ns (thread CPU time) per seal+open, one batch sized to ~20 ms.
fn batch<A: Aead>(a: &A, size: usize, ctr: &mut u64) -> f64 {
    let mut buf = vec![0xa5u8; size + 16];
    let iters = (20_000_000 / (200 + size * 3)).max(50) as u64;
    let t = thread_cpu_ns();
    for _ in 0..iters {
        a.seal_open(*ctr, &mut buf, size);
        *ctr += 1;
    }
    (thread_cpu_ns() - t) as f64 / iters as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    #[cfg(feature = "ring")]
    let r = Ring::new();
    #[cfg(feature = "aws-lc-rs")]
    let l = Lc::new();
    #[cfg(feature = "chacha20poly1305")]
    let c = Rc::new();
    for size in SIZES {
        let mut res: Vec<(&str, Vec<f64>)> = Vec::new();
        let mut ctr = 0u64;
        for _ in 0..rounds {
            let mut i = 0;
            #[cfg(feature = "ring")]
            {
                if res.len() <= i {
                    res.push((Ring::NAME, vec![]))
                }
                res[i].1.push(batch(&r, size, &mut ctr));
                i += 1;
            }
            #[cfg(feature = "aws-lc-rs")]
            {
                if res.len() <= i {
                    res.push((Lc::NAME, vec![]))
                }
                res[i].1.push(batch(&l, size, &mut ctr));
                i += 1;
            }
            #[cfg(feature = "chacha20poly1305")]
            {
                if res.len() <= i {
                    res.push((Rc::NAME, vec![]))
                }
                res[i].1.push(batch(&c, size, &mut ctr));
                i += 1;
            }
            let _ = i;
        }
        for (name, mut v) in res {
            let min = v.iter().cloned().fold(f64::MAX, f64::min);
            let med = median(&mut v);
            println!("{size:>6} B  {name:<18} seal+open median {:>9.3} us  min {:>9.3} us  ({:.2} GB/s per direction at median)",
                med / 1000.0, min / 1000.0, size as f64 / (med / 2.0));
        }
    }
}
