//! The member's background life: the heartbeat task that keeps each generation of a
//! lease of its own alive, what follows a loss (a riding member's too), and the join
//! attempts and re-joins (with the rule that a leftover lease is this member's own
//! ghost only under its own instance holder id).

use super::*;
use crate::unreaped::Watching;

/// What a member's background work (its heartbeat, or a riding member's recovery
/// after a loss) reads of it: taken once, so that it holds the member only weakly.
pub(super) struct Life {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: MemberConfig,
    pub(super) key: Key,
    pub(super) stop: CancellationToken,
    pub(super) metrics: HolderMetrics,
    pub(super) session: Option<Arc<dyn Carrier>>,
}

impl Life {
    /// What the background work of `inner` reads.
    pub(super) fn of(inner: &Inner) -> Life {
        Life {
            store: inner.store.clone(),
            config: inner.config.clone(),
            key: inner.key.clone(),
            stop: inner.stop.clone(),
            metrics: inner.metrics.clone(),
            session: inner.session.clone(),
        }
    }

    /// How the member takes its key.
    fn take(&self) -> Take<'_> {
        match &self.session {
            Some(session) => Take::Ride(&**session),
            None => Take::Own,
        }
    }

    /// After the loss of `gen` (its [`Event::Lost`] sent, for `reason`): hands a
    /// stalled member's items back and releases its lease, waits until the store
    /// itself may have expired the lost lease (unless the store answered `Lost`), and
    /// re-joins under a new token, unless the member may not (its configuration, it
    /// is leaving, or it is gone). `old` is the lost lease as last renewed. The new
    /// generation, installed as the member's, and when its request was sent.
    pub(super) async fn after_loss(
        &self,
        inner: &Weak<Inner>,
        gen: &Generation,
        old: &Lease,
        reason: HolderLoss,
    ) -> Option<(Generation, Instant)> {
        let (config, stop) = (&self.config, &self.stop);
        if reason == HolderLoss::Stalled
            && !Box::pin(release_stalled(
                inner,
                &self.store,
                old,
                config.heartbeat.safety_margin,
                stop,
            ))
            .await
        {
            return None;
        }
        let leaving = inner
            .upgrade()
            .is_none_or(|i| i.leaving.load(Ordering::SeqCst));
        if !config.rejoin || stop.is_cancelled() || leaving {
            return None;
        }
        // The old token is finished either way. No new acquire earlier than the store
        // itself would expire it, unless the store already answered `Lost`: the margin
        // is the time the work has to stop, and the store must not hand the work away
        // before that. The re-join's acquire then puts the old token in the dead set by
        // itself (an acquire reaps the expired lease on its key in the same atomic
        // step; a lease still live by the store's clock is answered `Held` with the old
        // token and released): no separate release round trip per loss.
        // A member riding a session that was lost waits for the session's next lease,
        // which the session takes only once the old one may have expired.
        let tick = config.heartbeat.tick();
        // A rider on a store without native sessions has a lease of its own, which its
        // session's refusal did not end: nobody has its work yet.
        let outlives_session = gen
            .riding()
            .is_some_and(|r| r.own_deadline().is_some() && r.session_lost());
        let expiry = async {
            match &*gen.footing {
                Footing::Own(standing) => Box::pin(standing.wait_store_expiry(tick, stop)).await,
                Footing::Riding(riding) => Box::pin(riding.wait_store_expiry(tick, stop)).await,
            }
        };
        let margin = config.heartbeat.safety_margin;
        let waited = wait_to_hand_over(reason, outlives_session, margin, stop, expiry).await;
        if !waited {
            return None;
        }
        let take = self.take();
        let (lease, at, at_on_clock, session) =
            Box::pin(rejoin(&self.store, config, &self.key, old, stop, take)).await?;
        let native = self.session.as_ref().is_some_and(|s| s.native());
        let ride = session.as_ref().map(|s| (s, native));
        let next = Generation::joined(config, &self.metrics, "rejoin", lease, at_on_clock, ride);
        let Some(inner) = inner
            .upgrade()
            .filter(|i| !i.departed.load(Ordering::SeqCst))
        else {
            // The caller let go of the member while it re-joined: nobody would renew
            // the new lease, nor hand back work under it (there is none yet). It is
            // released as a dropped member's is, retried: a rider's lease has no
            // expiry of its own.
            Departure {
                store: self.store.clone(),
                lease: next.lease,
                items: Vec::new(),
                margin: Duration::ZERO,
                announce: None,
                keep: self
                    .session
                    .clone()
                    .map(|s| s as Arc<dyn Any + Send + Sync>),
            }
            .start();
            return None;
        };
        // A new generation's work starts with a clean slate for the watchdog.
        inner.note_progress();
        inner.set_generation(next.clone());
        Some((next, at))
    }
}

