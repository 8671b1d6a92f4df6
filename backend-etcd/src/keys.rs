//! The key layout of one namespace, and the small text encodings of the values.
//!
//! Everything lives under `liveness/<ns>/` (the namespace is `[a-z0-9_-]+`, and the
//! trailing `/` keeps `ns` from prefixing `ns_2`). Numbers in keys are zero-padded
//! to 20 digits so that range reads come back in numeric order.
//!
//! | key | value | notes |
//! | --- | --- | --- |
//! | `lease/<space>/<name>` | [`Record`] | the lease record, NOT bound to an etcd lease |
//! | `sm/<session token>/<batch>/<space>/<name>` | empty | the members riding a session, by the session's token and their join's batch (16 hex digits: the session's join count as the join read it, divided by [`INDEX_BATCH`]); a riding member's record names the session and the batch; it has no lease-bound key and no etcd lease |
//! | `ss/<session token>/j` | empty | the session's join counter: every join puts it, so its etcd version is the number of joins |
//! | `ss/<session token>/d` | a batch number | the member sweep's cursor once the session is dead: every batch below it is empty; deleted with `ss/<session token>/j` when the session token's sweep ends |
//! | `w/l/<space>/<name>` | empty | bound to the etcd lease; its create revision is the token |
//! | `w/sync` | empty | written by `expired` to know when the watch has caught up, only when the watch stream sends no progress notification |
//! | `dead/<token>` | `space/name` | the dead set |
//! | `item/ctr` | last item id | the item id counter |
//! | `item/r/<id>` | [`Meta`] with state | attempts, max attempts, state |
//! | `item/b/<id>` | payload bytes | immutable until the item completes |
//! | `item/e/<id>` | UTF-8 text | the error text of the item's latest failure that gave one (`ItemStore::finish_with_error`): put by the transaction that hands the item back, deleted with the item; absent when no failure gave a text |
//! | `item/p/<id>` | [`Meta`] | pending index of the default queue (the layout from before queues) |
//! | `item/pq/<queue>/<id>` | [`Meta`] | pending index of another queue: the name ends with `/`, which no queue name holds, so no queue's range holds another's |
//! | `item/o/<token>/<id>` | [`Meta`] with state and request id | owned-by-token index; the id of the claim that assigned it |
//! | `item/k/<key>` | item id | enqueue idempotency keys: bound to an etcd lease the keys written by one handle in one bucket of time share (`key_leases.rs`), whose ttl outlasts the key retention (`key_retention_s`); etcd deletes the key when it expires. Keys written before retention was counted carry no lease and are kept for good |
//! | `item/h/<token>` | request id | the token's claim high-water mark: the greatest claim id admitted under it; deleted when the token's sweep ends |
//! | `item/d/<id>` | [`Meta`] | dead-letter index |
//! | `item/q/<due>/<group>` | empty | a timer: bound to the etcd lease that counts down the wait of the held-back items of its group; etcd deletes it when that lease expires. `due` (ms since the Unix epoch by the enqueuing handle's store time, [`Keys::timer`]) only orders timers, and `group` is the first item id of the call that held them back |
//! | `item/q/<due>/<group>/<id>` | [`Meta`] | a held-back item: pending, due once its group's timer is gone; a claim then moves it to its queue's pending index |
//! | `death/ctr` | last death seq | bumped (compared) by every transaction that records a death |
//! | `death/s/<seq>` | a death record (`deaths.rs`) | the newest `death_retention` are kept |
//! | `death/t/<token>` | its record's seq | until the token's sweep ends |
//! | `death/w/<token>` | `requeued dead_lettered` | the sweep's running tally (etcd sweeps in batches) |
//!
//! A record present with its `w/l/` key gone means "expired, not yet reaped": etcd
//! deleted the lease-bound key when it expired the lease, and the record stays until
//! a reap, a release or an acquire declares its token dead. A riding member's record
//! ([`Record::session`]) is live while its session's lease-bound key exists with the
//! session's token as its create revision: only the session's own key is bound to an
//! etcd lease, so one revoke (or expiry) deletes one key, never the members'.
//!
//! Every [`Meta`] value (the record and each index entry) ends with ` @<queue>` when
//! the item is in a queue other than the default: a value without it, as every value
//! written before queues existed, is the default queue's.
//!
//! A session's member index is cut into batches so that the sweep of a dead session's
//! members reads one small range per step: etcd 3.4 serves a range read with a limit by
//! walking every key of the range first, so one range over all of a session's
//! members would cost O(members left) per batch swept.

