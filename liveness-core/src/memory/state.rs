//! The state of one namespace of the in-memory store, behind its lock, and the
//! steps every operation shares: retiring a lease into the dead set with its death
//! record, judging a riding member through its session, sweeping a dead session's
//! riders, and sweeping a dead token's items.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, InputProblem, LostCause, Result};
use crate::item::{ItemId, ItemRecord, ItemState, RequestId, Sweep, DEAD_LETTER_TRIM};
use crate::lease::{DeathCause, DeathRecord, ExpiredLease, Lease, LeaseInfo, LeaseStatus, Swept};
use crate::queue_name::QueueName;
use crate::types::{FencingToken, HolderId, Key, Name, Space, StoreTime, Ttl};
use crate::wake::tick;

#[derive(Debug)]
pub(super) struct LeaseRec {
    pub(super) holder: HolderId,
    pub(super) token: FencingToken,
    pub(super) ttl: Ttl,
    pub(super) expires_at: Duration,
    /// The greatest claim request id admitted under this token (the claim high-water
    /// mark); forgotten with the record when the token ends.
    pub(super) last_claim: Option<RequestId>,
    /// The session this member rides ([`LeaseStore::join_session_many`]): its key and
    /// token. A riding record has no expiry of its own (`expires_at` unused, not in
    /// the expiry index): it lives while that session lease does.
    pub(super) session: Option<(Key, FencingToken)>,
}

impl LeaseRec {
    /// The record of a lease just taken: `session` when it rides one.
    pub(super) fn new(
        holder: &HolderId,
        token: FencingToken,
        ttl: Ttl,
        expires_at: Duration,
        session: Option<(Key, FencingToken)>,
    ) -> Self {
        LeaseRec {
            holder: holder.clone(),
            token,
            ttl,
            expires_at,
            last_claim: None,
            session,
        }
    }
}

#[derive(Debug)]
pub(super) struct ItemRec {
    /// The item and its state, moved only by `ItemRecord`'s own steps.
    pub(super) record: ItemRecord,
    /// The request of the claim that assigned it to its current owner.
    pub(super) claimed_by: Option<RequestId>,
    /// When, by the model's clock, it last became claimable (made pending, or due):
    /// what a claim's `waited` counts from.
    pub(super) ready_at: Duration,
}

#[derive(Debug)]
pub(super) struct NsState {
    pub(super) next_token: u64,
    pub(super) next_item: u64,
    pub(super) leases: HashMap<Key, LeaseRec>,
    /// The expiry index: per space, (expires_at, name).
    pub(super) expiry: BTreeMap<Space, BTreeSet<(Duration, Name)>>,
    /// The key index: per space, the names with a lease record, in key order.
    pub(super) names: BTreeMap<Space, BTreeSet<Name>>,
    pub(super) dead: BTreeMap<FencingToken, Key>,
    /// The death history, by seq; the newest `death_retention` kept.
    pub(super) deaths: BTreeMap<u64, DeathRecord>,
    pub(super) last_death: u64,
    /// The seq of each dead token's record whose `swept` is still to be filled.
    pub(super) death_of: HashMap<FencingToken, u64>,
    pub(super) items: BTreeMap<ItemId, ItemRec>,
    /// The due pending items, by (queue, id): a claim takes a queue's lowest ids.
    pub(super) pending: BTreeSet<(QueueName, ItemId)>,
    /// Pending items not yet due, by (due time by the model's clock, id).
    pub(super) scheduled: BTreeSet<(Duration, ItemId)>,
    pub(super) owned: HashMap<FencingToken, BTreeSet<ItemId>>,
    /// The dead letters, each with the model's time when it was dead-lettered.
    pub(super) dead_letters: BTreeMap<ItemId, Duration>,
    /// The dead letters by (time dead-lettered, id): what
    /// [`NsState::forget_dead_letters`] removes from the front.
    pub(super) dead_times: BTreeSet<(Duration, ItemId)>,
    /// Enqueue idempotency keys and the ids they answered, kept for the store's
    /// [`key_retention`](crate::Capabilities::key_retention).
    pub(super) keys: HashMap<RequestId, ItemId>,
    /// The keys in the order they were recorded, with the model's time then: what
    /// [`NsState::forget_keys`] drops from the front.
    pub(super) key_times: VecDeque<(Duration, RequestId)>,
    /// The members riding each session, by the session's token: what the sweep of a
    /// dead session's token declares dead, a batch at a time.
    pub(super) riders: HashMap<FencingToken, BTreeSet<Key>>,
    pub(super) wake: watch::Sender<u64>,
    /// Ticks when an item becomes pending ([`ItemStore::pending`](crate::ItemStore::pending)).
    pub(super) pending_wake: watch::Sender<u64>,
}

