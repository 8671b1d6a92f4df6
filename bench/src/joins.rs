//! The join rates of a store's sessions: members joined one call each against the
//! same number joined in batches, measured in one run (the backends' sessions
//! benches print them).

use std::time::Instant;

use liveness_core::{HolderId, Key, Name, Space, Store, Ttl};

/// Joins `n` members into one session with `join_session` (`lanes` calls in flight),
/// then `n` other members into it with `join_session_many` (batches of `max_batch`,
/// one call in flight, as a session re-joins its members after a loss): the two join
/// rates in members per second, measured in the same run, and the batched calls.
///
/// # Panics
///
/// When the store refuses a call: a bench's figures mean nothing then.
pub async fn join_rates<S>(store: &S, n: usize, lanes: usize) -> (f64, f64, usize)
where
    S: Store + Clone + 'static,
{
    let holder = HolderId::new("bench-joins").unwrap_or_else(|e| panic!("{e}"));
    let name = Name::new("joins").unwrap_or_else(|e| panic!("{e}"));
    let ttl = Ttl::from_secs(600).unwrap_or_else(|e| panic!("{e}"));
    let session = store
        .acquire(&Key::new(Space::sessions(), name), &holder, ttl)
        .await
        .unwrap_or_else(|e| panic!("session: {e}"));
    let key = |prefix: &str, i: usize| {
        Key::member(&format!("{prefix}{i}")).unwrap_or_else(|e| panic!("{e}"))
    };
    let lanes = lanes.max(1);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let (store, holder, session) = (store.clone(), holder.clone(), session.clone());
        tasks.push(tokio::spawn(async move {
            for i in (lane..n).step_by(lanes) {
                store
                    .join_session(&session, &key("one", i), &holder)
                    .await
                    .unwrap_or_else(|e| panic!("join_session: {e}"));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("{e}"));
    }
    let one = n as f64 / start.elapsed().as_secs_f64();
    let max = store.capabilities().max_batch.max(1);
    let asks: Vec<(Key, HolderId)> = (0..n).map(|i| (key("many", i), holder.clone())).collect();
    let start = Instant::now();
    let mut calls = 0;
    for chunk in asks.chunks(max) {
        calls += 1;
        let answers = store
            .join_session_many(&session, chunk)
            .await
            .unwrap_or_else(|e| panic!("join_session_many: {e}"));
        for answer in answers {
            answer.unwrap_or_else(|e| panic!("join_session_many entry: {e}"));
        }
    }
    let many = n as f64 / start.elapsed().as_secs_f64();
    (one, many, calls)
}

/// Prints the two join rates of [`join_rates`], `lanes` being the calls that were in
/// flight for `join_session`.
pub fn print_join_rates(n: usize, lanes: usize, (one, many, calls): (f64, f64, usize)) {
    println!(
        "joins of {n} members: join_session {one:>8.0}/s ({lanes} in flight), \
         join_session_many {many:>8.0}/s ({calls} calls), {:.1}x",
        many / one.max(1e-9)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_ways_join_every_member() {
        let store = crate::memory_store();
        let (one, many, calls) = join_rates(&store, 10, 3).await;
        assert!(one > 0.0 && many > 0.0);
        let max = store.capabilities().max_batch.max(1);
        assert_eq!(calls, 10usize.div_ceil(max));
    }
}
