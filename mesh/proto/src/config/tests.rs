use super::*;

#[test]
fn defaults_match_mesh_v1_table_and_validate() {
    let c = MeshConfig::default();
    c.validate().unwrap();
    assert_eq!(c.group_name, "default");
    assert_eq!(c.multicast_group, Ipv4Addr::new(239, 255, 42, 99));
    assert_eq!((c.multicast_port, c.multicast_ttl), (45454, 1));
    assert_eq!(c.announce_interval, Duration::from_millis(1000));
    assert_eq!(c.peer_lost_timeout, Duration::from_millis(5000));
    assert_eq!(c.heartbeat_interval, Duration::from_millis(1000));
    assert_eq!(c.heartbeat_timeout, Duration::from_millis(3000));
    assert_eq!(c.handshake_timeout, Duration::from_millis(2000));
    assert_eq!(c.reconnect_base, Duration::from_millis(500));
    assert_eq!(c.reconnect_max, Duration::from_millis(30000));
    assert_eq!(c.initial_ttl, 8);
    assert_eq!(c.dedup_ttl, Duration::from_millis(30000));
    assert_eq!(c.max_dedup_entries, 100_000);
    assert_eq!(c.max_outbound_queue_bytes, 8 << 20);
    assert_eq!(c.max_message_bytes, 16 << 20);
    // The C++ library's config header: membership interval 2000 ms, timeout 8000 ms.
    assert_eq!(c.membership_interval, Duration::from_millis(2000));
    assert_eq!(c.membership_timeout, Duration::from_millis(8000));
    assert!(!c.secured());
    assert!(!c.requires_identity());
}

#[test]
fn identity_is_required_by_default_once_an_identity_is_configured() {
    let seed = "11".repeat(32);
    let with_id = || {
        MeshConfig::builder()
            .psk("k")
            .identity_seed_hex(seed.clone())
    };
    assert!(with_id().build().unwrap().requires_identity());
    assert!(!with_id()
        .require_identity(false)
        .build()
        .unwrap()
        .requires_identity());
    // A PSK-only node has nothing to require with; saying "no" is allowed, "yes" is not.
    let psk_only = MeshConfig::builder().psk("k");
    assert!(!psk_only.clone().build().unwrap().requires_identity());
    assert!(psk_only.clone().require_identity(false).build().is_ok());
    let c = MeshConfig::from_toml_str(&format!(
        "psk = \"k\"\nidentity_seed_hex = \"{seed}\"\nrequire_identity = false\n"
    ))
    .unwrap();
    assert_eq!(c.require_identity, Some(false));
    assert!(!c.requires_identity());
}

#[test]
fn toml_overrides_only_named_keys() {
    let c = MeshConfig::from_toml_str(
        "group_name = \"lab\"\nheartbeat_interval_ms = 200\nheartbeat_timeout_ms = 700\n\
         static_peers = [\"example.org:7000\"]\n",
    )
    .unwrap();
    assert_eq!(c.group_name, "lab");
    assert_eq!(c.heartbeat_interval, Duration::from_millis(200));
    assert_eq!(c.heartbeat_timeout, Duration::from_millis(700));
    assert_eq!(c.handshake_timeout, Duration::from_millis(2000));
    assert_eq!(c.static_peers, vec!["example.org:7000".to_owned()]);
}

#[test]
fn toml_rejects_unknown_keys_and_bad_relations() {
    assert!(matches!(
        MeshConfig::from_toml_str("heartbeat_intervall_ms = 5"),
        Err(ConfigError::Toml(_))
    ));
    assert!(matches!(
        MeshConfig::from_toml_str("heartbeat_timeout_ms = 1000"),
        Err(ConfigError::HeartbeatTimeoutTooShort { .. })
    ));
}

#[test]
fn builder_validates() {
    let err = MeshConfig::builder()
        .reconnect_base(Duration::from_secs(60))
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::ReconnectBaseAboveMax { .. }));
    assert_eq!(
        MeshConfig::builder()
            .seed_peers(vec!["nohost".to_owned()])
            .build(),
        Err(ConfigError::BadEndpoint("nohost".to_owned()))
    );
    assert_eq!(
        MeshConfig::builder().initial_ttl(0).build(),
        Err(ConfigError::Zero("initial_ttl"))
    );
    assert_eq!(
        MeshConfig::builder().group_name("x".repeat(256)).build(),
        Err(ConfigError::GroupNameTooLong(256))
    );
    let ok = MeshConfig::builder()
        .group_name("g")
        .psk("k")
        .build()
        .unwrap();
    assert!(ok.secured());
    assert!(!format!("{ok:?}").contains("\"k\""));
}

