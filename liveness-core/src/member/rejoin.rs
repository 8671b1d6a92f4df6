//! The member's background life: the heartbeat task that keeps each generation
//! alive, and the join attempts and re-joins after a loss (with the rule that a
//! leftover lease is this member's own ghost only under its own instance holder id).

use super::*;

/// The heartbeat task: keeps each generation alive, and re-joins after a loss.
pub(super) async fn run(inner: std::sync::Weak<Inner>, first: Generation, sent: Instant) {
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let store = strong.store.clone();
    let config = strong.config.clone();
    let key = strong.key.clone();
    let stop = strong.stop.clone();
    let metrics = strong.metrics.clone();
    drop(strong);
    let heartbeat = Heartbeat {
        store: &store,
        batcher: config.batcher.as_ref(),
        config: config.heartbeat,
        stop: &stop,
        events: &config.events,
        metrics: &metrics,
    };
    let (mut gen, mut sent) = (first, sent);
    loop {
        let alive = heartbeat.keep_alive(gen.lease.clone(), sent, &gen.standing);
        let end = match config.progress_timeout {
            None => alive.await,
            Some(timeout) => tokio::select! {
                end = alive => end,
                () = stalled(&inner, timeout, &gen.standing) => {
                    metrics.lost(HolderLoss::Stalled);
                    End::Lost(gen.lease.clone(), HolderLoss::Stalled)
                }
            },
        };
        let (old, reason) = match end {
            End::Stopped(lease) => {
                if let Some(inner) = inner.upgrade() {
                    inner.generation.send_modify(|g| g.lease = lease);
                }
                return;
            }
            End::Lost(lease, reason) => (lease, reason),
        };
        config.events.emit(Event::Lost {
            key: key.clone(),
            token: old.token,
            reason,
        });
        if reason == HolderLoss::Stalled
            && !release_stalled(&inner, &store, &old, config.heartbeat.safety_margin, &stop).await
        {
            return;
        }
        let leaving = inner
            .upgrade()
            .is_none_or(|i| i.leaving.load(Ordering::SeqCst));
        if !config.rejoin || stop.is_cancelled() || leaving {
            return;
        }
        // The old token is finished either way. No new acquire earlier than the store
        // itself would expire it, unless the store already answered `Lost`: the margin
        // is the time the work has to stop, and the store must not hand the work away
        // before that. The re-join's acquire then puts the old token in the dead set by
        // itself (an acquire reaps the expired lease on its key in the same atomic
        // step; a lease still live by the store's clock is answered `Held` with the old
        // token and released): no separate release round trip per loss.
        if !matches!(reason, HolderLoss::Store(_) | HolderLoss::Stalled)
            && !gen
                .standing
                .wait_store_expiry(config.heartbeat.tick(), &stop)
                .await
        {
            return;
        }
        match rejoin(&store, &config, &key, &old, &stop).await {
            Some((lease, at, at_on_clock)) => {
                gen = Generation::joined(&config, &metrics, "rejoin", lease, at_on_clock);
                sent = at;
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                // A new generation's work starts with a clean slate for the watchdog.
                inner.note_progress();
                inner.generation.send_replace(gen.clone());
            }
            None => return,
        }
    }
}

