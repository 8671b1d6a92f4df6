//! Taking a lease and taking it again: a first join, a re-join after a loss, each
//! attempt (adopting a ghost of our own), and the rule for when the work of a lost
//! lease may be handed over. One engine for a member's own lease, a rider's and a
//! session's.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::detached::{join_detached, Leftovers};
use super::footing::SessionGen;
use crate::backoff::Backoff;
use crate::batch::{acquire_via, renew_via, Joins};
use crate::error::{Error, LostCause, Result};
use crate::events::HolderLoss;
use crate::heartbeat::spread;
use crate::lease::Lease;
use crate::member::config::MemberConfig;
use crate::store::Store;
use crate::types::{FencingToken, HolderId, Key};

/// The session a rider's join rides: its current lease, and its next ones as they
/// come.
pub(crate) trait Ridden: Sync {
    /// The session's current generation.
    fn current(&self) -> SessionGen;
    /// A receiver that sees each next generation.
    fn generations(&self) -> watch::Receiver<SessionGen>;
    /// The gatherer its members' joins go through (a store with native sessions),
    /// if any; else each join is a call of its own.
    fn joins(&self) -> Option<&Joins>;
}

/// Waits until the work of a lease lost for `reason` may be handed over (by the next
/// lease's acquire, which puts the old token in the dead set), the one rule for a
/// member's own lease, a rider's and a session's:
/// - at once when the store ended the lease (expired, superseded, released: its items
///   may be anybody's already) or a stall handed the items back itself;
/// - after the stop `margin` when the store refused the lease without ending it (a
///   failover's `Lost`, or `refused_in_place`: the session of a rider that outlives
///   it), so the work, told to stop, gets its margin;
/// - else (renewals failed, the local deadline passed) when `expiry` says the store
///   itself may have expired the lease.
///
/// False when `stop` fired first.
pub(crate) async fn wait_to_hand_over(
    reason: HolderLoss,
    refused_in_place: bool,
    margin: Duration,
    stop: &CancellationToken,
    expiry: impl std::future::Future<Output = bool>,
) -> bool {
    match reason {
        HolderLoss::Store(LostCause::Failover) => wait_margin(margin, stop).await,
        HolderLoss::Store(_) if refused_in_place => wait_margin(margin, stop).await,
        HolderLoss::Store(_) | HolderLoss::Stalled => true,
        _ => expiry.await,
    }
}

/// Waits the stop margin `margin`; false when `stop` fired first.
async fn wait_margin(margin: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(margin) => true,
        () = stop.cancelled() => false,
    }
}

/// A "ghost": a lease of this member's own holder id that an attempt whose reply was
/// lost (or came too late) created, so that nothing was claimed under it. Renewing it
/// ([`Store::renew`](crate::Store::renew)) makes it the member's lease
/// exactly as a fresh acquire would (its deadline counts from the renewal's send
/// time), without burning a new token, a dead-set entry and a sweep on a release and
/// another acquire.
pub(crate) fn ghost_lease(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    holder: HolderId,
    token: FencingToken,
) -> Lease {
    Lease {
        issuer: store.issuer().clone(),
        key: key.clone(),
        holder,
        token,
        ttl: config.heartbeat.ttl,
        expires_in: Duration::ZERO,
    }
}

/// True when an answer to a request sent at `sent_on_clock` (the member's boot clock)
/// came back after the local deadline it would start: the request waited longer than
/// `ttl − margin` in an overloaded queue or store.
pub(crate) fn born_dead(config: &MemberConfig, sent_on_clock: Duration) -> bool {
    config.clock.boot() >= sent_on_clock + config.heartbeat.budget()
}

/// How a join takes the member's key: as a lease of its own, or riding a session's
/// current lease ([`LeaseStore::join_session_many`](crate::LeaseStore::join_session_many)).
#[derive(Clone, Copy)]
pub(crate) enum Take<'a> {
    /// A lease of its own (and the session's own lease is taken so too).
    Own,
    /// Riding this session.
    Ride(&'a dyn Ridden),
}

