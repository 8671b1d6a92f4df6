//! Members of their own lease that share a store handle renew together by default:
//! one `renew_many` per window for all that are due, not one round trip each, so
//! that a starved process or a slow store does not turn into a queue of single
//! renewals (the collapse of 100,000 members under a stolen core).

use std::sync::atomic::Ordering;
use std::time::Duration;

use liveness_core::{Member, MemberConfig};

mod common;
use common::probe::{probed, TTL_MS};
use common::ttl;

/// Joins `n` members with `config` applied to each default configuration, lets two
/// renew intervals pass, and answers the renewals the store saw and the size of each
/// call that carried them (a single renewal is a call of one), with every member
/// still live.
async fn renewals(n: usize, config: impl Fn(MemberConfig) -> MemberConfig) -> (u64, Vec<usize>) {
    let (store, probe) = probed(false, 1000);
    let joins: Vec<_> = (0..n)
        .map(|i| {
            let c = config(MemberConfig::new(&format!("m{i}"), ttl(TTL_MS)).unwrap());
            tokio::spawn(Member::join(store.clone(), c))
        })
        .collect();
    let mut members = Vec::new();
    for join in joins {
        members.push(join.await.unwrap().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(TTL_MS * 2 / 3 + 100)).await;
    for m in &members {
        m.check().expect("a member lost its lease");
    }
    let batches = probe.batches.lock().unwrap();
    let renewed = probe.member_renewals.load(Ordering::SeqCst);
    (renewed, batches.iter().map(Vec::len).collect())
}

#[tokio::test(start_paused = true)]
async fn members_on_one_store_handle_renew_together_by_default() {
    // Joined at one instant: their renewals, spread by their jitter over part of
    // the interval, still meet several to a window.
    let n = 2000;
    let (all, calls) = renewals(n, |c| c).await;
    let renewed: usize = calls.iter().sum();
    assert_eq!(
        renewed as u64, all,
        "a renewal went around the calls counted"
    );
    assert!(
        renewed >= n * 2,
        "{renewed} renewals of {n} members in two intervals"
    );
    assert!(
        renewed >= calls.len() * 3,
        "{} renew_many calls for {renewed} renewals: not shared",
        calls.len()
    );
}

#[tokio::test(start_paused = true)]
async fn an_unbatched_member_renews_on_its_own() {
    // Joined at one instant, as many as the batched test shares windows among.
    let n = 200;
    let (renewed, calls) = renewals(n, MemberConfig::unbatched).await;
    assert!(
        calls.iter().all(|&c| c == 1),
        "an unbatched member shared a call: {:?}",
        calls.iter().filter(|&&c| c > 1).collect::<Vec<_>>()
    );
    assert!(
        renewed >= n as u64 * 2,
        "{renewed} single renewals for {n} members"
    );
}