/// A "ghost": a lease of this member's own holder id that an attempt whose reply was
/// lost (or came too late) created, so that nothing was claimed under it. Renewing it
/// ([`renew`]) makes it the member's lease exactly as a fresh acquire would (its
/// deadline counts from the renewal's send time), without burning a new token, a
/// dead-set entry and a sweep on a release and another acquire.
pub(super) fn ghost_lease(
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
pub(super) fn born_dead(config: &MemberConfig, sent_on_clock: Duration) -> bool {
    config.clock.boot() >= sent_on_clock + config.heartbeat.budget()
}

/// One attempt of a join or re-join: renews the `ghost` lease of ours when there is
/// one (adopting it), else acquires the key; through the batcher when the member has
/// one. A ghost that is gone meanwhile is forgotten and the key acquired at once (the
/// acquire takes, and reaps, what is left of it); one the renewal did not reach stays
/// for the next attempt.
pub(super) async fn attempt(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    ghost: &mut Option<Lease>,
) -> Result<Lease> {
    let batcher = config.batcher.as_ref();
    if let Some(g) = ghost.take() {
        match renew_via(store, batcher, &g).await {
            Err(Error::Lost { .. }) => {}
            Err(e) => {
                *ghost = Some(g);
                return Err(e);
            }
            Ok(lease) => return Ok(lease),
        }
    }
    let ttl = config.heartbeat.ttl;
    acquire_via(store, batcher, key, &config.holder, ttl).await
}

/// Acquires the member key again, waiting out a live lease and retrying faults, until
/// it succeeds or `stop` fires.
///
/// No amplification under overload: every pause is jittered; a ghost of an attempt
/// whose reply was lost is adopted (renewed), not released and acquired again; only
/// the lost lease itself (`old`), whose work was told to stop, is released.
pub(super) async fn rejoin(
    store: &Arc<dyn Store>,
    config: &MemberConfig,
    key: &Key,
    old: &Lease,
    stop: &CancellationToken,
) -> Option<(Lease, Instant, Duration)> {
    let mut backoff = Backoff::new(
        config.heartbeat.renew_every / 8,
        config.heartbeat.renew_every,
    );
    // A lease of ours to adopt (renew) instead of acquiring anew.
    let mut ghost: Option<Lease> = None;
    loop {
        if stop.is_cancelled() {
            return None;
        }
        let sent = Instant::now();
        let sent_on_clock = config.clock.boot();
        let pause = match attempt(store, config, key, &mut ghost).await {
            Ok(lease) if born_dead(config, sent_on_clock) => {
                // Answered after the deadline it starts (an overloaded queue or
                // store): adopt it rather than burn another token on it.
                ghost = Some(lease);
                Duration::ZERO
            }
            Ok(lease) => return Some((lease, sent, sent_on_clock)),
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
            Err(e) => {
                tracing::warn!(%key, error = %e, "re-join failed, retrying");
                backoff.next()
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// The member's watchdog ([`MemberConfig::progress_timeout`]): returns once the work
/// has made no progress for `timeout` by the member's clock, after marking the
/// generation's standing lost ([`LostCause::Stalled`]: its cancellation fires, its
/// checks answer `Lost`). Never while the member is leaving; never once it is gone.
async fn stalled(inner: &std::sync::Weak<Inner>, timeout: Duration, standing: &Standing) {
    loop {
        let idle = match inner.upgrade() {
            Some(i) if i.leaving.load(Ordering::SeqCst) => Duration::ZERO,
            Some(i) => i.idle(),
            None => return std::future::pending().await,
        };
        if idle >= timeout {
            standing.lose(LostCause::Stalled);
            return;
        }
        tokio::time::sleep(timeout - idle).await;
    }
}

/// After a stall: gives the stopped work the safety `margin`, then hands back (an
/// attempt each) the items the member still owns under `old`, and releases `old`.
/// Until then the lease stays live in the store, so no item is handed to anybody
/// else before its work was told to stop and had the margin to do so. What cannot be
/// handed back or released now (the store unreachable) the checker requeues once the
/// lease expires. False when `stop` fired first (the member is leaving or gone).
async fn release_stalled(
    inner: &std::sync::Weak<Inner>,
    store: &Arc<dyn Store>,
    old: &Lease,
    margin: Duration,
    stop: &CancellationToken,
) -> bool {
    tokio::select! {
        _ = stop.cancelled() => return false,
        _ = tokio::time::sleep(margin) => {}
    }
    let items: Vec<ItemId> = match inner.upgrade() {
        Some(i) => {
            let mut owned = lock(&i.owned);
            let ids: Vec<ItemId> = owned
                .iter()
                .filter(|(_, (token, _))| *token == old.token)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().for_each(|id| {
                owned.remove(id);
            });
            ids
        }
        None => return false,
    };
    for id in items {
        if let Err(e) = store.fail(old, id, true).await {
            tracing::warn!(key = %old.key, item = %id, error = %e, "could not hand back a stalled member's item");
        }
    }
    match store.release(old).await {
        Ok(_) => {
            tracing::warn!(key = %old.key, token = %old.token, "a stalled member's work was stopped and its lease released")
        }
        Err(e) => {
            tracing::warn!(key = %old.key, error = %e, "could not release a stalled member's lease: it expires")
        }
    }
    true
}
