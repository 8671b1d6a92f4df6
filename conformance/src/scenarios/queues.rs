//! Named-queue scenarios: an item waits in the queue its enqueue named
//! (`EnqueueOptions::queue`), a claim takes only from the queues it names, in the
//! order given (`ItemStore::claim_from`), every way back to pending keeps the queue,
//! and `OperatorStore::queue_counts` counts each. A store without
//! `Capabilities::queues` refuses every queue but the default.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, InputProblem, Item, ItemCounts, ItemId, ItemState, ItemStateKind, Lease,
    Outcome, Page, QueueCounts, QueueName, RequestId, Store, MAX_CLAIM_QUEUES,
};

use super::common::{assert_invalid, holder};
use crate::{member_key, Ctx};

/// A queue name from a literal the scenarios know is valid.
fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap_or_else(|e| panic!("queue: {e}"))
}

/// The options that put an item in `name`.
fn on(name: &str) -> EnqueueOptions {
    EnqueueOptions::default().queue(queue(name))
}

/// A claim of up to `n` from `queues` under `lease`, with a fresh request id.
async fn claim_from(s: &Arc<dyn Store>, lease: &Lease, queues: &[&str], n: usize) -> Vec<Item> {
    let queues: Vec<QueueName> = queues.iter().map(|q| queue(q)).collect();
    s.claim_from(lease, &queues, n, RequestId::next())
        .await
        .unwrap()
}

/// The ids and queues of `items`, in the order answered.
fn ids_in(items: &[Item]) -> Vec<(ItemId, &str)> {
    items.iter().map(|i| (i.id, i.queue.as_str())).collect()
}

/// The store's counts per queue, as `(name, [pending, owned, dead_lettered])`, checked
/// against `item_counts`.
async fn per_queue(s: &Arc<dyn Store>) -> Vec<(String, [u64; 3])> {
    let counts: Vec<QueueCounts> = s.queue_counts().await.unwrap();
    let mut sum = ItemCounts::default();
    for c in &counts {
        sum.pending += c.counts.pending;
        sum.owned += c.counts.owned;
        sum.dead_lettered += c.counts.dead_lettered;
    }
    assert_eq!(sum, s.item_counts().await.unwrap(), "queues add up");
    counts
        .iter()
        .map(|c| {
            let n = c.counts;
            (c.queue.to_string(), [n.pending, n.owned, n.dead_lettered])
        })
        .collect()
}

/// `(name, counts)` pairs as `per_queue` answers them.
fn want(entries: &[(&str, [u64; 3])]) -> Vec<(String, [u64; 3])> {
    entries.iter().map(|(q, c)| (q.to_string(), *c)).collect()
}

/// A store without named queues refuses every queue but the default, adds and
/// assigns nothing for them, and counts its items in the default queue.
async fn without_queues(ctx: &Ctx) {
    let s = &ctx.store;
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    for r in [
        s.enqueue(b"x", on("mail")).await.map(|_| ()),
        s.enqueue_many(&[b"x".to_vec()], on("mail"))
            .await
            .map(|_| ()),
    ] {
        match r {
            Err(Error::InvalidInput {
                what: "queue",
                problem: InputProblem::Unsupported,
                ..
            }) => {}
            other => panic!("a named queue on a store without queues: {other:?}"),
        }
    }
    let r = s
        .claim_from(&lease, &[queue("mail")], 1, RequestId::next())
        .await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    let id = s.enqueue(b"x", EnqueueOptions::default()).await.unwrap();
    assert_eq!(per_queue(s).await, want(&[("default", [1, 0, 0])]));
    let got = claim_from(s, &lease, &["default"], 5).await;
    assert_eq!(ids_in(&got), [(id, "default")]);
}

