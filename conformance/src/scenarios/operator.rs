//! Operator scenarios: the read paths an operator uses from outside a program —
//! `leases` (who is alive), `deaths` (who died, and what became of their work),
//! `items` by state, and `retry_dead_letter(s)` (the `OperatorStore::leases`,
//! `OperatorStore::deaths`, `OperatorStore::items` and `OperatorStore::retry_dead_letter*`
//! contract bullets).

use liveness_core::Page;
use std::sync::Arc;

use liveness_core::{
    DeathCause, DeathRecord, EnqueueOptions, Error, InputProblem, ItemCounts, ItemId, ItemState,
    ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, Space, Store, Swept,
};

use super::common::holder;
use super::common::{assert_counts, assert_invalid, claim_ids};
use crate::{members, Ctx};

fn opts(max_attempts: u32) -> EnqueueOptions {
    EnqueueOptions::default().max_attempts(max_attempts)
}

fn key(name: &str) -> Key {
    Key::member(name).unwrap_or_else(|e| panic!("key {name}: {e}"))
}

fn names(page: &[LeaseInfo]) -> Vec<String> {
    page.iter().map(|i| i.key.name().to_string()).collect()
}

/// Every death record of the namespace, newest first, paged with `before`.
async fn all_deaths(s: &Arc<dyn Store>) -> Vec<DeathRecord> {
    let page = s.capabilities().max_batch.clamp(1, 7);
    let mut out: Vec<DeathRecord> = Vec::new();
    loop {
        let before = out.last().map(|d| d.seq);
        let got = s.deaths(before, page).await.unwrap();
        assert!(got.len() <= page, "deaths answers at most limit records");
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

fn assert_problem<T: std::fmt::Debug>(r: liveness_core::Result<T>, what: &str, p: InputProblem) {
    match r {
        Err(Error::InvalidInput { what: w, problem }) if w == what && problem == p => {}
        other => panic!("expected InvalidInput({what}, {p:?}), got {other:?}"),
    }
}

/// `leases` pages through a space's leases in key order (names compared by their
/// bytes), `after` exclusive, at most `limit`; each entry is what `inspect` says;
/// other spaces are not listed; released leases disappear; a zero limit is
/// InvalidInput, a huge one is clamped; an `after` key of another space is
/// InvalidInput(OtherSpace).
pub async fn leases_pages_in_key_order(ctx: Ctx) {
    let s = &ctx.store;
    // Punctuation, digits and case: a collation other than byte order shows.
    let mut want = vec![
        "n_", "nA", "n-1", "na", "n0", "n.2", "nB", "n/1", "n 2", "n\u{e9}",
    ];
    let mut leases = Vec::new();
    for name in &want {
        leases.push(
            s.acquire(&key(name), &holder(&format!("h{name}")), ctx.long)
                .await
                .unwrap(),
        );
    }
    let other = Key::new(Space::leaders(), Name::new("n-other").unwrap());
    s.acquire(&other, &holder("o"), ctx.long).await.unwrap();
    want.sort_unstable();

    let mut got: Vec<LeaseInfo> = Vec::new();
    loop {
        let after = got.last().map(|i| i.key.clone());
        let page = s
            .leases(
                &members(),
                Page {
                    after: after.as_ref(),
                    limit: 3,
                },
            )
            .await
            .unwrap();
        assert!(page.len() <= 3, "at most limit entries");
        if page.is_empty() {
            break;
        }
        got.extend(page);
    }
    assert_eq!(names(&got), want, "every lease once, in key (byte) order");
    for info in &got {
        let seen = s.inspect(&info.key).await.unwrap().expect("listed lease");
        assert_eq!(
            (&info.holder, info.token, info.ttl),
            (&seen.holder, seen.token, seen.ttl)
        );
        match info.status {
            LeaseStatus::Live { remaining } => assert!(remaining <= ctx.long.duration()),
            LeaseStatus::Expired => panic!("a long lease is listed expired"),
            other => panic!("a long lease is listed in an unknown status {other:?}"),
        }
        assert!(leases.iter().any(|l| l.token == info.token));
    }
    let all = s.leases(&members(), Page::first(usize::MAX)).await.unwrap();
    assert_eq!(names(&all), want, "a huge limit is clamped, not refused");
    let leaders = s.leases(&Space::leaders(), Page::first(10)).await.unwrap();
    assert_eq!(names(&leaders), vec!["n-other"]);
    assert_invalid(s.leases(&members(), Page::first(0)).await, "limit");
    assert_problem(
        s.leases(
            &members(),
            Page {
                after: Some(&other),
                limit: 10,
            },
        )
        .await,
        "after",
        InputProblem::OtherSpace,
    );
    // `after` need not name a lease: it is a position.
    let tail = s
        .leases(&members(), Page::first(10).next(&key("nB")))
        .await
        .unwrap();
    assert_eq!(names(&tail), vec!["n_", "na", "n\u{e9}"]);

    let gone = &leases[0];
    assert!(s.release(gone).await.unwrap());
    let after = s.leases(&members(), Page::first(100)).await.unwrap();
    assert!(
        after.iter().all(|i| i.key != gone.key),
        "a released lease is not listed"
    );
    assert_eq!(after.len(), want.len() - 1);
}

/// An expired, unreaped lease is listed with status Expired; once reaped it is not
/// listed; live ones beside it stay live.
pub async fn leases_show_expired_until_reaped(ctx: Ctx) {
    let s = &ctx.store;
    let short = s
        .acquire(&key("e-short"), &holder("s"), ctx.ttl)
        .await
        .unwrap();
    let long = s
        .acquire(&key("e-long"), &holder("l"), ctx.long)
        .await
        .unwrap();
    ctx.wait_listed_expired(&short.key).await;
    let page = s.leases(&members(), Page::first(10)).await.unwrap();
    assert_eq!(names(&page), vec!["e-long", "e-short"]);
    assert!(page[0].is_live() && page[0].token == long.token);
    assert_eq!(page[1].status, LeaseStatus::Expired);
    assert_eq!(page[1].token, short.token);
    assert!(s.reap(&short.key, short.token).await.unwrap());
    let page = s.leases(&members(), Page::first(10)).await.unwrap();
    assert_eq!(names(&page), vec!["e-long"], "a reaped lease is not listed");
}

/// Every reap, release and superseding acquire leaves exactly one death record with
/// its cause, key, holder and token, newest first, with increasing seq and store
/// times; losing reaps and repeated releases leave none; `swept` stays None until
/// the sweep, which fills it in. `before` pages; a zero limit is InvalidInput.
pub async fn deaths_record_each_death_once(ctx: Ctx) {
    let s = &ctx.store;
    assert!(
        s.deaths(None, 10).await.unwrap().is_empty(),
        "fresh namespace"
    );
    let start = s.store_time().await.unwrap();

    let reaped = s
        .acquire(&key("d-reap"), &holder("hr"), ctx.ttl)
        .await
        .unwrap();
    ctx.wait_listed_expired(&reaped.key).await;
    let racers = (0..4).map(|_| {
        let s = s.clone();
        let k = reaped.key.clone();
        tokio::spawn(async move { s.reap(&k, reaped.token).await.unwrap() })
    });
    let wins = futures_count(racers).await;
    assert_eq!(wins, 1, "exactly one reaper wins");

    let released = s
        .acquire(&key("d-rel"), &holder("hl"), ctx.long)
        .await
        .unwrap();
    assert!(s.release(&released).await.unwrap());
    assert!(
        !s.release(&released).await.unwrap(),
        "a repeat records nothing"
    );

    let old = s
        .acquire(&key("d-sup"), &holder("hs"), ctx.ttl)
        .await
        .unwrap();
    ctx.wait_listed_expired(&old.key).await;
    let new = s.acquire(&old.key, &holder("hs2"), ctx.long).await.unwrap();
    assert!(!s.reap(&old.key, old.token).await.unwrap());

    let all = all_deaths(s).await;
    let got: Vec<(DeathCause, &str, &str, u64)> = all
        .iter()
        .map(|d| (d.cause, d.key.name().as_str(), d.holder.as_str(), d.token.0))
        .collect();
    assert_eq!(
        got,
        vec![
            (DeathCause::Superseded, "d-sup", "hs", old.token.0),
            (DeathCause::Released, "d-rel", "hl", released.token.0),
            (DeathCause::Reaped, "d-reap", "hr", reaped.token.0),
        ],
        "one record per death, newest first"
    );
    let now = s.store_time().await.unwrap();
    for pair in all.windows(2) {
        assert!(pair[0].seq > pair[1].seq, "seq decreases down the list");
        assert!(pair[0].at >= pair[1].at, "store time follows seq");
    }
    for d in &all {
        assert!(
            d.at >= start && d.at <= now,
            "at is the store time of the death"
        );
        assert_eq!(d.swept, None, "not swept yet");
    }
    let second = s.deaths(Some(all[0].seq), 1).await.unwrap();
    assert_eq!(second, vec![all[1].clone()], "before is exclusive");
    assert!(s.deaths(Some(all[2].seq), 10).await.unwrap().is_empty());
    assert_invalid(s.deaths(None, 0).await, "limit");
    assert_eq!(s.deaths(None, usize::MAX).await.unwrap(), all, "clamped");

    for d in &all {
        s.sweep(d.token).await.unwrap();
    }
    for d in all_deaths(s).await {
        assert_eq!(d.swept, Some(Swept::default()), "swept, nothing owned");
    }
    s.release(&new).await.unwrap();
}

async fn futures_count(tasks: impl Iterator<Item = tokio::task::JoinHandle<bool>>) -> usize {
    let mut n = 0;
    for t in tasks.collect::<Vec<_>>() {
        if t.await.unwrap() {
            n += 1;
        }
    }
    n
}

/// The sweep's counts in a death record are exact however many checkers race to
/// sweep the token (through `sweep` and `sweep_many`): what the
/// one sweep that moved the items moved, requeued and dead-lettered apart; repeats
/// change nothing.
pub async fn death_swept_counts_are_exact(ctx: Ctx) {
    let s = &ctx.store;
    for _ in 0..3 {
        s.enqueue(b"again", opts(3)).await.unwrap();
    }
    for _ in 0..2 {
        s.enqueue(b"last", opts(1)).await.unwrap();
    }
    let lease = s.acquire(&key("sw"), &holder("sw"), ctx.ttl).await.unwrap();
    assert_eq!(s.claim(&lease, 10).await.unwrap().len(), 5);
    ctx.wait_listed_expired(&lease.key).await;
    assert!(s.reap(&lease.key, lease.token).await.unwrap());
    let sweepers: Vec<_> = (0..4)
        .map(|i| {
            let s = s.clone();
            let t = lease.token;
            tokio::spawn(async move {
                if i % 2 == 0 {
                    s.sweep(t).await.unwrap()
                } else {
                    let mut both = liveness_core::Sweep::default();
                    for r in s.sweep_many(&[t, t]).await.unwrap() {
                        let r = r.unwrap();
                        both.requeued.extend(r.requeued);
                        both.dead_lettered.extend(r.dead_lettered);
                    }
                    both
                }
            })
        })
        .collect();
    let (mut requeued, mut dead) = (0, 0);
    for t in sweepers {
        let r = t.await.unwrap();
        requeued += r.requeued.len();
        dead += r.dead_lettered.len();
    }
    assert_eq!((requeued, dead), (3, 2), "the items moved once in all");
    let rec = &s.deaths(None, 1).await.unwrap()[0];
    assert_eq!(rec.token, lease.token);
    assert_eq!(
        rec.swept,
        Some(Swept::new(0, 3, 2)),
        "the record counts what the sweep moved, whichever sweeper it was"
    );
    s.sweep(lease.token).await.unwrap();
    assert_eq!(s.deaths(None, 1).await.unwrap()[0].swept, rec.swept);
}

/// The store keeps the newest `death_retention` records and drops older ones, oldest
/// first. Checked when the store's retention is small enough to fill in a test
/// (the suite's fixtures set a small one).
pub async fn deaths_retention_keeps_newest(ctx: Ctx) {
    let s = &ctx.store;
    let keep = ctx.caps().death_retention;
    if keep > 200 {
        eprintln!("deaths_retention_keeps_newest: retention {keep} is too large to fill here");
        return;
    }
    let mut tokens = Vec::new();
    for i in 0..keep + 3 {
        let l = s
            .acquire(&key(&format!("r{i}")), &holder("r"), ctx.long)
            .await
            .unwrap();
        assert!(s.release(&l).await.unwrap());
        tokens.push(l.token);
    }
    let all = all_deaths(s).await;
    let want: Vec<u64> = tokens.iter().rev().take(keep).map(|t| t.0).collect();
    assert_eq!(
        all.iter().map(|d| d.token.0).collect::<Vec<_>>(),
        want,
        "exactly the newest {keep} records, newest first"
    );
}

/// `retry_dead_letter` moves a dead-lettered item back to pending with no attempts
/// counted; an unknown id (NoSuchItem) or a pending or owned one (NotDeadLettered)
/// is InvalidInput and changes nothing; `retry_dead_letters` moves the rest, lowest
/// id first, up to its limit, and answers empty when none is left.
pub async fn retry_dead_letters_back_to_pending(ctx: Ctx) {
    let s = &ctx.store;
    let a = s.enqueue(b"a", opts(2)).await.unwrap();
    let b = s.enqueue(b"b", opts(2)).await.unwrap();
    let c = s.enqueue(b"c", opts(2)).await.unwrap();
    let d = s.enqueue(b"d", opts(2)).await.unwrap();
    let pending = s.enqueue(b"p", opts(2)).await.unwrap();
    let lease = s
        .acquire(&key("rt"), &holder("rt"), ctx.long)
        .await
        .unwrap();
    assert_eq!(s.claim(&lease, 4).await.unwrap().len(), 4);
    for id in [a, b, c] {
        assert_eq!(
            s.fail(&lease, id, false).await.unwrap(),
            ItemState::DeadLettered
        );
    }
    let before = s.item_counts().await.unwrap();
    assert_eq!(before, ItemCounts::new(1, 1, 3));
    let unknown = ItemId(pending.0 + 1000);
    assert_problem(
        s.retry_dead_letter(unknown).await,
        "item",
        InputProblem::NoSuchItem,
    );
    assert_problem(
        s.retry_dead_letter(pending).await,
        "item",
        InputProblem::NotDeadLettered,
    );
    assert_problem(
        s.retry_dead_letter(d).await,
        "item",
        InputProblem::NotDeadLettered,
    );
    assert_eq!(
        s.item_counts().await.unwrap(),
        before,
        "errors change nothing"
    );
    assert_eq!(
        s.item(d).await.unwrap().unwrap().state,
        ItemState::Owned(lease.token)
    );

    s.retry_dead_letter(b).await.unwrap();
    let rec = s.item(b).await.unwrap().unwrap();
    assert_eq!(rec.state, ItemState::Pending);
    assert_eq!(
        (
            rec.item.attempts,
            rec.item.max_attempts,
            rec.item.payload.as_slice()
        ),
        (0, 2, &b"b"[..])
    );
    assert_problem(
        s.retry_dead_letter(b).await,
        "item",
        InputProblem::NotDeadLettered,
    );

    assert_invalid(s.retry_dead_letters(0).await, "limit");
    assert_eq!(s.retry_dead_letters(1).await.unwrap(), vec![a]);
    assert_eq!(s.retry_dead_letters(usize::MAX).await.unwrap(), vec![c]);
    assert!(s.retry_dead_letters(10).await.unwrap().is_empty());
    assert_counts(s, [4, 1, 0], "every dead letter retried").await;
    let again = s.claim(&lease, 10).await.unwrap();
    assert_eq!(
        again.iter().map(|i| (i.id, i.attempts)).collect::<Vec<_>>(),
        vec![(a, 1), (b, 1), (c, 1), (pending, 1)],
        "retried items are claimed again, their attempts counted from zero"
    );
}

/// `items` pages through one state's items in id order, `after` exclusive, at most
/// `limit`, each entry what `item` says; a zero limit is InvalidInput.
pub async fn items_page_by_state(ctx: Ctx) {
    let s = &ctx.store;
    let mut ids = Vec::new();
    for i in 0..7u8 {
        ids.push(s.enqueue(&[i], opts(3)).await.unwrap());
    }
    let lease = s
        .acquire(&key("it"), &holder("it"), ctx.long)
        .await
        .unwrap();
    assert_eq!(s.claim(&lease, 4).await.unwrap().len(), 4);
    s.fail(&lease, ids[1], false).await.unwrap();
    s.fail(&lease, ids[3], false).await.unwrap();
    let want = |kind: ItemStateKind| -> Vec<ItemId> {
        match kind {
            ItemStateKind::Owned => vec![ids[0], ids[2]],
            ItemStateKind::DeadLettered => vec![ids[1], ids[3]],
            ItemStateKind::Pending => vec![ids[4], ids[5], ids[6]],
        }
    };
    for kind in [
        ItemStateKind::Pending,
        ItemStateKind::Owned,
        ItemStateKind::DeadLettered,
    ] {
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let page = s.items(kind, Page { after, limit: 2 }).await.unwrap();
            assert!(page.len() <= 2, "at most limit");
            let Some(last) = page.last() else { break };
            after = Some(last.item.id);
            for rec in &page {
                assert_eq!(rec.state.kind(), kind);
                assert_eq!(Some(rec), s.item(rec.item.id).await.unwrap().as_ref());
            }
            got.extend(page.iter().map(|r| r.item.id));
        }
        assert_eq!(got, want(kind), "{kind} in id order");
        let all = s.items(kind, Page::first(usize::MAX)).await.unwrap();
        assert_eq!(all.len(), want(kind).len(), "a huge limit is clamped");
        assert_invalid(s.items(kind, Page::first(0)).await, "limit");
    }
    let owned = s
        .items(ItemStateKind::Owned, Page::first(10))
        .await
        .unwrap();
    assert!(owned
        .iter()
        .all(|r| r.state == ItemState::Owned(lease.token)));
}

/// `cancel` removes a pending item (due, or held back where the store keeps delays)
/// and a dead-lettered one, answering the state each had; it leaves an owned item
/// alone and answers its owner; an id of no item, or a repeat, answers `None`. A
/// store written before `cancel` existed answers `Unsupported` (the trait's default)
/// and passes: its operators cannot cancel, and nothing else changes.
pub async fn cancel_removes_what_nobody_runs(ctx: Ctx) {
    let s = &ctx.store;
    match s.cancel(ItemId(1)).await {
        Err(Error::InvalidInput {
            what: "cancel",
            problem: InputProblem::Unsupported,
        }) => return,
        other => assert_eq!(other.unwrap(), None, "no item yet"),
    }
    let dead_lettered = s.enqueue(b"dead-lettered", opts(1)).await.unwrap();
    let owned = s.enqueue(b"owned", opts(1)).await.unwrap();
    let pending = s.enqueue(b"pending", opts(1)).await.unwrap();
    let lease = ctx.grant(&key("w"), &holder("w"), ctx.long).await;
    let claimed = claim_ids(s, &lease, 2).await;
    assert_eq!(claimed, [dead_lettered, owned]);
    s.fail(&lease, dead_lettered, false).await.unwrap();
    assert_eq!(s.cancel(pending).await.unwrap(), Some(ItemState::Pending));
    assert_eq!(
        s.cancel(dead_lettered).await.unwrap(),
        Some(ItemState::DeadLettered)
    );
    assert_eq!(
        s.cancel(owned).await.unwrap(),
        Some(ItemState::Owned(lease.token)),
        "an owned item is left to its owner"
    );
    for id in [pending, dead_lettered] {
        assert_eq!(s.item(id).await.unwrap(), None, "removed");
        assert_eq!(s.cancel(id).await.unwrap(), None, "a repeat finds nothing");
    }
    assert_eq!(s.cancel(ItemId(u64::MAX / 2)).await.unwrap(), None);
    assert_counts(s, [0, 1, 0], "only the owned item is left").await;
    s.complete(&lease, owned).await.unwrap();

    if ctx.caps().delays {
        let later = EnqueueOptions::default().delay(std::time::Duration::from_secs(3600));
        let held = s.enqueue(b"later", later).await.unwrap();
        assert_eq!(s.cancel(held).await.unwrap(), Some(ItemState::Pending));
        assert_eq!(s.next_due().await.unwrap(), None, "nothing waits any more");
        assert_counts(s, [0, 0, 0], "the held-back item is gone").await;
    }
}