impl NsState {
    pub(super) fn new() -> Self {
        NsState {
            next_token: 0,
            next_item: 0,
            leases: HashMap::new(),
            expiry: BTreeMap::new(),
            names: BTreeMap::new(),
            dead: BTreeMap::new(),
            deaths: BTreeMap::new(),
            last_death: 0,
            death_of: HashMap::new(),
            items: BTreeMap::new(),
            pending: BTreeSet::new(),
            scheduled: BTreeSet::new(),
            owned: HashMap::new(),
            dead_letters: BTreeMap::new(),
            dead_times: BTreeSet::new(),
            keys: HashMap::new(),
            key_times: VecDeque::new(),
            riders: HashMap::new(),
            wake: watch::channel(0).0,
            pending_wake: watch::channel(0).0,
        }
    }

    /// Records the idempotency key `key` of item `id`, enqueued at `now`.
    pub(super) fn remember_key(&mut self, key: RequestId, id: ItemId, now: Duration) {
        self.keys.insert(key, id);
        self.key_times.push_back((now, key));
    }

    /// Forgets the keys recorded `retention` or longer before `now` (`None`: none).
    pub(super) fn forget_keys(&mut self, now: Duration, retention: Option<Duration>) {
        let Some(retention) = retention else { return };
        while let Some(&(at, key)) = self.key_times.front() {
            if at.saturating_add(retention) > now {
                break;
            }
            self.key_times.pop_front();
            self.keys.remove(&key);
        }
    }

    pub(super) fn unindex(&mut self, key: &Key, expires_at: Duration) {
        if let Some(set) = self.expiry.get_mut(key.space()) {
            set.remove(&(expires_at, key.name().clone()));
        }
    }

    pub(super) fn index(&mut self, key: &Key, expires_at: Duration) {
        self.expiry
            .entry(key.space().clone())
            .or_default()
            .insert((expires_at, key.name().clone()));
    }

    /// Removes the lease on `key`, puts its token in the dead set and records its
    /// death (keeping the newest `retention` records).
    pub(super) fn declare_dead(
        &mut self,
        key: &Key,
        cause: DeathCause,
        now: Duration,
        retention: usize,
    ) {
        if let Some(rec) = self.leases.remove(key) {
            self.unindex(key, rec.expires_at);
            self.unride(key, &rec);
            if let Some(set) = self.names.get_mut(key.space()) {
                set.remove(key.name());
                if set.is_empty() {
                    self.names.remove(key.space());
                }
            }
            self.dead.insert(rec.token, key.clone());
            self.last_death += 1;
            let seq = self.last_death;
            self.deaths.insert(
                seq,
                DeathRecord {
                    seq,
                    key: key.clone(),
                    holder: rec.holder,
                    token: rec.token,
                    at: StoreTime::from_epoch(now),
                    cause,
                    swept: None,
                },
            );
            self.death_of.insert(rec.token, seq);
            // Each record is dropped once: O(1) amortized per death.
            while self.deaths.len() > retention.max(1) {
                if let Some((_, old)) = self.deaths.pop_first() {
                    if self.death_of.get(&old.token) == Some(&old.seq) {
                        self.death_of.remove(&old.token);
                    }
                }
            }
            tick(&self.wake);
        }
    }

    /// Fills in what the sweep of `token` moved, in its death record (if kept).
    pub(super) fn record_sweep(&mut self, token: FencingToken, moved: &Sweep) {
        if let Some(seq) = self.death_of.remove(&token) {
            if let Some(rec) = self.deaths.get_mut(&seq) {
                // Cumulative: a session's record also counts what the sweeps of its
                // riding members moved.
                let before = rec.swept.unwrap_or_default();
                rec.swept = Some(Swept {
                    members: before.members,
                    requeued: before.requeued + moved.requeued.len() as u64,
                    dead_lettered: before.dead_lettered + moved.dead_lettered.len() as u64,
                });
            }
        }
    }

    pub(super) fn info(&self, key: &Key, rec: &LeaseRec, now: Duration) -> LeaseInfo {
        LeaseInfo {
            session: rec.session.as_ref().map(|(k, _)| k.clone()),
            key: key.clone(),
            holder: rec.holder.clone(),
            token: rec.token,
            ttl: rec.ttl,
            status: LeaseStatus::with_remaining(self.expiry_of(rec).saturating_sub(now)),
        }
    }

    pub(super) fn record(&self, id: ItemId) -> Option<ItemRecord> {
        self.items.get(&id).map(|rec| rec.record.clone())
    }

