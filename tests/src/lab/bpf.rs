//! The classic BPF programs (tc's `bytecode` syntax) the lab's filters run, for `cls_bpf` in
//! direct-action mode (the return value is the verdict): random loss, a share or all of one
//! host's packets dropped (a lossy or a blocked path), and one host's TCP data dropped while
//! its bare acknowledgements pass (a path stalled one way).

/// Return TC_ACT_SHOT (drop), TC_ACT_OK (pass).
const DROP: &str = "6 0 0 2";
const PASS: &str = "6 0 0 0";

/// Drops `pct` percent of packets at random.
pub(super) fn loss_program(pct: f64) -> String {
    // A = the kernel's random u32 (ancillary load SKF_AD_OFF + SKF_AD_RANDOM).
    const LOAD_RANDOM: &str = "32 0 0 4294963256";
    let below = (pct / 100.0 * 4_294_967_296.0).round();
    if below >= 4_294_967_296.0 {
        return format!("1,{DROP}");
    }
    // A >= below: skip the drop.
    format!("4,{LOAD_RANDOM},53 1 0 {below},{DROP},{PASS}")
}

/// Drops IPv4 packets from `ip` and passes everything else (ARP included). `cls_bpf` sees
/// the frame from its Ethernet header (the source address is at byte 26).
pub(super) fn source_drop_program(ip: std::net::Ipv4Addr) -> String {
    const LOAD_ETHERTYPE: &str = "40 0 0 12";
    const LOAD_SOURCE: &str = "32 0 0 26";
    // Not IPv4: skip to the pass. Then drop on a matching source.
    let ip = u32::from(ip);
    format!("6,{LOAD_ETHERTYPE},21 0 3 2048,{LOAD_SOURCE},21 0 1 {ip},{DROP},{PASS}")
}

/// Drops `pct` percent of the IPv4 packets from `ip`, at random, and passes everything else
/// (100 %: [`source_drop_program`]).
pub(super) fn source_loss_program(ip: std::net::Ipv4Addr, pct: f64) -> String {
    const LOAD_ETHERTYPE: &str = "40 0 0 12";
    const LOAD_SOURCE: &str = "32 0 0 26";
    const LOAD_RANDOM: &str = "32 0 0 4294963256";
    let below = (pct / 100.0 * 4_294_967_296.0).round();
    if below >= 4_294_967_296.0 {
        return source_drop_program(ip);
    }
    // Not IPv4, or another source: skip to the pass. Then A >= below: skip the drop.
    let ip = u32::from(ip);
    format!(
        "8,{LOAD_ETHERTYPE},21 0 5 2048,{LOAD_SOURCE},21 0 3 {ip},{LOAD_RANDOM},53 1 0 {below},{DROP},{PASS}"
    )
}

/// Drops the TCP segments from `ip` that carry data and passes everything else, bare
/// acknowledgements included: what `ip` sends never arrives, while what it is sent is
/// acknowledged. The payload is the IPv4 total length less both headers' lengths (the
/// Ethernet header is 14 bytes; the IP header's at 14, the TCP header's length at 12 into
/// it).
pub(super) fn source_data_drop_program(ip: std::net::Ipv4Addr) -> String {
    const LOAD_ETHERTYPE: &str = "40 0 0 12";
    const LOAD_SOURCE: &str = "32 0 0 26";
    const LOAD_PROTOCOL: &str = "48 0 0 23";
    const LOAD_TOTAL_LENGTH: &str = "40 0 0 16";
    // X = the IP header's length (4 * IHL).
    const LOAD_IP_HEADER_LENGTH: &str = "177 0 0 14";
    const SUB_X: &str = "28 0 0 0";
    const STORE_M0: &str = "2 0 0 0";
    // A = the TCP header's data offset byte, at 14 + X + 12; its high nibble in words.
    const LOAD_DATA_OFFSET: &str = "80 0 0 26";
    const HIGH_NIBBLE: &str = "84 0 0 240";
    const TO_BYTES: &str = "116 0 0 2";
    const TAX: &str = "7 0 0 0";
    const LOAD_M0: &str = "96 0 0 0";
    let ip = u32::from(ip);
    // Not IPv4, another source, not TCP: skip to the pass. Then the payload's length: more
    // than 0 drops.
    format!(
        "19,{LOAD_ETHERTYPE},21 0 16 2048,{LOAD_SOURCE},21 0 14 {ip},{LOAD_PROTOCOL},21 0 12 6,\
         {LOAD_TOTAL_LENGTH},{LOAD_IP_HEADER_LENGTH},{SUB_X},{STORE_M0},{LOAD_DATA_OFFSET},\
         {HIGH_NIBBLE},{TO_BYTES},{TAX},{LOAD_M0},{SUB_X},37 0 1 0,{DROP},{PASS}"
    )
}

#[cfg(test)]
mod tests {
    use super::{loss_program, source_data_drop_program, source_drop_program, source_loss_program};

    #[test]
    fn the_data_drop_program_drops_one_sources_tcp_payload_and_passes_the_rest() {
        let p = source_data_drop_program("10.77.0.3".parse().unwrap());
        let insns: Vec<&str> = p.split(',').collect();
        assert_eq!(insns[0], "19");
        assert_eq!(insns.len(), 20, "the count, then 19 instructions");
        // Every jump that skips to the pass lands on the last instruction.
        for (i, insn) in insns[1..].iter().enumerate() {
            let f: Vec<u32> = insn.split(' ').map(|n| n.parse().unwrap()).collect();
            if f[0] == 21 {
                assert_eq!(i + 1 + f[2] as usize, 18, "instruction {i}: {insn}");
            }
        }
        assert_eq!(insns[18], "6 0 0 2");
        assert_eq!(insns[19], "6 0 0 0");
        assert!(insns.contains(&"21 0 14 172818435"));
    }

    #[test]
    fn the_path_loss_program_drops_a_share_of_one_source_and_passes_the_rest() {
        let ip = "10.77.0.3".parse().unwrap();
        assert_eq!(
            source_loss_program(ip, 30.0),
            "8,40 0 0 12,21 0 5 2048,32 0 0 26,21 0 3 172818435,32 0 0 4294963256,\
             53 1 0 1288490189,6 0 0 2,6 0 0 0"
        );
        assert_eq!(source_loss_program(ip, 100.0), source_drop_program(ip));
    }

    #[test]
    fn the_block_program_drops_one_source_and_passes_the_rest() {
        assert_eq!(
            source_drop_program("10.77.0.3".parse().unwrap()),
            "6,40 0 0 12,21 0 3 2048,32 0 0 26,21 0 1 172818435,6 0 0 2,6 0 0 0"
        );
    }

    #[test]
    fn the_loss_program_drops_below_the_rate() {
        assert_eq!(
            loss_program(30.0),
            "4,32 0 0 4294963256,53 1 0 1288490189,6 0 0 2,6 0 0 0"
        );
        assert_eq!(loss_program(100.0), "1,6 0 0 2");
        // 0 % never drops: every random value is >= 0.
        assert!(loss_program(0.0).contains("53 1 0 0,"));
    }
}
