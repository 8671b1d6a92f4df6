//! Batch scenarios entry by entry, at every position, by the effect in the store.
//!
//! The scenarios in `batches.rs` check what each batch method ANSWERS for a few mixed
//! entries. These move one entry of interest through every position (first, middle,
//! last) of batches of several sizes, with all other entries the plain case, and after
//! each call read back what the store holds (the lease, the items, the dead set, the
//! death records): a batch method that answers right but skips, or fakes, the entry at
//! one position fails here, and its message names the method and the entry.

use liveness_core::{
    Acquire, DeathCause, Error, FencingToken, ItemId, ItemState, Key, Lease, LeaseInfo,
    LeaseStatus, LostCause, Sweep, Swept, Ttl,
};

use super::batches::opts;
use super::common::holder;
use crate::{member_key, Ctx};

/// The batch sizes of the position scenarios, each at most `max_batch`: one entry
/// alone, and batches with a first, a middle and a last entry.
fn sizes(ctx: &Ctx) -> Vec<usize> {
    let max = ctx.caps().max_batch.max(1);
    [1, 2, 3, 5].into_iter().filter(|&n| n <= max).collect()
}

/// The batches a position scenario sends: for each size, one batch of plain entries
/// (`None`), then for each position and each kind of entry of interest, one batch
/// with that entry at that position (`Some((position, kind))`).
fn runs<K: Copy>(ctx: &Ctx, kinds: &[K], min_size: usize) -> Vec<(usize, Option<(usize, K)>)> {
    let mut runs: Vec<_> = sizes(ctx).into_iter().map(|n| (n, None)).collect();
    for n in sizes(ctx).into_iter().filter(|&n| n >= min_size) {
        for p in 0..n {
            runs.extend(kinds.iter().map(|&k| (n, Some((p, k)))));
        }
    }
    runs
}

/// "a batch of 3 (entry 1: a live lease)", for failure messages.
fn describe<K: std::fmt::Display>(n: usize, odd: Option<(usize, K)>, plain: &str) -> String {
    match odd {
        None => format!("a batch of {n}, every entry {plain}"),
        Some((p, kind)) => format!("a batch of {n} (entry {p}: {kind}; the others {plain})"),
    }
}

/// A lease on a fresh member key named after `name`, for the holder `who`.
async fn member(ctx: &Ctx, name: &str, who: &str, ttl: Ttl) -> Lease {
    ctx.grant(&member_key(name), &holder(who), ttl).await
}

