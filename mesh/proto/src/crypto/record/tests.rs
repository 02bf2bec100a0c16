use super::*;

const KEY: [u8; 32] = [3; 32];

fn stream(pieces: &[&[u8]]) -> Vec<u8> {
    let mut sealer = RecordSealer::new(&KEY, 1 << 20);
    let mut out = Vec::new();
    for p in pieces {
        sealer.seal_frame(&mut out, p).unwrap();
    }
    out
}

/// Address of `buf[at]` in the reader's buffer.
fn addr(rr: &mut RecordReader, at: usize) -> usize {
    let b = rr.take_buffer();
    let p = b.as_ptr() as usize + at;
    rr.restore_buffer(b);
    p
}

#[test]
fn plaintext_of_a_record_is_read_where_it_was_decrypted() {
    let (a, b) = (vec![0xa1; 300], vec![0xb2; 40]);
    let s = stream(&[&a, &b]);
    let mut rr = RecordReader::new(RecordOpener::new(&KEY, 1 << 20), &s);
    let first = addr(&mut rr, RECORD_HEADER_LEN);
    let second = addr(&mut rr, 2 * RECORD_HEADER_LEN + a.len() + RECORD_TAG_LEN);
    assert!(rr.open_next().unwrap());
    assert_eq!(rr.plaintext(), &a[..]);
    assert_eq!(rr.plaintext().as_ptr() as usize, first, "not moved");
    let frame = rr.split_plaintext(a.len());
    assert_eq!(&frame[..], &a[..]);
    assert!(rr.open_next().unwrap());
    assert_eq!(rr.plaintext(), &b[..]);
    assert_eq!(rr.plaintext().as_ptr() as usize, second, "not moved");
    assert!(!rr.open_next().unwrap());
    assert_eq!(rr.moved_bytes(), 0);
    assert_eq!(rr.pending_ciphertext(), 0);
    rr.finish().unwrap();
}

#[test]
fn a_frame_spanning_records_is_joined_by_moving_the_shorter_part() {
    // Short head, long tail: the head moves up to the tail.
    let s = stream(&[&[1; 10], &[2; 500]]);
    let mut rr = RecordReader::new(RecordOpener::new(&KEY, 1 << 20), &s);
    let tail = addr(&mut rr, 2 * RECORD_HEADER_LEN + 10 + RECORD_TAG_LEN);
    assert!(rr.open_next().unwrap());
    assert!(rr.open_next().unwrap());
    assert_eq!(rr.plaintext().len(), 510);
    assert!(rr.plaintext()[..10].iter().all(|&x| x == 1));
    assert!(rr.plaintext()[10..].iter().all(|&x| x == 2));
    assert_eq!(
        rr.plaintext().as_ptr() as usize + 10,
        tail,
        "the tail stayed"
    );
    assert_eq!(rr.moved_bytes(), 10);
    // Long head, short tail: the tail moves down to the head.
    let s = stream(&[&[1; 500], &[2; 10]]);
    let mut rr = RecordReader::new(RecordOpener::new(&KEY, 1 << 20), &s);
    let head = addr(&mut rr, RECORD_HEADER_LEN);
    assert_eq!(rr.decrypt().unwrap(), 510);
    assert_eq!(rr.plaintext().as_ptr() as usize, head, "the head stayed");
    assert!(rr.plaintext()[500..].iter().all(|&x| x == 2));
    assert_eq!(rr.moved_bytes(), 10);
}

#[test]
fn a_frame_over_many_records_moves_each_byte_at_most_once() {
    let pieces: Vec<Vec<u8>> = (0..200u8).map(|i| vec![i; 256]).collect();
    let refs: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
    let s = stream(&refs);
    let mut rr = RecordReader::new(RecordOpener::new(&KEY, 1 << 20), &[]);
    for chunk in s.chunks(1000) {
        rr.push(chunk);
        rr.decrypt().unwrap();
    }
    assert_eq!(rr.plaintext(), &pieces.concat()[..]);
    assert!(rr.moved_bytes() <= 200 * 256, "moved {}", rr.moved_bytes());
}

#[test]
fn each_suite_reads_back_its_own_records_and_refuses_the_others() {
    let suites = [RecordSuite::ChaCha20Poly1305, RecordSuite::Aes256Gcm];
    for sealed_with in suites {
        let mut sealer = RecordSealer::with_suite(sealed_with, &KEY, 1 << 20);
        let mut s = Vec::new();
        for p in [&[1u8; 70][..], &[2; 3000], &[3; 5]] {
            sealer.seal_frame(&mut s, p).unwrap();
        }
        for opened_with in suites {
            let opener = RecordOpener::with_suite(opened_with, &KEY, 1 << 20);
            let mut rr = RecordReader::new(opener, &[]);
            assert_eq!(rr.suite(), opened_with);
            rr.push(&s);
            let r = rr.decrypt();
            if opened_with == sealed_with {
                assert_eq!(r, Ok(3075));
                assert_eq!(rr.records(), 3);
            } else {
                assert_eq!(r, Err(OpenError::AuthFailed));
                assert!(rr.plaintext().is_empty(), "nothing of a forged record");
            }
        }
    }
}