impl Take<'_> {
    /// True when riding a session.
    pub(crate) fn rides(self) -> bool {
        matches!(self, Take::Ride(_))
    }

    /// Waits up to `pause` (less once the session has a new lease to ride) or until
    /// `stop` fires (then false).
    async fn pause(self, pause: Duration, stop: &CancellationToken) -> bool {
        let mut next = match self {
            Take::Ride(session) => Some(session.generations()),
            Take::Own => None,
        };
        let changed = async {
            match next.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(pause) => true,
            _ = changed => true,
        }
    }
}

/// One attempt of a join or re-join: renews the `ghost` lease of ours when there is
/// one (adopting it), else takes the key as `take` says (for a lease of its own
/// through the batcher when the member has one). A ghost that is gone meanwhile is
/// forgotten and the key taken at once (the acquire takes, and reaps, what is left
/// of it); one the renewal did not reach stays for the next attempt. Riding, it
/// answers the session generation it rode, and `Lost` at once, without a round
/// trip, while the session's current lease is lost by its own checks.
///
/// A lease it answered, or may have left (a retryable fault: its reply may be lost),
/// goes into `leftovers` until the caller hands that member over.
pub(crate) async fn attempt(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    ghost: &mut Option<Lease>,
    take: Take<'_>,
    leftovers: &mut Leftovers,
) -> Result<(Lease, Option<SessionGen>)> {
    let answer = attempt_once(store, config, key, ghost, take).await;
    if answer.as_ref().map_or_else(Error::is_retryable, |_| true) {
        leftovers.maybe_left(key, &config.holder);
    }
    answer
}

/// [`attempt`], without its bookkeeping of what may be left.
async fn attempt_once(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    ghost: &mut Option<Lease>,
    take: Take<'_>,
) -> Result<(Lease, Option<SessionGen>)> {
    let session = match take {
        Take::Own => None,
        Take::Ride(session) => {
            let gen = session.current();
            gen.standing.check()?;
            Some(gen)
        }
    };
    let batcher = config.batcher.as_ref();
    if let Some(g) = ghost.take() {
        match renew_via(store, batcher, &g).await {
            Err(Error::Lost { .. }) => {}
            Err(e) => {
                *ghost = Some(g);
                return Err(e);
            }
            Ok(lease) => return Ok((lease, session)),
        }
    }
    let lease = match (&session, take) {
        (Some(s), Take::Ride(ridden)) => match ridden.joins() {
            Some(joins) => joins.join(&s.lease, key, &config.holder).await,
            None => {
                let (store2, session) = (store.clone(), s.lease.clone());
                let (key, holder) = (key.clone(), config.holder.clone());
                let call = async move { store2.join_session(&session, &key, &holder).await };
                join_detached(store, call, |lease| vec![lease]).await
            }
        },
        _ => acquire_via(store, batcher, key, &config.holder, config.heartbeat.ttl).await,
    };
    lease.map(|lease| (lease, session))
}

/// What a successful join answers: the lease, when its request was sent (tokio's
/// clock and the member's clock), and the session generation it rides, if any.
pub(crate) type Joined = (Lease, Instant, Duration, Option<SessionGen>);