/// The ids of the items `lease` claims, at most `n`.
async fn claim_ids(ctx: &Ctx, lease: &Lease, n: usize) -> Vec<ItemId> {
    ctx.store
        .claim(lease, n)
        .await
        .unwrap_or_else(|e| panic!("claim under token {}: {e}", lease.token))
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// The answers of `call` to a batch of `n` entries (`batch` describes it), which
/// must answer once per entry.
fn one_per_entry<T>(answers: Result<Vec<T>, Error>, n: usize, call: &str, batch: &str) -> Vec<T> {
    let answers = answers.unwrap_or_else(|e| panic!("{call}, {batch}: {e}"));
    assert_eq!(answers.len(), n, "{call}, {batch}: one answer per entry");
    answers
}

/// The dead set as `(key, token)` pairs, lowest token first.
async fn dead_set(ctx: &Ctx) -> Vec<(Key, FencingToken)> {
    ctx.store
        .dead_tokens(1000)
        .await
        .unwrap_or_else(|e| panic!("dead_tokens: {e}"))
        .into_iter()
        .map(|d| (d.key, d.token))
        .collect()
}

/// Empties the dead set with single `sweep` calls (its tokens own no items
/// in the lease scenarios), so that the next batch's check sees only what that batch
/// put in.
async fn sweep_dead_set(ctx: &Ctx) {
    for (key, token) in dead_set(ctx).await {
        let moved = ctx
            .store
            .sweep(token)
            .await
            .unwrap_or_else(|e| panic!("sweep of {key} (token {token}): {e}"));
        assert!(moved.is_empty(), "{key} (token {token}) owned no items");
    }
    assert_eq!(
        dead_set(ctx).await,
        Vec::new(),
        "sweep empties the dead set"
    );
}

/// The newest death record's `seq` (`None` when there is none yet).
async fn last_death(ctx: &Ctx) -> Option<u64> {
    ctx.store
        .deaths(None, 1)
        .await
        .unwrap_or_else(|e| panic!("deaths: {e}"))
        .first()
        .map(|d| d.seq)
}

/// The death records written after the one numbered `since`, as `(key, token,
/// cause)`, lowest token first.
async fn deaths_since(ctx: &Ctx, since: Option<u64>) -> Vec<(Key, FencingToken, DeathCause)> {
    let mut records: Vec<_> = ctx
        .store
        .deaths(None, 32)
        .await
        .unwrap_or_else(|e| panic!("deaths: {e}"))
        .into_iter()
        .filter(|d| since.is_none_or(|s| d.seq > s))
        .map(|d| (d.key, d.token, d.cause))
        .collect();
    records.sort_by_key(|r| r.1);
    records
}

/// Checks the death records one call wrote: exactly `want` (sorted by token), when
/// the store keeps that many.
async fn assert_deaths(
    ctx: &Ctx,
    since: Option<u64>,
    mut want: Vec<(Key, FencingToken, DeathCause)>,
    what: &str,
) {
    if want.len() > ctx.caps().death_retention {
        return; // the store keeps fewer records than one call writes here
    }
    want.sort_by_key(|r| r.1);
    assert_eq!(
        deaths_since(ctx, since).await,
        want,
        "{what}: the death records the call wrote"
    );
}

/// Checks what one call reaped: exactly the tokens of the leases `reaped` in the dead
/// set (the message says `which` those should be) and a death record with `cause` for
/// each; then empties the dead set for the next call.
async fn assert_reaped<'a>(
    ctx: &Ctx,
    since: Option<u64>,
    reaped: impl IntoIterator<Item = &'a Lease>,
    cause: DeathCause,
    what: &str,
    which: &str,
) {
    let mut reaped: Vec<(Key, FencingToken)> = reaped
        .into_iter()
        .map(|l| (l.key.clone(), l.token))
        .collect();
    reaped.sort_by_key(|d| d.1);
    assert_eq!(
        dead_set(ctx).await,
        reaped,
        "{what}: the dead set after the call ({which})"
    );
    let died = reaped.into_iter().map(|(k, t)| (k, t, cause)).collect();
    assert_deaths(ctx, since, died, what).await;
    sweep_dead_set(ctx).await;
}

/// Declares the kinds of entry of interest of one position scenario: a plain enum
/// whose `Display` (in failure messages) is the text beside each kind.
macro_rules! cases {
    ($(#[$doc:meta])* enum $name:ident { $($(#[$vdoc:meta])* $kind:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum $name {
            $($(#[$vdoc])* $kind,)+
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $($name::$kind => $text,)+
                })
            }
        }
    };
}

cases! {
    /// The entry of interest in an `acquire_many` position batch.
    enum AcquireCase {
        /// A key held live by another holder: `Held`, nothing changed.
        Held => "a key held live by another holder",
        /// A key with an expired lease: taken, the old lease reaped by the same step.
        Expired => "a key with an expired lease",
    }
}