    /// Removes the dead letters dead-lettered `retention` or longer before `now`, the
    /// oldest first and at most [`DEAD_LETTER_TRIM`] (`None`: none), as `cancel` would.
    pub(super) fn forget_dead_letters(&mut self, now: Duration, retention: Option<Duration>) {
        let Some(retention) = retention else { return };
        for _ in 0..DEAD_LETTER_TRIM {
            match self.dead_times.first() {
                Some(&(at, id)) if at.saturating_add(retention) <= now => {
                    self.cancel(id);
                }
                _ => return,
            }
        }
    }

    /// Takes `id` out of the dead letters.
    fn undead(&mut self, id: ItemId) {
        if let Some(at) = self.dead_letters.remove(&id) {
            self.dead_times.remove(&(at, id));
        }
    }

    /// Moves a dead-lettered item back to pending with no attempts counted.
    pub(super) fn revive(&mut self, id: ItemId, now: Duration) -> Result<()> {
        let Some(rec) = self.items.get_mut(&id) else {
            return Err(Error::invalid("item", InputProblem::NoSuchItem));
        };
        rec.record.revive()?;
        rec.ready_at = now;
        let queue = rec.record.item.queue;
        self.undead(id);
        self.pending.insert((queue, id));
        tick(&self.pending_wake);
        Ok(())
    }

    /// Removes `id` unless it is owned; answers the state it had (`None`: no such
    /// item).
    pub(super) fn cancel(&mut self, id: ItemId) -> Option<ItemState> {
        let record = &self.items.get(&id)?.record;
        let (state, queue) = (record.state, record.item.queue);
        match state {
            ItemState::Owned(_) => return Some(state),
            ItemState::Pending => {
                self.pending.remove(&(queue, id));
                self.scheduled.retain(|(_, held)| *held != id);
            }
            ItemState::DeadLettered => self.undead(id),
        }
        self.items.remove(&id);
        Some(state)
    }

    pub(super) fn check_current(&self, lease: &Lease, now: Duration) -> Result<&LeaseRec> {
        match self.leases.get(&lease.key) {
            None => Err(lease.lost(LostCause::Released)),
            Some(rec) if rec.token != lease.token => Err(lease.lost(LostCause::Superseded)),
            Some(rec) if now >= self.expiry_of(rec) => Err(lease.lost(LostCause::Expired)),
            Some(rec) => Ok(rec),
        }
    }

    /// When `rec` expires by the store's clock: its own expiry, or for a member riding
    /// a session, the session's (zero once the session is gone or superseded).
    pub(super) fn expiry_of(&self, rec: &LeaseRec) -> Duration {
        match &rec.session {
            None => rec.expires_at,
            Some((key, token)) => match self.leases.get(key) {
                Some(session) if session.token == *token => session.expires_at,
                _ => Duration::ZERO,
            },
        }
    }

    /// Frees `key` for a new lease and draws its token: `Held` while a live lease
    /// (its own, or riding a live session) is on it; an expired one is declared dead first
    /// (cause superseded, keeping `retention` records).
    pub(super) fn take(
        &mut self,
        key: &Key,
        now: Duration,
        retention: usize,
    ) -> Result<FencingToken> {
        if let Some(rec) = self.leases.get(key) {
            if now < self.expiry_of(rec) {
                return Err(Error::Held {
                    key: key.clone(),
                    holder: rec.holder.clone(),
                    token: rec.token,
                });
            }
            self.declare_dead(key, DeathCause::Superseded, now, retention);
        }
        self.next_token += 1;
        Ok(FencingToken(self.next_token))
    }

    /// Puts `rec` on `key`: in the expiry index, or among its session's riders.
    pub(super) fn put(&mut self, key: &Key, rec: LeaseRec) {
        match &rec.session {
            None => self.index(key, rec.expires_at),
            Some((_, session)) => {
                self.riders.entry(*session).or_default().insert(key.clone());
            }
        }
        self.names
            .entry(key.space().clone())
            .or_default()
            .insert(key.name().clone());
        self.leases.insert(key.clone(), rec);
    }

    /// Forgets `key` among the riders of `rec`'s session, if it rides one.
    pub(super) fn unride(&mut self, key: &Key, rec: &LeaseRec) {
        if let Some((_, session)) = &rec.session {
            if let Some(set) = self.riders.get_mut(session) {
                set.remove(key);
                if set.is_empty() {
                    self.riders.remove(session);
                }
            }
        }
    }