use liveness_core::{
    FencingToken, HolderId, ItemState, Key, Namespace, QueueName, RequestId, Space, Ttl,
};

/// A request id written as [`RequestId::to_hex`] (a claim high-water mark).
pub(crate) fn parse_request_id(raw: &[u8]) -> Option<RequestId> {
    let s = std::str::from_utf8(raw).ok()?;
    if s.len() != 32 {
        return None;
    }
    u128::from_str_radix(s, 16).ok().map(RequestId)
}

/// Joins per batch of a session's member index: a join that read the session's join
/// count `n` files its index entry under batch `n / INDEX_BATCH`, and bumps the count
/// without comparing it (joins into one session do not conflict with each other).
/// Joins that read the same count land in one batch, so a batch holds at most this
/// many entries plus the joins into that session that were in flight at once; a
/// batch may also be empty (its counts read by nobody, or its members gone).
pub(crate) const INDEX_BATCH: u64 = 32;

/// The keys of one namespace.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    root: String,
}

impl Keys {
    pub(crate) fn new(ns: &Namespace) -> Keys {
        Keys {
            root: format!("liveness/{ns}/"),
        }
    }

    pub(crate) fn record(&self, key: &Key) -> String {
        format!("{}{key}", self.records())
    }

    pub(crate) fn records(&self) -> String {
        format!("{}lease/", self.root)
    }

    pub(crate) fn live(&self, key: &Key) -> String {
        format!("{}{key}", self.lives())
    }

    pub(crate) fn lives(&self) -> String {
        format!("{}l/", self.watched())
    }

    pub(crate) fn lives_in(&self, space: &Space) -> String {
        format!("{}{space}/", self.lives())
    }

    /// The prefix the expiry watch covers: lease-bound keys and the sync key.
    pub(crate) fn watched(&self) -> String {
        format!("{}w/", self.root)
    }

    pub(crate) fn sync(&self) -> String {
        format!("{}sync", self.watched())
    }

    pub(crate) fn dead(&self, token: FencingToken) -> String {
        format!("{}{:020}", self.deads(), token.0)
    }

    pub(crate) fn deads(&self) -> String {
        format!("{}dead/", self.root)
    }

    pub(crate) fn counter(&self) -> String {
        format!("{}item/ctr", self.root)
    }

    pub(crate) fn meta(&self, id: u64) -> String {
        format!("{}{id:020}", self.metas())
    }

    pub(crate) fn body(&self, id: u64) -> String {
        format!("{}item/b/{id:020}", self.root)
    }

    /// The error text of item `id`'s latest failure that gave one.
    pub(crate) fn error(&self, id: u64) -> String {
        format!("{}{id:020}", self.errors())
    }

    /// The error texts of every item (`item/e/`).
    pub(crate) fn errors(&self) -> String {
        format!("{}item/e/", self.root)
    }

    /// The pending entry of item `id` in `queue`.
    pub(crate) fn pending(&self, queue: QueueName, id: u64) -> String {
        format!("{}{id:020}", self.pendings(queue))
    }

    /// The pending index of `queue`: `item/p/` for the default queue (the layout
    /// from before queues), `item/pq/<queue>/` for another.
    pub(crate) fn pendings(&self, queue: QueueName) -> String {
        match queue.is_default() {
            true => format!("{}item/p/", self.root),
            false => format!("{}{queue}/", self.named_pendings()),
        }
    }

    /// Every queue's pending index, the default's (`item/p/`) and the others'
    /// (`item/pq/`): the prefix `item/p`, which no other item key starts with.
    pub(crate) fn pending_indexes(&self) -> String {
        format!("{}item/p", self.root)
    }

    /// The pending indexes of every queue but the default (`item/pq/`).
    pub(crate) fn named_pendings(&self) -> String {
        format!("{}item/pq/", self.root)
    }

    /// The queue whose pending index holds `raw`, a key under
    /// [`Keys::named_pendings`].
    pub(crate) fn parse_named_pending(&self, raw: &[u8]) -> Option<QueueName> {
        let s = std::str::from_utf8(raw).ok()?;
        let (queue, _) = s.strip_prefix(&self.named_pendings())?.split_once('/')?;
        QueueName::new(queue).ok()
    }