/// What runs for a member in the background: its heartbeat (a lease of its own), or
/// a riding member's recovery after a loss (while `recovering`).
#[derive(Debug, Default)]
pub(super) struct Background {
    /// The heartbeat, or the recovery while it runs.
    pub(super) task: Option<JoinHandle<()>>,
    /// A riding member's loss is being handled (announced, and re-joined unless the
    /// member may not): its session's task leaves it alone meanwhile. Stays set when
    /// no re-join follows.
    pub(super) recovering: bool,
    /// A member with a lease of its own watches for leases nobody reaps.
    pub(super) unreaped: Option<Watching>,
}

impl Inner {
    /// The current generation.
    pub(super) fn current(&self) -> Generation {
        lock(&self.generation).clone()
    }

    /// Makes `next` the current generation, and tells the watchers.
    pub(super) fn set_generation(&self, next: Generation) {
        let mut gen = lock(&self.generation);
        *gen = next;
        if let Some(tx) = self.watchers.get() {
            tx.send_replace(gen.clone());
        }
    }

    /// Changes the current generation in place, and tells the watchers.
    pub(super) fn update_generation(&self, change: impl FnOnce(&mut Generation)) {
        let mut gen = lock(&self.generation);
        change(&mut gen);
        if let Some(tx) = self.watchers.get() {
            tx.send_replace(gen.clone());
        }
    }
}

/// The heartbeat task of a member holding a lease of its own: keeps each generation
/// alive, and re-joins after a loss. (A member riding a session has none: its
/// session's task tends it.)
pub(super) async fn run(inner: Weak<Inner>, first: Generation, sent: Instant) {
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let life = Life::of(&strong);
    drop(strong);
    let Life {
        store,
        config,
        key,
        stop,
        metrics,
        ..
    } = &life;
    let heartbeat = Heartbeat {
        store,
        batcher: config.batcher.as_ref(),
        alongside: None,
        config: config.heartbeat,
        stop,
        events: &config.events,
        metrics,
    };
    let (mut gen, mut sent) = (first, sent);
    loop {
        let Footing::Own(standing) = &*gen.footing else {
            return;
        };
        let alive = Box::pin(heartbeat.keep_alive(gen.lease.clone(), sent, standing));
        let end = match config.progress_timeout {
            None => alive.await,
            Some(timeout) => tokio::select! {
                end = alive => end,
                () = stalled(&inner, timeout, &gen.footing) => {
                    metrics.lost(HolderLoss::Stalled);
                    End::Lost(gen.lease.clone(), HolderLoss::Stalled)
                }
            },
        };
        let stopped = |lease| {
            if let Some(inner) = inner.upgrade() {
                inner.update_generation(|g| g.lease = lease);
            }
        };
        let Some((old, reason)) = end.lost(key, &config.events, stopped) else {
            return;
        };
        match life.after_loss(&inner, &gen, &old, reason).await {
            Some((next, at)) => (gen, sent) = (next, at),
            None => return,
        }
    }
}

/// The member's watchdog ([`MemberConfig::progress_timeout`]): returns once the work
/// has made no progress for `timeout` by the member's clock, after marking the
/// generation's standing lost ([`LostCause::Stalled`]: its cancellation fires, its
/// checks answer `Lost`). Never while the member is leaving; never once it is gone.
async fn stalled(inner: &Weak<Inner>, timeout: Duration, footing: &Footing) {
    loop {
        let idle = match inner.upgrade() {
            Some(i) if i.leaving.load(Ordering::SeqCst) => Duration::ZERO,
            Some(i) => i.idle(),
            None => return std::future::pending().await,
        };
        if idle >= timeout {
            // A generation already lost by the clock (its session's deadline or its
            // own passed, say while the whole process was frozen) did not stall: its
            // loss reports itself through the heartbeat or the ride.
            if footing.check().is_err() {
                return std::future::pending().await;
            }
            footing.lose(LostCause::Stalled);
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
    inner: &Weak<Inner>,
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