/// acquire_many, entry by entry at every position, by its effect: batches of 1, 2, 3
/// and 5 free keys (at most `max_batch`), and batches of the same sizes with one entry,
/// moved through every position, on a key held live by another holder or on a key
/// whose lease expired. After each call the store is read: every entry answered with a
/// lease has exactly that lease in the store (holder, token, ttl, live); the tokens
/// grow in the order of the entries and past every earlier call's; the held key
/// answers `Held` naming its holder and is unchanged; the expired lease was reaped by
/// the same step (its token, and only it, in the dead set, with one `Superseded` death
/// record), and a call without one adds nothing to the dead set.
pub async fn acquire_many_takes_each_entry_at_every_position(ctx: Ctx) {
    let s = &ctx.store;
    let held = member(&ctx, "ap-held", "o", ctx.long).await;
    let runs = runs(&ctx, &[AcquireCase::Held, AcquireCase::Expired], 1);
    let mut expired = Vec::new();
    for _ in runs
        .iter()
        .filter(|(_, odd)| matches!(odd, Some((_, AcquireCase::Expired))))
    {
        expired.push(member(&ctx, "ap-exp", "o", ctx.ttl).await);
    }
    for lease in &expired {
        ctx.wait_expired(&lease.key).await;
    }
    let mut last = expired
        .iter()
        .map(|l| l.token)
        .fold(held.token, FencingToken::max);
    let mut expired = expired.into_iter();
    for (n, odd) in runs {
        let old = match odd {
            Some((_, AcquireCase::Expired)) => expired.next(),
            _ => None,
        };
        let batch = describe(n, odd, "a free key");
        let asked: Vec<Acquire> = (0..n)
            .map(|i| {
                let who = holder(&format!("h{i}"));
                match (odd, &old) {
                    (Some((p, AcquireCase::Held)), _) if p == i => {
                        Acquire::new(held.key.clone(), who, ctx.long)
                    }
                    (Some((p, AcquireCase::Expired)), Some(old)) if p == i => {
                        Acquire::new(old.key.clone(), who, ctx.long)
                    }
                    _ => Acquire::new(member_key("ap-free"), who, ctx.long),
                }
            })
            .collect();
        let since = last_death(&ctx).await;
        let answers = one_per_entry(s.acquire_many(&asked).await, n, "acquire_many", &batch);
        for (i, (ask, answer)) in asked.iter().zip(&answers).enumerate() {
            let at = format!("acquire_many entry {i} of {batch}");
            if odd == Some((i, AcquireCase::Held)) {
                match answer {
                    Err(Error::Held {
                        holder: h, token, ..
                    }) => assert_eq!(
                        (h, *token),
                        (&held.holder, held.token),
                        "{at}: Held names the live holder and its token"
                    ),
                    got => panic!(
                        "{at}: a key held live by another holder: expected Held, got {got:?}"
                    ),
                }
                let info = s
                    .inspect(&held.key)
                    .await
                    .unwrap_or_else(|e| panic!("{at}: inspect: {e}"));
                assert!(
                    info.as_ref().is_some_and(|i| i.is_live()
                        && (i.token, &i.holder, i.ttl) == (held.token, &held.holder, held.ttl)),
                    "{at}: answering Held changed the held lease: {info:?}"
                );
                continue;
            }
            let lease = answer
                .as_ref()
                .unwrap_or_else(|e| panic!("{at}: expected the key taken, got {e}"));
            assert_eq!(
                (&lease.key, &lease.holder, lease.ttl),
                (&ask.key, &ask.holder, ask.ttl),
                "{at}: the lease answered is not the one asked for"
            );
            assert!(
                lease.token > last,
                "{at}: token {} not above the token taken before it ({last})",
                lease.token
            );
            last = lease.token;
            let info = s
                .inspect(&ask.key)
                .await
                .unwrap_or_else(|e| panic!("{at}: inspect: {e}"))
                .unwrap_or_else(|| {
                    panic!("{at}: answered a lease, but the store holds no lease on the key")
                });
            assert_eq!(
                (info.token, &info.holder, info.ttl),
                (lease.token, &lease.holder, lease.ttl),
                "{at}: the store holds another lease than the one answered"
            );
            assert!(
                info.is_live(),
                "{at}: the lease taken is not live: {info:?}"
            );
        }
        let what = format!("acquire_many, {batch}");
        let which = "only an expired lease taken over goes there";
        assert_reaped(&ctx, since, &old, DeathCause::Superseded, &what, which).await;
    }
}

cases! {
    /// The entry of interest in a `renew_many` position batch: a lease that is no
    /// longer current, which answers `Lost` with this reason and changes nothing.
    enum RenewCase {
        /// Released by its holder.
        Released => "a released lease",
        /// Expired, and the key taken since by another holder.
        Superseded => "a superseded lease",
        /// Expired, nobody took the key.
        Expired => "an expired lease",
    }
}

impl RenewCase {
    fn cause(self) -> LostCause {
        match self {
            RenewCase::Released => LostCause::Released,
            RenewCase::Superseded => LostCause::Superseded,
            RenewCase::Expired => LostCause::Expired,
        }
    }
}