/// The first join of a member (or the first acquire of a session's lease): takes
/// `key` as `take` says, retrying retryable faults (and, riding, a session being
/// re-opened) for up to one ttl, adopting its own ghost, failing with `Held` when
/// another instance holds the key.
pub(crate) async fn first_join(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    take: Take<'_>,
) -> Result<Joined> {
    let give_up = Instant::now() + config.heartbeat.ttl.duration();
    let mut backoff = Backoff::new(
        config.heartbeat.renew_every / 8,
        config.heartbeat.renew_every,
    );
    let never = CancellationToken::new();
    // True once an attempt failed with a transient fault: the store may have
    // applied it and lost the reply, leaving a "ghost" lease of ours.
    let mut maybe_ghost = false;
    // A lease of ours to adopt (renew) instead of acquiring anew.
    let mut ghost: Option<Lease> = None;
    // A rider's ghost has no expiry of its own: released if this join ends (or is
    // dropped) without handing its member over.
    let mut leftovers = Leftovers::new(store, take.rides());
    loop {
        let sent = Instant::now();
        let sent_on_clock = config.clock.boot();
        match attempt(store, config, key, &mut ghost, take, &mut leftovers).await {
            Ok((lease, _)) if born_dead(config, sent_on_clock) && Instant::now() < give_up => {
                // Answered after the deadline it starts (an overloaded queue or
                // store): nothing was done under it, so it is adopted, not thrown
                // away for a new token, a dead-set entry and a sweep.
                ghost = Some(lease);
            }
            Ok((lease, session)) => {
                leftovers.handed_over(key);
                return Ok((lease, sent, sent_on_clock, session));
            }
            Err(Error::Held { holder, token, .. })
                if maybe_ghost && holder == config.holder && Instant::now() < give_up =>
            {
                // Our own ghost (the holder id carries this join's nonce): an
                // earlier attempt of this join that the store applied. Nobody
                // knows its token and it owns nothing: adopt it by renewing it,
                // instead of burning a token (and a dead-set entry) on a release
                // and a new acquire.
                ghost = Some(ghost_lease(store, config, key, holder, token));
            }
            Err(e) if e.is_retryable() && Instant::now() < give_up => {
                maybe_ghost = true;
                tokio::time::sleep(backoff.next()).await;
            }
            Err(Error::Lost { .. })
                if matches!(take, Take::Ride(_)) && Instant::now() < give_up =>
            {
                // The session is lost and being re-opened: join its next lease.
                take.pause(backoff.next(), &never).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Takes the member key again, waiting out a live lease and retrying faults (and,
/// riding, waiting for the session's next lease), until it succeeds or `stop` fires.
///
/// No amplification under overload: every pause is jittered; a ghost of an attempt
/// whose reply was lost is adopted (renewed), not released and acquired again; only
/// the lost lease itself (`old`), whose work was told to stop, is released.
pub(crate) async fn rejoin(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    old: &Lease,
    stop: &CancellationToken,
    take: Take<'_>,
) -> Option<Joined> {
    let mut backoff = Backoff::new(
        config.heartbeat.renew_every / 8,
        config.heartbeat.renew_every,
    );
    // A lease of ours to adopt (renew) instead of acquiring anew.
    let mut ghost: Option<Lease> = None;
    // A rider's ghost has no expiry of its own: released if this re-join stops
    // without handing its member over.
    let mut leftovers = Leftovers::new(store, take.rides());
    loop {
        if stop.is_cancelled() {
            return None;
        }
        let sent = Instant::now();
        let sent_on_clock = config.clock.boot();
        let pause = match attempt(store, config, key, &mut ghost, take, &mut leftovers).await {
            Ok((lease, _)) if born_dead(config, sent_on_clock) => {
                // Answered after the deadline it starts (an overloaded queue or
                // store): adopt it rather than burn another token on it.
                ghost = Some(lease);
                Duration::ZERO
            }
            Ok((lease, session)) => {
                leftovers.handed_over(key);
                return Some((lease, sent, sent_on_clock, session));
            }
            Err(Error::Held { token, .. }) if token == old.token => {
                // The lease we just lost, still live by the store's clock (it started
                // counting on arrival): its work was told to stop, so it is finished.
                match store.release(old).await {
                    Ok(_) => Duration::ZERO,
                    Err(e) => {
                        // Not at once again: a store that cannot release now would
                        // be hammered in a tight loop.
                        tracing::warn!(%key, error = %e, "releasing an own leftover lease failed, retrying");
                        backoff.next()
                    }
                }
            }
            Err(Error::Held { holder, token, .. }) if holder == config.holder => {
                // A "ghost": an acquire of this re-join that timed out on our side but
                // was applied by the store. The holder id carries this member's
                // nonce, so nobody else's lease matches. Adopt it.
                ghost = Some(ghost_lease(store, config, key, holder, token));
                Duration::ZERO
            }
            // Somebody else's live lease (another instance of this name): look again
            // in about one renew interval, jittered so that many re-joiners spread.
            Err(Error::Held { .. }) => spread(config.heartbeat.renew_every, 0.5),
            // Riding a session that is lost: its next lease comes (the pause ends
            // early then), jittered so that its many members spread.
            Err(Error::Lost { .. }) if matches!(take, Take::Ride(_)) => backoff.next(),
            Err(e) => {
                tracing::warn!(%key, error = %e, "re-join failed, retrying");
                backoff.next()
            }
        };
        if pause.is_zero() {
            continue;
        }
        if !take.pause(pause, stop).await {
            return None;
        }
    }
}
