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
/// renew intervals pass, and answers the single renewals and the `renew_many` calls
/// the store saw, with every member still live.
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
    let in_batches: u64 = batches.iter().map(|b| b.len() as u64).sum();
    let single = probe.member_renewals.load(Ordering::SeqCst) - in_batches;
    (single, batches.iter().map(Vec::len).collect())
}

#[tokio::test(start_paused = true)]
async fn members_on_one_store_handle_renew_together_by_default() {
    // Joined at one instant: their renewals, spread by their jitter over part of
    // the interval, still meet several to a window.
    let n = 2000;
    let (single, calls) = renewals(n, |c| c).await;
    assert_eq!(single, 0, "a member renewed on its own");
    let renewed: usize = calls.iter().sum();
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
    let n = 5;
    let (single, calls) = renewals(n, MemberConfig::unbatched).await;
    assert!(calls.is_empty(), "an unbatched member went through a batch");
    assert!(
        single >= n as u64 * 2,
        "{single} single renewals for {n} members"
    );
}