/// renew_many, entry by entry at every position, by its effect: batches of 1, 2, 3 and
/// 5 live leases (at most `max_batch`), and batches of the same sizes with one entry,
/// moved through every position, on a released, a superseded or an expired lease.
/// Each live lease was acquired with about half the long ttl and is renewed with the
/// long ttl, so the store shows whether the renewal was applied: after each call every
/// live lease has the same token, the long ttl (what `inspect` reports) and more time
/// left than its acquire gave it; a lost lease answers `Lost` with its own reason and
/// is unchanged (the released key empty, the newer holder's lease untouched, the
/// expired lease still expired with its old ttl).
pub async fn renew_many_extends_each_entry_at_every_position(ctx: Ctx) {
    let s = &ctx.store;
    let renew_ttl = ctx.long;
    let acquired = (ctx.long.duration() / 2).max(ctx.caps().min_ttl);
    let grant_ttl =
        Ttl::new(crate::round_up_ms(acquired)).unwrap_or_else(|e| panic!("grant ttl: {e}"));
    let released = member(&ctx, "rp-rel", "h", grant_ttl).await;
    assert!(s.release(&released).await.unwrap());
    let superseded = member(&ctx, "rp-sup", "h", ctx.ttl).await;
    let expired = member(&ctx, "rp-exp", "h", ctx.ttl).await;
    ctx.wait_expired(&superseded.key).await;
    ctx.wait_expired(&expired.key).await;
    let newer = ctx.grant(&superseded.key, &holder("h2"), ctx.long).await;
    let kinds = [
        RenewCase::Released,
        RenewCase::Superseded,
        RenewCase::Expired,
    ];
    for (n, odd) in runs(&ctx, &kinds, 1) {
        let batch = describe(n, odd, "a live lease");
        let mut asked = Vec::with_capacity(n);
        for i in 0..n {
            let lease = match odd {
                Some((p, RenewCase::Released)) if p == i => released.clone(),
                Some((p, RenewCase::Superseded)) if p == i => superseded.clone(),
                Some((p, RenewCase::Expired)) if p == i => expired.clone(),
                _ => member(&ctx, "rp-live", "h", grant_ttl).await,
            };
            let mut lease = lease;
            lease.ttl = renew_ttl;
            asked.push(lease);
        }
        let answers = one_per_entry(s.renew_many(&asked).await, n, "renew_many", &batch);
        for (i, (lease, answer)) in asked.iter().zip(&answers).enumerate() {
            let at = format!("renew_many entry {i} of {batch}");
            let info = |info: Result<Option<LeaseInfo>, Error>| {
                info.unwrap_or_else(|e| panic!("{at}: inspect: {e}"))
            };
            match odd {
                Some((p, kind)) if p == i => {
                    match answer {
                        Err(Error::Lost { reason, token, .. }) => assert_eq!(
                            (*reason, *token),
                            (kind.cause(), lease.token),
                            "{at}: Lost with the lease's own reason"
                        ),
                        got => panic!("{at}: expected Lost ({}), got {got:?}", kind.cause()),
                    }
                    let now = info(s.inspect(&lease.key).await);
                    let unchanged = match kind {
                        RenewCase::Released => now.is_none(),
                        RenewCase::Superseded => now.as_ref().is_some_and(|i| {
                            i.is_live()
                                && (i.token, &i.holder, i.ttl)
                                    == (newer.token, &newer.holder, newer.ttl)
                        }),
                        RenewCase::Expired => now.as_ref().is_some_and(|i| {
                            i.status == LeaseStatus::Expired
                                && (i.token, i.ttl) == (expired.token, expired.ttl)
                        }),
                    };
                    assert!(unchanged, "{at}: a Lost answer changed the key: {now:?}");
                }
                _ => {
                    let renewed = answer.as_ref().unwrap_or_else(|e| {
                        panic!("{at}: expected the live lease renewed, got {e}")
                    });
                    assert_eq!(
                        (&renewed.key, &renewed.holder, renewed.token, renewed.ttl),
                        (&lease.key, &lease.holder, lease.token, renew_ttl),
                        "{at}: the lease answered"
                    );
                    assert!(
                        renewed.expires_in <= renew_ttl.duration()
                            && (grant_ttl >= renew_ttl
                                || renewed.expires_in > grant_ttl.duration()),
                        "{at}: {:?} left answered: want more than the acquired ttl ({:?}) and at most the renewed one ({:?})",
                        renewed.expires_in,
                        grant_ttl.duration(),
                        renew_ttl.duration()
                    );
                    let now = info(s.inspect(&lease.key).await).unwrap_or_else(|| {
                        panic!("{at}: renewed, but the store holds no lease on the key")
                    });
                    assert_eq!(
                        (now.token, &now.holder),
                        (lease.token, &lease.holder),
                        "{at}: the store holds another lease"
                    );
                    assert_eq!(
                        now.ttl, renew_ttl,
                        "{at}: the store still has the ttl of the acquire: the renewal answered Ok but was not applied"
                    );
                    match now.status {
                        LeaseStatus::Live { remaining } => assert!(
                            grant_ttl >= renew_ttl || remaining > grant_ttl.duration(),
                            "{at}: {remaining:?} left in the store: not extended past what the acquire gave ({:?})",
                            grant_ttl.duration()
                        ),
                        LeaseStatus::Expired => panic!("{at}: renewed, but expired in the store"),
                        other => panic!("{at}: renewed, but in an unknown status {other:?}"),
                    }
                }
            }
        }
    }
}