#[test]
fn identity_settings_validated() {
    let seed = "11".repeat(32);
    assert_eq!(
        MeshConfig::builder()
            .identity_seed_hex(seed.clone())
            .build(),
        Err(ConfigError::IdentityWithoutPsk("identity_seed_hex"))
    );
    assert_eq!(
        MeshConfig::builder()
            .identity_file(Some(std::path::PathBuf::from("/tmp/x")))
            .build(),
        Err(ConfigError::IdentityWithoutPsk("identity_file"))
    );
    assert_eq!(
        MeshConfig::builder()
            .psk("k")
            .require_identity(true)
            .build(),
        Err(ConfigError::TrustWithoutIdentity("require_identity"))
    );
    assert_eq!(
        MeshConfig::builder()
            .psk("k")
            .identity_seed_hex("abc")
            .build(),
        Err(ConfigError::BadIdentitySeed)
    );
    assert_eq!(
        MeshConfig::builder()
            .psk("k")
            .identity_seed_hex(seed.clone())
            .identity_file(Some(std::path::PathBuf::from("/tmp/x")))
            .build(),
        Err(ConfigError::IdentityTwice)
    );
    assert_eq!(
        MeshConfig::builder()
            .psk("k")
            .identity_seed_hex(seed.clone())
            .trusted_keys(vec![TrustedKey::new("zz", "bad")])
            .build(),
        Err(ConfigError::BadTrustedKey("zz".into()))
    );
    let c = MeshConfig::from_toml_str(&format!(
        "psk = \"k\"\nidentity_seed_hex = \"{seed}\"\nnode_name = \"n1\"\n\
         require_identity = true\n\
         trusted_keys = [{{ key = \"d04ab232742bb4ab3a1368bd4615e4e6d0224ab71a016baf8520a332c9778737\", label = \"eleven\" }}]\n"
    ))
    .unwrap();
    assert!(c.has_identity() && c.requires_identity());
    assert_eq!(c.parsed_trusted_keys().unwrap()[0].1, "eleven");
    // The seed is a secret, like the PSK.
    assert!(!format!("{c:?}").contains(&seed));
}

#[test]
fn topics_table_defaults_and_overrides() {
    let d = MeshConfig::default().topics;
    assert_eq!(d.announce_period, Duration::from_millis(1000));
    assert_eq!(d.participant_lease, Duration::from_millis(10_000));
    assert!(!d.dial_participants, "a line of static peers stays a line");
    let c = MeshConfig::from_toml_str(
        "group_name = \"lab\"\n[topics]\nannounce_period_ms = 250\nparticipant_lease_ms = 2000\n\
         max_remote_writers = 10\nmax_matches = 77\nmax_dedup_origins = 5\n\
         dial_participants = true\nlocators_allow = [\"10.0.0.0/8\"]\n\
         locators_deny = [\"10.9.0.0/16\"]\nlocators_loopback = false\n\
         fallback_locators = [\"10.0.0.7:7000\"]\n",
    )
    .unwrap();
    let t = &c.topics;
    assert_eq!(c.group_name, "lab");
    assert_eq!(t.announce_period, Duration::from_millis(250));
    assert_eq!(t.participant_lease, Duration::from_millis(2000));
    assert_eq!(t.capacities().remote_writers, 10);
    assert_eq!(t.capacities().matches, 77);
    assert_eq!(t.capacities().remote_readers, d.max_remote_readers);
    assert_eq!(t.max_dedup_origins, 5);
    assert!(t.dial_participants);
    let p = t.selection_policy().unwrap();
    assert_eq!((p.allow().len(), p.deny().len(), p.loopback), (1, 1, false));
    assert_eq!(
        t.fallbacks().unwrap(),
        vec!["10.0.0.7:7000".parse().unwrap()]
    );
}

#[test]
fn topics_table_rejects_unknown_keys_and_bad_values() {
    assert!(matches!(
        MeshConfig::from_toml_str("[topics]\nannounce_periode_ms = 5\n"),
        Err(ConfigError::Toml(_))
    ));
    use crate::topics::TopicsConfigError as E;
    let bad = |t: &str| MeshConfig::from_toml_str(&format!("[topics]\n{t}\n")).unwrap_err();
    assert_eq!(
        bad("announce_period_ms = 0"),
        ConfigError::Topics(E::ZeroDuration("announce_period"))
    );
    assert_eq!(
        bad("max_matches = 0"),
        ConfigError::Topics(E::Zero("max_matches"))
    );
    assert!(matches!(
        bad("participant_lease_ms = 1000"),
        ConfigError::Topics(E::LeaseTooShort { .. })
    ));
    assert!(matches!(
        bad("max_discovery_frame_bytes = 1000"),
        ConfigError::Topics(E::FrameTooSmall(1000))
    ));
    assert!(matches!(
        bad("locators_deny = [\"10.0.0.0/40\"]"),
        ConfigError::Topics(E::Locators(_))
    ));
    assert!(matches!(
        bad("fallback_locators = [\"nohost\"]"),
        ConfigError::Topics(E::BadFallback(_))
    ));
    assert!(matches!(
        bad("ack_timeout_ms = 100"),
        ConfigError::Topics(E::AckTimeoutTooShort { .. })
    ));
    let c = MeshConfig::from_toml_str("[topics]\nack_timeout_ms = 2500\n").unwrap();
    assert_eq!(c.topics.ack_timeout, Duration::from_millis(2500));
}

