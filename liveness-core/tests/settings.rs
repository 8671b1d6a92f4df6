//! Configurations read from and written to a serde format (feature `serde`): the
//! constructors' defaults fill what a file leaves out, and a file can give only what
//! code could build.
#![cfg(feature = "serde")]

use std::time::Duration;

use liveness_core::{
    CheckerConfig, ElectionConfig, EnqueueOptions, HeartbeatConfig, MemberConfig, SessionConfig,
    Ttl, WorkerConfig,
};
use serde::de::DeserializeOwned;

fn read<T: DeserializeOwned>(json: &str) -> T {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// The error reading `json` as `T` gives.
fn refused<T: DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
    serde_json::from_str::<T>(json)
        .map(|t| panic!("{json} was read as {t:?}"))
        .unwrap_err()
        .to_string()
}

#[test]
fn a_member_from_a_file_has_its_constructor_s_defaults() {
    let read: MemberConfig = read(r#"{ "name": "m-1", "heartbeat": { "ttl": "9s" } }"#);
    let built = MemberConfig::new("m-1", Ttl::from_secs(9).unwrap()).unwrap();
    assert_eq!(read.name, built.name);
    assert_eq!(read.holder, built.holder);
    assert_eq!(read.heartbeat, built.heartbeat);
    assert_eq!(read.heartbeat.renew_every, Duration::from_secs(3));
    assert!(read.rejoin && read.shared_batcher && read.progress_timeout.is_none());
}

#[test]
fn every_configuration_reads_back_what_it_writes() {
    let ttl = Ttl::from_secs(10).unwrap();
    let member = MemberConfig::new("m", ttl)
        .unwrap()
        .rejoin(false)
        .progress_timeout(Duration::from_secs(30))
        .unbatched();
    let back: MemberConfig = read(&serde_json::to_string(&member).unwrap());
    assert_eq!(
        (
            back.name,
            back.holder,
            back.heartbeat,
            back.rejoin,
            back.shared_batcher
        ),
        (member.name, member.holder, member.heartbeat, false, false)
    );
    assert_eq!(back.progress_timeout, Some(Duration::from_secs(30)));

    let heartbeat = HeartbeatConfig::new(ttl).renew_every(Duration::from_millis(2500));
    let back: HeartbeatConfig = read(&serde_json::to_string(&heartbeat).unwrap());
    assert_eq!(back, heartbeat);

    let session = SessionConfig::new("host-7", ttl).unwrap().reopen(false);
    let back: SessionConfig = read(&serde_json::to_string(&session).unwrap());
    assert_eq!((back.name, back.reopen), (session.name, false));

    let election = ElectionConfig::new("dispatcher", "node-a", ttl).unwrap();
    let checker = CheckerConfig::default()
        .check_every(Duration::from_millis(200))
        .batch(64)
        .elected(election);
    let back: CheckerConfig = read(&serde_json::to_string(&checker).unwrap());
    assert_eq!((back.check_every, back.batch), (checker.check_every, 64));
    let elected = back.elected.expect("the election is read back");
    assert_eq!(elected.holder.as_str(), "node-a");

    let worker = WorkerConfig::new("w", ttl)
        .unwrap()
        .concurrency(3)
        .checker(false);
    let back: WorkerConfig = read(&serde_json::to_string(&worker).unwrap());
    assert_eq!((back.concurrency, back.checker), (3, false));
    assert_eq!(back.member.name, worker.member.name);

    let options = EnqueueOptions::default().max_attempts(2);
    let back: EnqueueOptions = read(&serde_json::to_string(&options).unwrap());
    assert_eq!(back, options);
}

#[test]
fn a_file_gives_only_what_code_could_build() {
    // A ttl out of range, a renewal that leaves no time, a bad name, an unknown field,
    // a zero the constructors refuse: each an error naming it.
    let zero_ttl = refused::<MemberConfig>(r#"{ "name": "m", "heartbeat": { "ttl": "0s" } }"#);
    assert!(zero_ttl.contains("ttl"), "{zero_ttl}");
    let late = refused::<HeartbeatConfig>(r#"{ "ttl": "3s", "renew_every": "3s" }"#);
    assert!(late.contains("renew"), "{late}");
    let name = refused::<MemberConfig>(r#"{ "name": "", "heartbeat": { "ttl": "3s" } }"#);
    assert!(name.contains("name"), "{name}");
    let unknown = refused::<MemberConfig>(r#"{ "name": "m", "ttl": "3s" }"#);
    assert!(unknown.contains("unknown field"), "{unknown}");
    let duration = refused::<HeartbeatConfig>(r#"{ "ttl": "ten seconds" }"#);
    assert!(duration.contains("expected a duration"), "{duration}");
    let attempts = refused::<EnqueueOptions>(r#"{ "max_attempts": 0 }"#);
    assert!(attempts.contains("max_attempts"), "{attempts}");
    let concurrency = refused::<WorkerConfig>(
        r#"{ "member": { "name": "w", "heartbeat": { "ttl": "3s" } }, "concurrency": 0 }"#,
    );
    assert!(concurrency.contains("concurrency"), "{concurrency}");
}