cases! {
    /// The entry of interest in a `reap_many` position batch: one that answers false
    /// and changes nothing.
    enum ReapCase {
        /// A live lease.
        Live => "a live lease",
        /// An expired lease named with a wrong token.
        WrongToken => "an expired lease with a wrong token",
        /// A lease reaped before the call.
        Gone => "a lease reaped before",
    }
}

/// reap_many, entry by entry at every position, by its effect: batches of 1, 2, 3 and 5
/// expired current leases (at most `max_batch`), and batches of the same sizes with
/// one entry, moved through every position, on a live lease, on an expired lease named
/// with a wrong token, or on a lease reaped before. After each call every expired
/// lease answered true and is gone from the store, the dead set holds exactly their
/// tokens and the death records are exactly theirs (`Reaped`); the entry of interest
/// answered false and its key is unchanged.
pub async fn reap_many_reaps_each_entry_at_every_position(ctx: Ctx) {
    let s = &ctx.store;
    let live = member(&ctx, "rm-live", "h", ctx.long).await;
    let target = member(&ctx, "rm-wrong", "h", ctx.ttl).await;
    let gone = member(&ctx, "rm-gone", "h", ctx.ttl).await;
    let runs = runs(
        &ctx,
        &[ReapCase::Live, ReapCase::WrongToken, ReapCase::Gone],
        1,
    );
    let needed: usize = runs
        .iter()
        .map(|(n, odd)| n - usize::from(odd.is_some()))
        .sum();
    let mut pool = Vec::with_capacity(needed);
    for _ in 0..needed {
        pool.push(member(&ctx, "rm-exp", "h", ctx.ttl).await);
    }
    for lease in pool.iter().chain([&target, &gone]) {
        ctx.wait_expired(&lease.key).await;
    }
    // Gone by a release: a reap would go through the method under test.
    assert!(
        s.release(&gone).await.unwrap(),
        "release of an expired lease"
    );
    sweep_dead_set(&ctx).await;
    let wrong = FencingToken(target.token.0 + 1_000_000);
    let mut pool = pool.into_iter();
    for (n, odd) in runs {
        let batch = describe(n, odd, "an expired lease");
        let mut entries = Vec::with_capacity(n);
        let mut reaped = Vec::new();
        for i in 0..n {
            entries.push(match odd {
                Some((p, ReapCase::Live)) if p == i => (live.key.clone(), live.token),
                Some((p, ReapCase::WrongToken)) if p == i => (target.key.clone(), wrong),
                Some((p, ReapCase::Gone)) if p == i => (gone.key.clone(), gone.token),
                _ => {
                    let lease = pool
                        .next()
                        .unwrap_or_else(|| panic!("one expired lease per plain entry"));
                    let entry = (lease.key.clone(), lease.token);
                    reaped.push(lease);
                    entry
                }
            });
        }
        let since = last_death(&ctx).await;
        let answers = one_per_entry(s.reap_many(&entries).await, n, "reap_many", &batch);
        for (i, ((key, token), answer)) in entries.iter().zip(&answers).enumerate() {
            let at = format!("reap_many entry {i} of {batch}");
            let answer = answer.as_ref().unwrap_or_else(|e| panic!("{at}: {e}"));
            let now = s
                .inspect(key)
                .await
                .unwrap_or_else(|e| panic!("{at}: inspect: {e}"));
            match odd {
                Some((p, kind)) if p == i => {
                    assert!(!answer, "{at}: {kind} must answer false");
                    let unchanged = match kind {
                        ReapCase::Live => now
                            .as_ref()
                            .is_some_and(|i| i.is_live() && i.token == live.token),
                        ReapCase::WrongToken => now.as_ref().is_some_and(|i| {
                            i.status == LeaseStatus::Expired && i.token == target.token
                        }),
                        ReapCase::Gone => now.is_none(),
                    };
                    assert!(unchanged, "{at}: reaping {kind} changed the key: {now:?}");
                }
                _ => {
                    assert!(
                        answer,
                        "{at}: an expired current lease (token {token}) must be reaped (true)"
                    );
                    assert!(
                        now.is_none(),
                        "{at}: answered true, but the lease is still in the store: {now:?}"
                    );
                }
            }
        }
        let what = format!("reap_many, {batch}");
        let which = "exactly the tokens reaped";
        assert_reaped(&ctx, since, &reaped, DeathCause::Reaped, &what, which).await;
    }
}