    pub(crate) fn owned(&self, token: FencingToken, id: u64) -> String {
        format!("{}{id:020}", self.owned_by(token))
    }

    /// The enqueue idempotency key `key` (32 hex digits): the id it answered.
    pub(crate) fn enqueue_key(&self, key: &str) -> String {
        format!("{}item/k/{key}", self.root)
    }

    /// The claim high-water mark of `token`: the greatest claim request id (32 hex
    /// digits) admitted under it.
    pub(crate) fn claim_mark(&self, token: FencingToken) -> String {
        format!("{}item/h/{:020}", self.root, token.0)
    }

    pub(crate) fn owned_by(&self, token: FencingToken) -> String {
        format!("{}{:020}/", self.owneds(), token.0)
    }

    pub(crate) fn owneds(&self) -> String {
        format!("{}item/o/", self.root)
    }

    pub(crate) fn dead_letter(&self, id: u64) -> String {
        format!("{}{id:020}", self.dead_letters())
    }

    pub(crate) fn dead_letters(&self) -> String {
        format!("{}item/d/", self.root)
    }

    /// The death seq counter.
    pub(crate) fn death_ctr(&self) -> String {
        format!("{}death/ctr", self.root)
    }

    /// The death record with `seq`.
    pub(crate) fn death(&self, seq: u64) -> String {
        format!("{}death/s/{seq:020}", self.root)
    }

    /// The seq of dead `token`'s record, until its sweep ends.
    pub(crate) fn death_of(&self, token: FencingToken) -> String {
        format!("{}death/t/{:020}", self.root, token.0)
    }

    /// The running tally of dead `token`'s sweep.
    pub(crate) fn death_tally(&self, token: FencingToken) -> String {
        format!("{}death/w/{:020}", self.root, token.0)
    }

    /// The entry of `key` in batch `batch` of the member index of the session with
    /// `token`.
    pub(crate) fn session_member(&self, token: FencingToken, batch: u64, key: &Key) -> String {
        format!("{}{key}", self.session_batch(token, batch))
    }

    /// Batch `batch` of the member index of the session with `token`; as a range
    /// end, the first key past batch `batch - 1`.
    pub(crate) fn session_batch(&self, token: FencingToken, batch: u64) -> String {
        format!("{}{batch:016x}/", self.session_members(token))
    }

    /// The member index of the session with `token`: the keys of its riding members.
    fn session_members(&self, token: FencingToken) -> String {
        format!("{}sm/{:020}/", self.root, token.0)
    }

    /// The batch and member key of an entry of the member index of the session
    /// with `token`.
    pub(crate) fn parse_session_member(
        &self,
        token: FencingToken,
        raw: &[u8],
    ) -> Option<(u64, Key)> {
        let s = std::str::from_utf8(raw).ok()?;
        let rest = s.strip_prefix(&self.session_members(token))?;
        let (batch, key) = rest.split_at_checked(16)?;
        let batch = u64::from_str_radix(batch, 16).ok()?;
        Some((batch, Key::parse(key.strip_prefix('/')?).ok()?))
    }

    /// The state keys of the session with `token`: its join counter and its
    /// member-sweep cursor (one range read, one range delete).
    pub(crate) fn session_state(&self, token: FencingToken) -> String {
        format!("{}ss/{:020}/", self.root, token.0)
    }

    /// The join counter of the session with `token`: its etcd version counts the
    /// joins.
    pub(crate) fn session_joins(&self, token: FencingToken) -> String {
        format!("{}j", self.session_state(token))
    }

    /// The member-sweep cursor of the dead session with `token`: the first batch of its
    /// member index that may hold an entry.
    pub(crate) fn session_cursor(&self, token: FencingToken) -> String {
        format!("{}d", self.session_state(token))
    }

    /// The held-back items and their timers (`item/q/`), earliest estimated due time
    /// first: a group's timer sorts right before the group's items.
    pub(crate) fn helds(&self) -> String {
        format!("{}item/q/", self.root)
    }