/// Items wait in the queue their enqueue named; a claim takes only from the queues
/// it names, the earlier queues first, each lowest id first; `item` and `items` say
/// each item's queue; `queue_counts` counts each queue (in name order, adding up to
/// `item_counts`). A store without `Capabilities::queues` refuses other queues.
pub async fn named_queues_keep_their_items_apart(ctx: Ctx) {
    if !ctx.caps().queues {
        return without_queues(&ctx).await;
    }
    let s = &ctx.store;
    let first_default = s.enqueue(b"d1", EnqueueOptions::default()).await.unwrap();
    let a1 = s.enqueue(b"a1", on("mail")).await.unwrap();
    let bs = s
        .enqueue_many(&[b"b1".to_vec(), b"b2".to_vec()], on("reports"))
        .await
        .unwrap();
    let a2 = s.enqueue(b"a2", on("mail")).await.unwrap();
    assert_eq!(
        per_queue(s).await,
        want(&[
            ("default", [1, 0, 0]),
            ("mail", [2, 0, 0]),
            ("reports", [2, 0, 0])
        ])
    );
    let record = s.item(a1).await.unwrap().expect("kept");
    assert_eq!(record.item.queue.as_str(), "mail");
    let listed = s
        .items(ItemStateKind::Pending, Page::first(100))
        .await
        .unwrap();
    let listed: Vec<(ItemId, &str)> = listed
        .iter()
        .map(|r| (r.item.id, r.item.queue.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            (first_default, "default"),
            (a1, "mail"),
            (bs[0], "reports"),
            (bs[1], "reports"),
            (a2, "mail")
        ]
    );

    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    // An empty queue is no error; another queue's items are not taken.
    assert!(claim_from(s, &lease, &["nothing-here"], 5).await.is_empty());
    let got = claim_from(s, &lease, &["reports"], 5).await;
    assert_eq!(ids_in(&got), [(bs[0], "reports"), (bs[1], "reports")]);
    // Strict priority: mail's items before the default's lower id.
    let got = claim_from(s, &lease, &["mail", "default"], 2).await;
    assert_eq!(ids_in(&got), [(a1, "mail"), (a2, "mail")]);
    assert_eq!(got[0].payload, b"a1");
    let got = claim_from(s, &lease, &["mail", "default"], 2).await;
    assert_eq!(ids_in(&got), [(first_default, "default")]);
    assert_eq!(
        per_queue(s).await,
        want(&[
            ("default", [0, 1, 0]),
            ("mail", [0, 2, 0]),
            ("reports", [0, 2, 0])
        ])
    );

    // Completed items leave their queue's count; a queue with no item is not listed.
    s.complete(&lease, first_default).await.unwrap();
    assert_eq!(
        per_queue(s).await,
        want(&[("mail", [0, 2, 0]), ("reports", [0, 2, 0])])
    );
}

/// Waits, for at most `most`, until the store says no item is held back any more (or
/// the first is due: a claim makes it claimable): a store whose clock counts coarser
/// than a wait (etcd's whole-second lease countdown) makes an item due somewhat late,
/// never early, and says how long is left.
async fn until_nothing_waits(s: &Arc<dyn Store>, most: Duration) {
    let give_up = tokio::time::Instant::now() + most;
    while let Some(left) = s.next_due().await.unwrap().filter(|d| !d.is_zero()) {
        assert!(
            tokio::time::Instant::now() < give_up,
            "still held back {most:?} after the wait"
        );
        tokio::time::sleep(left + Duration::from_millis(250)).await;
    }
}