    /// Retires up to `batch` of the members riding the dead session `token`: each
    /// record removed, its token into the dead set and linked to the session's death
    /// record (no record of its own: the session's one entry counts them). Returns
    /// them, and whether any remain.
    pub(super) fn sweep_members(
        &mut self,
        token: FencingToken,
        batch: usize,
    ) -> (Vec<ExpiredLease>, bool) {
        let Some(set) = self.riders.get_mut(&token) else {
            return (Vec::new(), false);
        };
        let keys: Vec<Key> = set.iter().take(batch.max(1)).cloned().collect();
        let mut dead = Vec::with_capacity(keys.len());
        let seq = self.death_of.get(&token).copied();
        for key in keys {
            let Some(rec) = self.leases.remove(&key) else {
                continue;
            };
            self.unride(&key, &rec);
            if let Some(set) = self.names.get_mut(key.space()) {
                set.remove(key.name());
                if set.is_empty() {
                    self.names.remove(key.space());
                }
            }
            self.dead.insert(rec.token, key.clone());
            if let Some(seq) = seq {
                self.death_of.insert(rec.token, seq);
            }
            dead.push(ExpiredLease {
                key,
                holder: rec.holder,
                token: rec.token,
            });
        }
        if !dead.is_empty() {
            if let Some(rec) = seq.and_then(|seq| self.deaths.get_mut(&seq)) {
                let before = rec.swept.unwrap_or_default();
                rec.swept = Some(Swept {
                    members: before.members + dead.len() as u64,
                    ..before
                });
            }
            tick(&self.wake);
        }
        (dead, self.riders.contains_key(&token))
    }

    pub(super) fn owned_by(&self, id: ItemId, token: FencingToken) -> Result<()> {
        match self.items.get(&id) {
            Some(rec) if rec.record.state == ItemState::Owned(token) => Ok(()),
            _ => Err(Error::Fenced { item: id, token }),
        }
    }

    /// Removes an item `token` owned (a completion).
    pub(super) fn complete(&mut self, id: ItemId, token: FencingToken) {
        self.items.remove(&id);
        if let Some(set) = self.owned.get_mut(&token) {
            set.remove(&id);
            if set.is_empty() {
                self.owned.remove(&token);
            }
        }
    }

    /// Makes `id` pending: claimable at once (`due` is `None`), or once the model's
    /// clock reaches `due`.
    /// Makes item `id` pending at `now`: claimable at once, or held back until `due`.
    pub(super) fn make_pending(&mut self, id: ItemId, due: Option<Duration>, now: Duration) {
        let Some(rec) = self.items.get_mut(&id) else {
            return;
        };
        rec.ready_at = due.unwrap_or(now);
        let queue = rec.record.item.queue;
        match due {
            Some(at) => {
                self.scheduled.insert((at, id));
            }
            None => {
                self.pending.insert((queue, id));
                tick(&self.pending_wake);
            }
        }
    }

    /// Moves every scheduled item due at `now` to the claimable ones.
    pub(super) fn promote_due(&mut self, now: Duration) {
        while let Some(&(at, id)) = self.scheduled.first() {
            if at > now {
                break;
            }
            self.scheduled.pop_first();
            if let Some(rec) = self.items.get(&id) {
                self.pending.insert((rec.record.item.queue, id));
            }
        }
    }

    /// Moves an owned item back to pending (due at `due`, see
    /// [`NsState::make_pending`]), or to the dead-letter set when it is out of
    /// attempts or `retry` is false.
    pub(super) fn hand_back(
        &mut self,
        id: ItemId,
        retry: bool,
        due: Option<Duration>,
        now: Duration,
    ) -> ItemState {
        let Some(rec) = self.items.get_mut(&id) else {
            return ItemState::DeadLettered;
        };
        if let ItemState::Owned(t) = rec.record.state {
            if let Some(set) = self.owned.get_mut(&t) {
                set.remove(&id);
                if set.is_empty() {
                    self.owned.remove(&t);
                }
            }
        }
        rec.claimed_by = None;
        rec.record.times.finished = Some(StoreTime::from_epoch(now));
        let state = rec.record.hand_back(retry);
        match state {
            ItemState::Pending => self.make_pending(id, due, now),
            _ => {
                self.dead_letters.insert(id, now);
                self.dead_times.insert((now, id));
            }
        };
        state
    }
}

pub(super) fn requeue_locked(
    st: &mut NsState,
    token: FencingToken,
    batch: usize,
    now: Duration,
) -> Sweep {
    let mut out = Sweep::default();
    if !st.dead.contains_key(&token) {
        return out;
    }
    // A dead session's riders go first, a batch at a time; the session's token stays
    // in the dead set until none is left.
    let (members, more) = st.sweep_members(token, batch);
    out.members = members;
    if more {
        return out;
    }
    st.dead.remove(&token);
    let ids = st.owned.remove(&token).unwrap_or_default();
    for id in ids {
        let state = st.hand_back(id, true, None, now);
        out.add(id, state);
    }
    st.record_sweep(token, &out);
    out
}