    /// The timer of the group of held-back items whose first id is `group`, estimated
    /// due at `due` (ms since the Unix epoch by the enqueuing handle's store time: an
    /// estimate that only orders the timers, never decides whether an item is due).
    pub(crate) fn timer(&self, due: u64, group: u64) -> String {
        format!("{}{due:020}/{group:020}", self.helds())
    }

    /// Held-back item `id` of the group with the timer [`Keys::timer`]`(due, group)`.
    pub(crate) fn held(&self, due: u64, group: u64, id: u64) -> String {
        format!("{}/{id:020}", self.timer(due, group))
    }

    /// What a key under [`Keys::helds`] is: a timer or a held-back item.
    pub(crate) fn parse_held(&self, raw: &[u8]) -> Option<Held> {
        let s = std::str::from_utf8(raw).ok()?;
        let mut parts = s.strip_prefix(&self.helds())?.split('/');
        let mut number = || -> Option<u64> {
            let part = parts.next()?;
            (part.len() == 20).then(|| part.parse().ok()).flatten()
        };
        let (due, group) = (number()?, number()?);
        let held = match number() {
            None => Held::Timer { due, group },
            Some(id) => Held::Item { due, group, id },
        };
        parts.next().is_none().then_some(held)
    }

    /// The item meta records, every state (`item/r/`).
    pub(crate) fn metas(&self) -> String {
        format!("{}item/r/", self.root)
    }

    /// The prefix of the lease records of `space`.
    pub(crate) fn records_in(&self, space: &Space) -> String {
        format!("{}{space}/", self.records())
    }

    /// The lease key named by a record or lease-bound key under `prefix`.
    pub(crate) fn parse_key(&self, prefix: &str, raw: &[u8]) -> Option<Key> {
        let s = std::str::from_utf8(raw).ok()?;
        Key::parse(s.strip_prefix(prefix)?).ok()
    }

    /// The trailing 20-digit number of an index key.
    pub(crate) fn trailing_id(raw: &[u8]) -> Option<u64> {
        let s = std::str::from_utf8(raw).ok()?;
        s.rsplit('/').next()?.parse().ok()
    }
}

/// A key under [`Keys::helds`], parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// The timer of a group of held-back items ([`Keys::timer`]).
    Timer { due: u64, group: u64 },
    /// A held-back item ([`Keys::held`]).
    Item { due: u64, group: u64, id: u64 },
}

impl Held {
    /// The timer this key is or belongs to: `(due, group)`.
    pub(crate) fn timer(self) -> (u64, u64) {
        match self {
            Held::Timer { due, group } | Held::Item { due, group, .. } => (due, group),
        }
    }
}

/// The value of a lease record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The token, when written explicitly; `None` means "the record's own mod
    /// revision", which is the token when the record was written by the acquiring
    /// transaction (the same transaction created the lease-bound key).
    pub(crate) token: Option<u64>,
    pub(crate) ttl: Ttl,
    /// The etcd lease the lease-bound key is bound to (0 for a riding member).
    pub(crate) lease_id: i64,
    pub(crate) holder: HolderId,
    /// For a member riding a session (`LeaseStore::join_session_many`): the session's
    /// key and token. Such a record has no lease-bound key and no etcd lease of its
    /// own.
    pub(crate) session: Option<(Key, FencingToken)>,
    /// For a riding member: the batch of the session's member index its entry is
    /// filed under ([`Keys::session_member`]); 0 otherwise.
    pub(crate) batch: u64,
}

impl Record {
    /// `token\nttl\nlease id\nholder`, or for a riding member `s<session
    /// token>/<batch>\nttl\nsession key\nholder` (its token is the record's mod
    /// revision).
    pub(crate) fn encode(&self) -> String {
        match &self.session {
            Some((key, token)) => format!(
                "s{}/{}\n{}\n{key}\n{}",
                token.0,
                self.batch,
                self.ttl.as_millis(),
                self.holder
            ),
            None => format!(
                "{}\n{}\n{}\n{}",
                self.token.unwrap_or(0),
                self.ttl.as_millis(),
                self.lease_id,
                self.holder
            ),
        }
    }