cases! {
    /// The entry of interest in a `sweep_many` position batch.
    enum RequeueCase {
        /// A live member's token: empty, its item stays owned.
        Live => "a live member's token",
        /// A dead token swept before the call: empty.
        Swept => "a token swept before",
        /// The token of the next entry again (of the first, for the last entry): of
        /// the two, the first in the list moves the items, the other answers empty.
        Twice => "another entry's token again",
    }
}

/// sweep_many, entry by entry at every position, by its effect: batches of
/// 1, 2, 3 and 5 dead tokens (at most `max_batch`) that each own one item, and
/// batches of the same sizes with one entry, moved through every position, on a live
/// member's token, on a token swept before, or repeating another entry's token. Every
/// other item has attempts left (back to pending) or none (to the dead letters), by
/// turns. After each call every dead token answered exactly its own item, moved once
/// (a repeated token moves nothing the second time), each item is in the state it was
/// moved to, the dead set is empty, each token's death record says what its sweep
/// moved; the live member's item stays owned.
pub async fn sweep_many_requeues_each_token_at_every_position(ctx: Ctx) {
    let s = &ctx.store;
    let sink = member(&ctx, "rq-sink", "sink", ctx.long).await;
    let live_item = s.enqueue(b"live", opts(3)).await.unwrap();
    let live = member(&ctx, "rq-live", "live", ctx.long).await;
    let ids = claim_ids(&ctx, &live, 1).await;
    assert_eq!(ids, vec![live_item], "the live member claims its item");
    let swept = member(&ctx, "rq-swept", "w", ctx.long).await;
    assert!(s.release(&swept).await.unwrap());
    assert!(s.sweep(swept.token).await.unwrap().is_empty());
    let kinds = [RequeueCase::Live, RequeueCase::Swept];
    let mut runs = runs(&ctx, &kinds, 1);
    runs.extend(
        self::runs(&ctx, &[RequeueCase::Twice], 2)
            .into_iter()
            .filter(|(_, odd)| odd.is_some()),
    );
    let mut turn = 0_u32;
    for (n, odd) in runs {
        let batch = describe(n, odd, "a dead token owning one item");
        // Fresh dead tokens, each owning one item, for every entry but the one of
        // interest.
        let mut dead = Vec::new();
        for _ in 0..n - usize::from(odd.is_some()) {
            let max_attempts = if turn.is_multiple_of(2) { 3 } else { 1 };
            turn += 1;
            let id = s.enqueue(b"orphan", opts(max_attempts)).await.unwrap();
            let lease = member(&ctx, "rq-dead", "w", ctx.long).await;
            let ids = claim_ids(&ctx, &lease, 1).await;
            assert_eq!(ids, vec![id], "the claim takes the item just enqueued");
            assert!(s.release(&lease).await.unwrap());
            dead.push((lease.token, id, max_attempts));
        }
        let mut others = dead.iter().map(|d| d.0);
        let mut tokens: Vec<FencingToken> = (0..n)
            .map(|i| match odd {
                Some((p, RequeueCase::Live)) if p == i => live.token,
                Some((p, RequeueCase::Swept)) if p == i => swept.token,
                Some((p, RequeueCase::Twice)) if p == i => FencingToken(0), // filled below
                _ => others
                    .next()
                    .unwrap_or_else(|| panic!("one dead token per entry")),
            })
            .collect();
        if let Some((p, RequeueCase::Twice)) = odd {
            tokens[p] = tokens[(p + 1) % n];
        }
        let answers = one_per_entry(s.sweep_many(&tokens).await, n, "sweep_many", &batch);
        let mut seen = std::collections::HashSet::new();
        for (i, (token, answer)) in tokens.iter().zip(&answers).enumerate() {
            let at = format!("sweep_many entry {i} of {batch}");
            let answer = answer.as_ref().unwrap_or_else(|e| panic!("{at}: {e}"));
            let own = dead.iter().find(|d| d.0 == *token);
            match own {
                Some(&(_, id, max_attempts)) if seen.insert(*token) => {
                    let want = if max_attempts > 1 {
                        Sweep::new(vec![id], Vec::new())
                    } else {
                        Sweep::new(Vec::new(), vec![id])
                    };
                    assert_eq!(
                        answer, &want,
                        "{at}: a dead token (token {token}) owning item {id} (max_attempts {max_attempts})"
                    );
                    let state = s
                        .item(id)
                        .await
                        .unwrap_or_else(|e| panic!("{at}: item: {e}"))
                        .map(|r| r.state);
                    let moved_to = if max_attempts > 1 {
                        ItemState::Pending
                    } else {
                        ItemState::DeadLettered
                    };
                    assert_eq!(
                        state,
                        Some(moved_to),
                        "{at}: item {id} of the dead token is not where the answer says it went"
                    );
                }
                Some(_) => assert!(
                    answer.is_empty(),
                    "{at}: a token given a second time moved items again: {answer:?}"
                ),
                None => assert!(
                    answer.is_empty(),
                    "{at}: a token not in the dead set ({}) moved items: {answer:?}",
                    odd.map_or("?".to_string(), |(_, k)| k.to_string())
                ),
            }
        }
        let state = s.item(live_item).await.unwrap().map(|r| r.state);
        assert_eq!(
            state,
            Some(ItemState::Owned(live.token)),
            "sweep_many, {batch}: the live member's item"
        );
        assert_eq!(
            dead_set(&ctx).await,
            Vec::new(),
            "sweep_many, {batch}: tokens left in the dead set after the call"
        );
        if dead.len() <= ctx.caps().death_retention {
            let records = s.deaths(None, 32).await.unwrap();
            for &(token, id, max_attempts) in &dead {
                let record = records
                    .iter()
                    .find(|d| d.token == token)
                    .unwrap_or_else(|| {
                        panic!("sweep_many, {batch}: no death record of token {token}")
                    });
                let want = if max_attempts > 1 {
                    Swept::new(0, 1, 0)
                } else {
                    Swept::new(0, 0, 1)
                };
                assert_eq!(
                    record.swept,
                    Some(want),
                    "sweep_many, {batch}: the death record of token {token} (item {id}) says what its sweep moved"
                );
            }
        }
        // The items sent back to pending are claimed and completed, so that the next
        // batch's claims take the items enqueued for them.
        for item in s.claim(&sink, 32).await.unwrap() {
            s.complete(&sink, item.id).await.unwrap();
        }
        assert_eq!(s.item_counts().await.unwrap().pending, 0);
    }
}
