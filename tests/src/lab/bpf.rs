//! The classic BPF programs (tc's `bytecode` syntax) the lab's filters run, for `cls_bpf` in
//! direct-action mode (the return value is the verdict): random loss, and a share or all of
//! one host's packets dropped (a lossy or a blocked path).

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

#[cfg(test)]
mod tests {
    use super::{loss_program, source_drop_program, source_loss_program};

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