/// Every way back to pending keeps an item's queue: a retry (with a backoff where
/// the store keeps delays), the sweep of a dead owner, a dead letter's retry; and a
/// scheduled item of a named queue is claimed from it once due. A repeat of a claim
/// answers what its first call took, whatever queues it names.
pub async fn an_item_stays_in_its_queue_through_every_hand_back(ctx: Ctx) {
    if !ctx.caps().queues {
        return;
    }
    let s = &ctx.store;
    let a = s.enqueue(b"a", on("mail").max_attempts(5)).await.unwrap();
    let b = s.enqueue(b"b", on("reports")).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;

    // A retry at once: pending in mail, not claimed from the default queue.
    assert_eq!(
        ids_in(&claim_from(s, &lease, &["mail"], 1).await),
        [(a, "mail")]
    );
    let r = s.finish(&lease, a, Outcome::RETRY).await.unwrap();
    assert_eq!(r, Some(ItemState::Pending));
    assert!(claim_from(s, &lease, &["default"], 1).await.is_empty());

    // A repeat of a claim answers its items, whatever it names.
    let req = RequestId::next();
    let got = s
        .claim_from(&lease, &[queue("mail")], 1, req)
        .await
        .unwrap();
    assert_eq!(ids_in(&got), [(a, "mail")]);
    let again = s
        .claim_from(&lease, &[queue("other")], 1, req)
        .await
        .unwrap();
    assert_eq!(ids_in(&again), [(a, "mail")]);

    // To the dead-letter set and back: still in mail.
    let r = s.finish(&lease, a, Outcome::DeadLetter).await.unwrap();
    assert_eq!(r, Some(ItemState::DeadLettered));
    s.retry_dead_letter(a).await.unwrap();
    assert_eq!(
        ids_in(&claim_from(s, &lease, &["mail"], 1).await),
        [(a, "mail")]
    );

    // The sweep of a dead owner: both back to pending, each in its own queue.
    let dying = ctx.grant(&member_key("d"), &holder("d"), ctx.long).await;
    s.finish(&lease, a, Outcome::RETRY).await.unwrap();
    let got = claim_from(s, &dying, &["reports", "mail"], 5).await;
    let got = ids_in(&got);
    assert_eq!(got, [(b, "reports"), (a, "mail")]);
    assert!(s.release(&dying).await.unwrap());
    s.sweep(dying.token).await.unwrap();
    for (id, name) in got {
        let record = s.item(id).await.unwrap().expect("kept");
        assert_eq!(record.state, ItemState::Pending);
        assert_eq!(record.item.queue.as_str(), name);
    }
    assert_eq!(
        ids_in(&claim_from(s, &lease, &["mail"], 5).await),
        [(a, "mail")]
    );

    if !ctx.caps().delays {
        return;
    }
    // A retry's backoff and a scheduled item wait in their queue, then are claimed
    // from it (and not from another).
    let wait = Duration::from_millis(1500);
    s.finish(&lease, a, Outcome::Retry { after: wait })
        .await
        .unwrap();
    let later = s.enqueue(b"later", on("later").delay(wait)).await.unwrap();
    assert!(claim_from(s, &lease, &["mail", "later"], 5)
        .await
        .is_empty());
    tokio::time::sleep(wait + Duration::from_millis(750)).await;
    until_nothing_waits(s, wait * 3).await;
    assert!(claim_from(s, &lease, &["default"], 5).await.is_empty());
    let got = claim_from(s, &lease, &["later", "mail"], 5).await;
    assert_eq!(ids_in(&got), [(later, "later"), (a, "mail")]);
}

/// A claim names 1 to `MAX_CLAIM_QUEUES` queues, each once: anything else is
/// `InvalidInput` and assigns nothing. An enqueue keyed as an earlier one answers
/// that enqueue's id, whatever queue it names.
pub async fn a_claim_names_its_queues_once_each(ctx: Ctx) {
    if !ctx.caps().queues {
        return;
    }
    let s = &ctx.store;
    let id = s.enqueue(b"a", on("mail")).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let many: Vec<QueueName> = (0..=MAX_CLAIM_QUEUES)
        .map(|i| queue(&format!("q{i}")))
        .collect();
    let (mail, twice) = (queue("mail"), [queue("mail"), queue("mail")]);
    for queues in [&[][..], &twice[..], &many[..]] {
        let r = s.claim_from(&lease, queues, 1, RequestId::next()).await;
        assert_invalid(r, "queues");
    }
    let key = RequestId::random();
    let first = s.enqueue(b"k", on("mail").key(key)).await.unwrap();
    let again = s.enqueue(b"k", on("reports").key(key)).await.unwrap();
    assert_eq!(first, again, "a key names one item, whatever its queue");
    let mut queues = many[..MAX_CLAIM_QUEUES - 1].to_vec();
    queues.push(mail);
    let got = s
        .claim_from(&lease, &queues, 5, RequestId::next())
        .await
        .unwrap();
    assert_eq!(ids_in(&got), [(id, "mail"), (first, "mail")]);
}