#[test]
fn reverse_path_check_is_on_by_default_and_can_be_turned_off() {
    assert!(MeshConfig::default().reverse_path_check);
    let c = MeshConfig::from_toml_str("reverse_path_check = false\n").unwrap();
    assert!(!c.reverse_path_check);
    let c = MeshConfig::builder()
        .reverse_path_check(false)
        .build()
        .unwrap();
    assert!(!c.reverse_path_check);
}

#[test]
fn the_settling_time_and_relay_pruning_are_settings() {
    let d = MeshConfig::default();
    assert_eq!(d.reverse_path_settle, Duration::from_millis(4000));
    assert!(d.relay_pruning);
    let c =
        MeshConfig::from_toml_str("reverse_path_settle_ms = 900\nrelay_pruning = false\n").unwrap();
    assert_eq!(c.reverse_path_settle, Duration::from_millis(900));
    assert!(!c.relay_pruning);
    let c = MeshConfig::builder()
        .reverse_path_settle(Duration::from_millis(1))
        .relay_pruning(false)
        .build()
        .unwrap();
    assert_eq!(
        (c.reverse_path_settle, c.relay_pruning),
        (Duration::from_millis(1), false)
    );
}

#[test]
fn relay_redundancy_is_a_setting_with_three_relays_by_default() {
    assert_eq!(MeshConfig::default().relay_redundancy, 3);
    let c = MeshConfig::from_toml_str("relay_redundancy = 0\n").unwrap();
    assert_eq!(c.relay_redundancy, 0);
    let c = MeshConfig::builder()
        .relay_redundancy(3usize)
        .build()
        .unwrap();
    assert_eq!(c.relay_redundancy, 3);
    assert!(MeshConfig::from_toml_str("relay_redundancy = -1\n").is_err());
}

#[test]
fn record_suite_is_written_by_name_and_needs_a_psk_unless_auto() {
    use crate::crypto::RecordSuitePolicy;
    assert_eq!(MeshConfig::default().record_suite, RecordSuitePolicy::Auto);
    for (name, want) in [
        ("auto", RecordSuitePolicy::Auto),
        ("chacha20-poly1305", RecordSuitePolicy::ChaCha20Poly1305),
        ("aes-256-gcm", RecordSuitePolicy::Aes256Gcm),
    ] {
        let c = MeshConfig::from_toml_str(&format!("psk = \"k\"\nrecord_suite = \"{name}\"\n"))
            .unwrap();
        assert_eq!(c.record_suite, want);
    }
    let bad = MeshConfig::from_toml_str("psk = \"k\"\nrecord_suite = \"aes-128-gcm\"\n");
    assert!(matches!(bad, Err(ConfigError::Toml(e)) if e.contains("aes-128-gcm")));
    assert_eq!(
        MeshConfig::from_toml_str("record_suite = \"aes-256-gcm\"\n"),
        Err(ConfigError::SuiteWithoutPsk("aes-256-gcm"))
    );
    assert!(MeshConfig::from_toml_str("record_suite = \"auto\"\n").is_ok());
    let built = MeshConfig::builder()
        .psk("k")
        .record_suite(RecordSuitePolicy::ChaCha20Poly1305)
        .build()
        .unwrap();
    assert_eq!(built.record_suite, RecordSuitePolicy::ChaCha20Poly1305);
}

#[test]
fn max_links_is_off_by_default_and_one_is_refused() {
    assert_eq!(MeshConfig::default().max_links, 0);
    let c = MeshConfig::from_toml_str("max_links = 8\n").unwrap();
    assert_eq!(c.max_links, 8);
    assert_eq!(
        MeshConfig::from_toml_str("max_links = 1\n"),
        Err(ConfigError::MaxLinksTooSmall)
    );
    assert_eq!(
        MeshConfig::builder().max_links(1usize).build(),
        Err(ConfigError::MaxLinksTooSmall)
    );
    let c = MeshConfig::builder().max_links(2usize).build().unwrap();
    assert_eq!(c.max_links, 2);
}

#[test]
fn tcp_congestion_is_a_setting_checked_for_its_form() {
    assert_eq!(
        MeshConfig::default().tcp_congestion,
        "",
        "the host's default"
    );
    let c = MeshConfig::from_toml_str("tcp_congestion = \"bbr\"\n").unwrap();
    assert_eq!(c.tcp_congestion, "bbr");
    assert!(c.validate().is_ok());
    for bad in ["BBR", "bbr reno", "a_name_longer_than_15", "x;y"] {
        let c = MeshConfig {
            tcp_congestion: bad.into(),
            ..MeshConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::BadTcpCongestion(bad.into())),
            "{bad}"
        );
    }
}

#[test]
fn the_membership_relay_gap_is_a_setting() {
    assert_eq!(
        MeshConfig::default().membership_relay_gap,
        crate::membership::RELAY_GAP
    );
    let c = MeshConfig::from_toml_str("membership_relay_gap_ms = 0\n").unwrap();
    assert_eq!(c.membership_relay_gap, Duration::ZERO);
    let c = MeshConfig::builder()
        .membership_relay_gap(Duration::from_millis(40))
        .build()
        .unwrap();
    assert_eq!(c.membership_relay_gap, Duration::from_millis(40));
}
