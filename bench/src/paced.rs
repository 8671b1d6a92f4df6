//! A steady state of leases renewed at their pace: what the sessions benches hold
//! members that are leases of their own in, beside members riding sessions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{Lease, Store};
use tokio::time::Instant;

/// What [`renew_paced`] saw.
#[derive(Debug)]
pub struct Paced {
    /// The leases, each as last renewed (a lapsed one as it was before).
    pub leases: Vec<Lease>,
    /// The renewals answered Ok.
    pub renewed: u64,
    /// The `renew_many` calls that failed as a whole (their leases count as not
    /// renewed).
    pub failed_calls: u64,
    /// How long the steady state ran.
    pub wall: Duration,
}

/// Renews every one of `leases` once per `every`, for `seconds`: `lanes` tasks, each
/// with its share of the leases and one `renew_many` of at most `batch` of them in
/// flight, paced every 10 ms. Behind (the server or the client saturated), the
/// renewals that did not fit are skipped and a lapsed lease stays lost: the rate of
/// renewals answered Ok shows it.
///
/// # Panics
///
/// When a task panics.
pub async fn renew_paced<S>(
    store: &S,
    mut leases: Vec<Lease>,
    every: Duration,
    (lanes, batch): (usize, usize),
    seconds: Duration,
) -> Paced
where
    S: Store + Clone + 'static,
{
    let (lanes, batch) = (lanes.max(1), batch.max(1));
    let per_tick = leases.len() as f64 / every.as_secs_f64() / 100.0 / lanes as f64;
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let until = start + seconds;
    let share = leases.len().div_ceil(lanes).max(1);
    let mut tasks = Vec::with_capacity(lanes);
    while !leases.is_empty() {
        let rest = leases.split_off(share.min(leases.len()));
        let mut mine = std::mem::replace(&mut leases, rest);
        let (store, ok, failed) = (store.clone(), ok.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let (mut due, mut next) = (0.0f64, 0usize);
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while Instant::now() < until {
                tick.tick().await;
                due = (due + per_tick).min(per_tick + batch as f64);
                while due >= 1.0 && Instant::now() < until {
                    let k = (due as usize).min(batch);
                    let at: Vec<usize> = (0..k).map(|j| (next + j) % mine.len()).collect();
                    next = (next + k) % mine.len();
                    let asked: Vec<Lease> = at.iter().map(|&i| mine[i].clone()).collect();
                    let answers = store.renew_many(&asked).await.unwrap_or_else(|_| {
                        failed.fetch_add(1, Ordering::Relaxed);
                        Vec::new()
                    });
                    for (&i, answer) in at.iter().zip(answers) {
                        if let Ok(l) = answer {
                            mine[i] = l;
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    due -= k as f64;
                }
            }
            mine
        }));
    }
    for task in tasks {
        leases.extend(task.await.unwrap_or_else(|e| panic!("{e}")));
    }
    Paced {
        leases,
        renewed: ok.load(Ordering::Relaxed),
        failed_calls: failed.load(Ordering::Relaxed),
        wall: start.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_core::{HolderId, Key, Ttl};

    #[tokio::test]
    async fn every_lease_is_renewed_at_its_pace() {
        let store = crate::memory_store();
        let holder = HolderId::new("paced").unwrap_or_else(|e| panic!("{e}"));
        let ttl = Ttl::from_secs(30).unwrap_or_else(|e| panic!("{e}"));
        let mut leases = Vec::new();
        for i in 0..20 {
            let key = Key::member(&format!("m{i}")).unwrap_or_else(|e| panic!("{e}"));
            let lease = store.acquire(&key, &holder, ttl).await;
            leases.push(lease.unwrap_or_else(|e| panic!("{e}")));
        }
        let every = Duration::from_millis(100);
        let p = renew_paced(&store, leases, every, (3, 4), Duration::from_millis(500)).await;
        assert_eq!(p.leases.len(), 20);
        assert_eq!(p.failed_calls, 0);
        // 20 leases every 100 ms for 500 ms: about 100 renewals, at least a few.
        assert!(p.renewed >= 20, "renewed {}", p.renewed);
        assert!(p.wall >= Duration::from_millis(500));
    }
}
