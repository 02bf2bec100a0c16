use super::pong::{Answer, Pong};
use super::*;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[test]
fn the_pong_report_round_trips() {
    let r = PongReport {
        echoed: 12345,
        cpu_user_s: 1.5,
        cpu_sys_s: 0.25,
        peak_rss_kib: 4096,
    };
    assert_eq!(PongReport::decode(&r.encode()), Some(r));
    assert_eq!(
        PongReport::decode(&goodbye(3)),
        None,
        "a goodbye is no report"
    );
    assert_eq!(PongReport::decode(&probe(64, 1)), None);
}

#[test]
fn a_pong_echoes_pings_and_probes_and_answers_the_goodbye() {
    let pong = Pong::default();
    let ping = crate::latency::stamped(64, 0);
    assert!(matches!(pong.answer(|| "p".into(), &ping), Answer::Echo));
    assert!(matches!(
        pong.answer(|| "q".into(), &probe(64, 0)),
        Answer::Echo
    ));
    assert!(matches!(
        pong.answer(|| "q".into(), b"short"),
        Answer::Nothing
    ));
    assert!(!pong.said_goodbye());
    let Answer::Report(rep) = pong.answer(|| "q".into(), &goodbye(1)) else {
        panic!("a goodbye is answered with the report");
    };
    let rep = PongReport::decode(&rep).expect("a report");
    assert_eq!(rep.echoed, 1);
    assert!(pong.said_goodbye());
    assert_eq!(
        pong.ping.lock().unwrap().as_deref(),
        Some("p"),
        "the first sender"
    );
    let mut at = None;
    assert_eq!(
        pong.done(&mut at, Instant::now() + Duration::from_secs(60)),
        None
    );
    pong.link_down.store(true, Ordering::Relaxed);
    assert_eq!(
        pong.done(&mut at, Instant::now() + Duration::from_secs(60)),
        Some("goodbye")
    );
}