    pub(crate) fn decode(raw: &[u8]) -> Option<Record> {
        let s = std::str::from_utf8(raw).ok()?;
        let mut parts = s.splitn(4, '\n');
        let first = parts.next()?;
        let ttl = Ttl::from_millis(parts.next()?.parse().ok()?).ok()?;
        if let Some(rides) = first.strip_prefix('s') {
            let (session_token, batch) = rides.split_once('/')?;
            let session_token = FencingToken(session_token.parse().ok()?);
            let session = Key::parse(parts.next()?).ok()?;
            let holder = HolderId::new(parts.next()?).ok()?;
            return Some(Record {
                token: None,
                ttl,
                lease_id: 0,
                holder,
                session: Some((session, session_token)),
                batch: batch.parse().ok()?,
            });
        }
        let token: u64 = first.parse().ok()?;
        let lease_id = parts.next()?.parse().ok()?;
        let holder = HolderId::new(parts.next()?).ok()?;
        Some(Record {
            token: (token != 0).then_some(token),
            ttl,
            lease_id,
            holder,
            session: None,
            batch: 0,
        })
    }

    /// True when the raw record is a riding member's (no lease-bound key of its own).
    pub(crate) fn rides_raw(raw: &[u8]) -> bool {
        raw.first() == Some(&b's')
    }
}

/// An item's attempt counts and queue and, in its `item/r/` record, its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) attempts: u32,
    pub(crate) max_attempts: u32,
    /// Written as a last field, ` @<queue>`, unless it is the default queue (a value
    /// without it, as every value written before queues existed, is the default's).
    pub(crate) queue: QueueName,
}

/// What starts the queue field of a [`Meta`] value (no other field starts with it).
const QUEUE_MARK: char = '@';

impl Meta {
    pub(crate) fn encode(self) -> String {
        self.with_queue(format!("{} {}", self.attempts, self.max_attempts))
    }

    pub(crate) fn encode_with(self, state: ItemState) -> String {
        self.with_queue(self.fields_with(state))
    }

    /// The fields before the queue's of [`Meta::encode_with`].
    fn fields_with(self, state: ItemState) -> String {
        let s = match state {
            ItemState::Pending => "p".to_owned(),
            ItemState::DeadLettered => "d".to_owned(),
            ItemState::Owned(t) => format!("o{}", t.0),
        };
        format!("{} {} {s}", self.attempts, self.max_attempts)
    }

    /// `fields`, then the queue's field unless the queue is the default.
    fn with_queue(self, fields: String) -> String {
        match self.queue.is_default() {
            true => fields,
            false => format!("{fields} {QUEUE_MARK}{}", self.queue),
        }
    }

    /// The owned index value: the meta, the owner, and the request id of the claim
    /// that assigned the item (a fourth field, which [`Meta::decode_with`] skips).
    pub(crate) fn encode_claimed(self, token: FencingToken, request: &str) -> String {
        self.with_queue(format!(
            "{} {request}",
            self.fields_with(ItemState::Owned(token))
        ))
    }

    /// The request id in an owned index value written by [`Meta::encode_claimed`].
    pub(crate) fn request_of(raw: &[u8]) -> Option<&str> {
        std::str::from_utf8(raw)
            .ok()?
            .split(' ')
            .filter(|f| !f.starts_with(QUEUE_MARK))
            .nth(3)
    }

    pub(crate) fn decode(raw: &[u8]) -> Option<Meta> {
        Self::decode_with(raw).map(|(m, _)| m)
    }

    /// The meta and, when the value has one, the state; `None` when the value is not
    /// one this build writes (a queue name no queue can have among them).
    pub(crate) fn decode_with(raw: &[u8]) -> Option<(Meta, Option<ItemState>)> {
        let s = std::str::from_utf8(raw).ok()?;
        let named = s
            .rsplit_once(' ')
            .and_then(|(rest, last)| Some((rest, last.strip_prefix(QUEUE_MARK)?)));
        let (s, queue) = match named {
            Some((rest, name)) => (rest, QueueName::new(name).ok()?),
            None => (s, QueueName::DEFAULT),
        };
        let mut parts = s.split(' ');
        let attempts = parts.next()?.parse().ok()?;
        let max_attempts = parts.next()?.parse().ok()?;
        let state = match parts.next() {
            None => None,
            Some("p") => Some(ItemState::Pending),
            Some("d") => Some(ItemState::DeadLettered),
            Some(o) => Some(ItemState::Owned(FencingToken(
                o.strip_prefix('o')?.parse().ok()?,
            ))),
        };
        Some((
            Meta {
                attempts,
                max_attempts,
                queue,
            },
            state,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = Record {
            token: None,
            ttl: Ttl::from_millis(2500).unwrap(),
            lease_id: 77,
            holder: HolderId::new("host 1: pid\u{e9}").unwrap(),
            session: None,
            batch: 0,
        };
        assert_eq!(Record::decode(r.encode().as_bytes()), Some(r.clone()));
        assert!(!Record::rides_raw(r.encode().as_bytes()));
        let r = Record {
            token: Some(9),
            ..r
        };
        assert_eq!(Record::decode(r.encode().as_bytes()), Some(r.clone()));
        let rider = Record {
            token: None,
            lease_id: 0,
            session: Some((Key::parse("sessions/p-1").unwrap(), FencingToken(41))),
            batch: 3,
            ..r
        };
        assert_eq!(
            Record::decode(rider.encode().as_bytes()),
            Some(rider.clone())
        );
        assert!(Record::rides_raw(rider.encode().as_bytes()));
        assert_eq!(Record::decode(b"garbage"), None);
        // A rider's record without its index batch is not read as one.
        assert_eq!(Record::decode(b"s41\n2500\nsessions/p-1\nh"), None);
    }

    #[test]
    fn claim_marks_parse_back() {
        let id = RequestId::next();
        assert_eq!(parse_request_id(id.to_hex().as_bytes()), Some(id));
        assert_eq!(parse_request_id(b"00ff"), None);
        assert_eq!(parse_request_id(&[b'g'; 32]), None);
    }

    #[test]
    fn owned_values_carry_the_claim_request() {
        for queue in [QueueName::DEFAULT, QueueName::new("mail").unwrap()] {
            let m = Meta {
                attempts: 1,
                max_attempts: 3,
                queue,
            };
            let raw = m.encode_claimed(FencingToken(7), "00ff");
            assert_eq!(
                Meta::decode_with(raw.as_bytes()),
                Some((m, Some(ItemState::Owned(FencingToken(7)))))
            );
            assert_eq!(Meta::request_of(raw.as_bytes()), Some("00ff"));
            // Values written before request ids existed carry none.
            assert_eq!(Meta::request_of(m.encode().as_bytes()), None);
            let unclaimed = m.encode_with(ItemState::Owned(FencingToken(7)));
            assert_eq!(Meta::request_of(unclaimed.as_bytes()), None);
        }
    }

    #[test]
    fn metas_round_trip() {
        for queue in [QueueName::DEFAULT, QueueName::new("a.b-c_9").unwrap()] {
            let m = Meta {
                attempts: 2,
                max_attempts: 5,
                queue,
            };
            assert_eq!(Meta::decode(m.encode().as_bytes()), Some(m));
            for s in [
                ItemState::Pending,
                ItemState::DeadLettered,
                ItemState::Owned(FencingToken(42)),
            ] {
                assert_eq!(
                    Meta::decode_with(m.encode_with(s).as_bytes()),
                    Some((m, Some(s)))
                );
            }
        }
    }

    #[test]
    fn the_default_queue_s_values_are_those_from_before_queues() {
        let m = Meta {
            attempts: 2,
            max_attempts: 5,
            queue: QueueName::DEFAULT,
        };
        assert_eq!(m.encode(), "2 5");
        assert_eq!(m.encode_with(ItemState::Pending), "2 5 p");
        assert_eq!(m.encode_claimed(FencingToken(7), "00ff"), "2 5 o7 00ff");
        let mail = Meta {
            queue: QueueName::new("mail").unwrap(),
            ..m
        };
        assert_eq!(mail.encode_with(ItemState::DeadLettered), "2 5 d @mail");
        // A queue name no queue can have is no value this build writes.
        for bad in ["2 5 p @", "2 5 p @a/b", "2 5 @a:b", "2 5 o7 00ff @é"] {
            assert_eq!(Meta::decode_with(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn each_queue_s_pending_index_holds_its_own_entries_only() {
        let k = Keys::new(&Namespace::new("ns").unwrap());
        let q = |name: &str| QueueName::new(name).unwrap();
        let queues = [
            QueueName::DEFAULT,
            q("mail"),
            q("mail2"),
            q("m"),
            q("0"),
            q("p"),
        ];
        for a in queues {
            let prefix = k.pendings(a);
            for other in queues {
                for id in [0, 7, u64::MAX] {
                    let key = k.pending(other, id);
                    assert_eq!(key.starts_with(&prefix), a == other, "{a:?} {other:?}");
                    assert_eq!(Keys::trailing_id(key.as_bytes()), Some(id));
                    let named = k.parse_named_pending(key.as_bytes());
                    assert_eq!(named, (!other.is_default()).then_some(other));
                }
            }
        }
        // The default queue's entries are where they were before queues.
        assert_eq!(
            k.pending(QueueName::DEFAULT, 5),
            "liveness/ns/item/p/00000000000000000005"
        );
        assert!(!k
            .pending(QueueName::DEFAULT, 5)
            .starts_with(&k.named_pendings()));
    }

    #[test]
    fn a_timer_sorts_right_before_its_items() {
        let k = Keys::new(&Namespace::new("ns").unwrap());
        let mut keys = vec![
            k.held(5, 9, 12),
            k.timer(5, 10),
            k.held(5, 9, 9),
            k.held(4, 30, 30),
            k.timer(5, 9),
            k.held(5, 10, 10),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                k.held(4, 30, 30),
                k.timer(5, 9),
                k.held(5, 9, 9),
                k.held(5, 9, 12),
                k.timer(5, 10),
                k.held(5, 10, 10),
            ]
        );
        assert_eq!(
            k.parse_held(k.timer(5, 9).as_bytes()),
            Some(Held::Timer { due: 5, group: 9 })
        );
        assert_eq!(
            k.parse_held(k.held(5, 9, 12).as_bytes()),
            Some(Held::Item {
                due: 5,
                group: 9,
                id: 12
            })
        );
        assert_eq!(
            k.parse_held(k.pending(QueueName::DEFAULT, 5).as_bytes()),
            None
        );
        assert_eq!(
            k.parse_held(format!("{}/x", k.held(5, 9, 12)).as_bytes()),
            None
        );
        assert_eq!(k.parse_held(format!("{}7", k.helds()).as_bytes()), None);
    }

    #[test]
    fn keys_sort_numerically_and_parse_back() {
        let k = Keys::new(&Namespace::new("ns").unwrap());
        let q = QueueName::new("mail").unwrap();
        assert!(k.pending(q, 9) < k.pending(q, 10));
        assert_eq!(
            Keys::trailing_id(k.owned(FencingToken(3), 12).as_bytes()),
            Some(12)
        );
        let key = Key::member("a/b").unwrap();
        assert_eq!(
            k.parse_key(&k.lives(), k.live(&key).as_bytes()),
            Some(key.clone())
        );
        assert_eq!(
            k.parse_key(&k.records(), k.record(&key).as_bytes()),
            Some(key)
        );
        assert_eq!(k.parse_key(&k.lives(), k.sync().as_bytes()), None);
    }

    #[test]
    fn a_session_index_sorts_by_batch_and_each_batch_is_its_own_range() {
        let k = Keys::new(&Namespace::new("ns").unwrap());
        let t = FencingToken(7);
        let key = Key::member("zz").unwrap();
        let entry = |batch| k.session_member(t, batch, &key);
        // Batch 9 sorts before batch 10 and 0xa before 0x10: numeric order.
        assert!(entry(9) < entry(10) && entry(10) < entry(16) && entry(255) < entry(256));
        // An entry of batch b lies in [batch(b), batch(b + 1)), and in no other batch.
        for b in [0, 1, 15, 16, 4095] {
            assert!(k.session_batch(t, b) <= entry(b) && entry(b) < k.session_batch(t, b + 1));
            assert!(entry(b + 1) >= k.session_batch(t, b + 1));
        }
        assert_eq!(
            k.parse_session_member(t, entry(4095).as_bytes()),
            Some((4095, key.clone()))
        );
        assert_eq!(
            k.parse_session_member(FencingToken(8), entry(1).as_bytes()),
            None
        );
        // The session's state keys lie outside its member index, under one prefix.
        for state in [k.session_joins(t), k.session_cursor(t)] {
            assert!(state.starts_with(&k.session_state(t)));
            assert!(!state.starts_with(&k.session_members(t)));
        }
        assert!(!k
            .session_state(t)
            .starts_with(&k.session_state(FencingToken(70))));
    }
}
