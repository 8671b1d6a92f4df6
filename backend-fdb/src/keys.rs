//! The key layout: tuple-encoded keys in one subspace per namespace, and the byte
//! layout of the values.
//!
//! ```text
//! ("liveness", ns) +
//!   ("l", space, name)                  -> lease record: stamp(10) token(8) ttl_ms(8) nonce(8) holder,
//!                                          for a riding member then 0x00 session-token(8) "space/name"
//!   ("s", session token, space, name)   -> ""                     the members riding a session, by its
//!                                                                 token: what its sweep reads a batch of
//!   ("e", space, ttl_ms, stamp, name)   -> token(8) holder        expiry/observation index
//!   ("d", token)                        -> nonce(8) "space/name"  dead set
//!   ("n", "token") / ("n", "item")      -> u64 big-endian         counters
//!   ("i", id)                           -> attempts(4) max(4) state(1) token(8) [queue]  item meta;
//!                                          the queue's name follows unless it is the default
//!   ("b", id)                           -> payload                written once
//!   ("f", id)                           -> UTF-8 text             the error text of its latest failure
//!                                                                 that gave one: set by the transaction
//!                                                                 that hands it back, cleared with it
//!   ("p", id)                           -> ""                     pending in the default queue, by id
//!   ("pq", queue, id)                   -> ""                     pending in another queue, by id
//!   ("o", token, id)                    -> request(16)            owned, by token then id;
//!                                                                 the claim's request id
//!   ("k", key(16))                      -> u64 big-endian         enqueue keys, kept for good (no store clock)
//!   ("h", token)                        -> request(16)            the token's claim high-water
//!                                                                 mark; cleared with its dead entry
//!   ("x", id)                           -> ""                     dead letters, by id
//!   ("c", "pending"|"owned"|"dead")     -> i64 little-endian      atomic counts, every queue
//!   ("cq", queue, "pending"|…)          -> i64 little-endian      the same, of one queue other than
//!                                                                 the default (whose counts are the
//!                                                                 totals less the other queues')
//!   ("D", seq)                          -> death record (`deaths.rs`); the newest `death_retention`
//!   ("Dt", token)                       -> u64 big-endian         its record's seq, until swept
//!   ("Dw", token)                       -> requeued(8) dead(8)    the sweep's running tally
//!   ("n", "death")                      -> u64 big-endian         the death seq counter
//! ```
//!
//! The lease record and its index entry carry the stamp of the last acquire or renew
//! (written by `SetVersionstampedValue` / `SetVersionstampedKey` in that commit).
//!
//! Named queues: the default queue keeps the layout written before queues existed
//! (`("p", id)`, no queue in the item meta, only the total counters), so such data
//! reads as the default queue's. Another queue's pending entries are
//! `("pq", queue, id)`: the tuple encoding ends the name with a NUL byte, which no
//! queue name holds, so one queue's range never holds another's entries.

use foundationdb_tuple::{Subspace, TuplePack, Versionstamp};
use liveness_core::{Error, FencingToken, HolderId, ItemState, Key, Namespace, QueueName, Space};

use crate::error::corrupt;
use crate::kv::{Stamp, INCOMPLETE};

/// The keys of one namespace.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: Subspace,
}

/// The end of a tuple prefix range (every key that extends `prefix`).
fn strinc_range(prefix: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let mut end = prefix.clone();
    end.push(0xff);
    (prefix, end)
}

impl Layout {
    pub(crate) fn new(prefix: &str, ns: &Namespace) -> Self {
        Layout {
            root: Subspace::from_bytes(foundationdb_tuple::pack(&(prefix, ns.as_str()))),
        }
    }

    fn pack<T: TuplePack>(&self, t: &T) -> Vec<u8> {
        self.root.pack(t)
    }

    pub(crate) fn lease(&self, key: &Key) -> Vec<u8> {
        self.pack(&("l", key.space().as_str(), key.name().as_str()))
    }

    /// The index entry with a known stamp (to clear it).
    pub(crate) fn index(&self, key: &Key, ttl_ms: u64, stamp: &Stamp) -> Vec<u8> {
        let vs = Versionstamp::complete(*stamp, 0);
        self.pack(&("e", key.space().as_str(), ttl_ms, vs, key.name().as_str()))
    }

    /// The index entry of the committing transaction (offset suffix included).
    pub(crate) fn index_stamped(&self, key: &Key, ttl_ms: u64) -> Vec<u8> {
        let vs = Versionstamp::incomplete(0);
        self.root.pack_with_versionstamp(&(
            "e",
            key.space().as_str(),
            ttl_ms,
            vs,
            key.name().as_str(),
        ))
    }

    /// Every index entry of `space`.
    pub(crate) fn index_space(&self, space: &Space) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("e", space.as_str())))
    }

    /// The index entries of `space` with `ttl_ms`, stamps below `below_version`
    /// (commit versions strictly less than it).
    pub(crate) fn index_group(
        &self,
        space: &Space,
        ttl_ms: u64,
        below_version: u64,
    ) -> (Vec<u8>, Vec<u8>) {
        let begin = self.pack(&("e", space.as_str(), ttl_ms));
        let mut stamp = [0u8; 10];
        stamp[..8].copy_from_slice(&below_version.to_be_bytes());
        let end = self.pack(&(
            "e",
            space.as_str(),
            ttl_ms,
            Versionstamp::complete(stamp, 0),
        ));
        (begin, end)
    }

    /// The first key of the ttl group after `ttl_ms` in `space`.
    pub(crate) fn index_after_group(&self, space: &Space, ttl_ms: u64) -> Vec<u8> {
        strinc_range(self.pack(&("e", space.as_str(), ttl_ms))).1
    }

    /// Decodes an index key: (ttl_ms, stamp, name).
    pub(crate) fn parse_index(&self, key: &[u8]) -> Result<(u64, Stamp, String), Error> {
        let (_, _, ttl, vs, name): (String, String, u64, Versionstamp, String) = self
            .root
            .unpack(key)
            .map_err(|_| corrupt("an expiry index entry"))?;
        let mut stamp = [0u8; 10];
        stamp.copy_from_slice(vs.transaction_version());
        Ok((ttl, stamp, name))
    }

    /// The entry of the member on `key` among the riders of the session `session`.
    pub(crate) fn rider(&self, session: FencingToken, key: &Key) -> Vec<u8> {
        self.pack(&("s", session.0, key.space().as_str(), key.name().as_str()))
    }

    /// Every rider entry of the session `session`, in key order.
    pub(crate) fn riders_of(&self, session: FencingToken) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("s", session.0)))
    }

    /// Decodes a rider entry: the member's key.
    pub(crate) fn parse_rider(&self, key: &[u8]) -> Result<Key, Error> {
        let bad = || corrupt("a session's rider entry");
        let (_, _, space, name): (String, u64, String, String) =
            self.root.unpack(key).map_err(|_| bad())?;
        let space = Space::new(space).map_err(|_| bad())?;
        let name = liveness_core::Name::new(name).map_err(|_| bad())?;
        Ok(Key::new(space, name))
    }

    pub(crate) fn dead(&self, token: FencingToken) -> Vec<u8> {
        self.pack(&("d", token.0))
    }

    pub(crate) fn dead_all(&self) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("d",)))
    }

    pub(crate) fn parse_dead(&self, key: &[u8]) -> Result<FencingToken, Error> {
        let (_, t): (String, u64) = self
            .root
            .unpack(key)
            .map_err(|_| corrupt("a dead set entry"))?;
        Ok(FencingToken(t))
    }

    pub(crate) fn counter(&self, which: &str) -> Vec<u8> {
        self.pack(&("n", which))
    }

    pub(crate) fn item(&self, id: u64) -> Vec<u8> {
        self.pack(&("i", id))
    }

    pub(crate) fn payload(&self, id: u64) -> Vec<u8> {
        self.pack(&("b", id))
    }

    /// The error text of item `id`'s latest failure that gave one
    /// (`ItemStore::finish_with_error`); absent when none gave a text.
    pub(crate) fn error(&self, id: u64) -> Vec<u8> {
        self.pack(&("f", id))
    }

    /// The pending entry of item `id` in `queue`: `("p", id)` for the default queue
    /// (the layout from before queues), `("pq", queue, id)` for another.
    pub(crate) fn pending(&self, queue: QueueName, id: u64) -> Vec<u8> {
        match queue.is_default() {
            true => self.pack(&("p", id)),
            false => self.pack(&("pq", queue.as_str(), id)),
        }
    }

    /// Every pending entry of `queue`, lowest id first.
    pub(crate) fn pending_in(&self, queue: QueueName) -> (Vec<u8>, Vec<u8>) {
        match queue.is_default() {
            true => strinc_range(self.pack(&("p",))),
            false => strinc_range(self.pack(&("pq", queue.as_str()))),
        }
    }

    /// Every pending entry of every queue but the default.
    pub(crate) fn pending_named(&self) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("pq",)))
    }

    pub(crate) fn owned(&self, token: FencingToken, id: u64) -> Vec<u8> {
        self.pack(&("o", token.0, id))
    }

    /// The enqueue idempotency key: the item id it answered.
    pub(crate) fn enqueue_key(&self, key: [u8; 16]) -> Vec<u8> {
        self.pack(&("k", key.as_slice()))
    }

    /// The claim high-water mark of `token`: the greatest claim request id admitted
    /// under it (16 big-endian bytes).
    pub(crate) fn claim_mark(&self, token: FencingToken) -> Vec<u8> {
        self.pack(&("h", token.0))
    }

    pub(crate) fn owned_by(&self, token: FencingToken) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("o", token.0)))
    }

    pub(crate) fn dead_letter(&self, id: u64) -> Vec<u8> {
        self.pack(&("x", id))
    }

    pub(crate) fn dead_letters_all(&self) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("x",)))
    }

    /// The id at the end of a `p`, `pq`, `x` or `o` key.
    pub(crate) fn parse_id(&self, key: &[u8]) -> Result<u64, Error> {
        if let Ok((_, id)) = self.root.unpack::<(String, u64)>(key) {
            return Ok(id);
        }
        if let Ok((_, _, id)) = self.root.unpack::<(String, String, u64)>(key) {
            return Ok(id);
        }
        let (_, _, id): (String, u64, u64) = self
            .root
            .unpack(key)
            .map_err(|_| corrupt("an item index key"))?;
        Ok(id)
    }

    /// The lease records of `space` whose name is greater than `after` (all without
    /// it): tuple-encoded strings sort by their bytes.
    pub(crate) fn leases_after(&self, space: &Space, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
        let (begin, end) = strinc_range(self.pack(&("l", space.as_str())));
        match after {
            // The first key after `("l", space, after)`: a lease key has no extension.
            Some(name) => {
                let mut from = self.pack(&("l", space.as_str(), name));
                from.push(0);
                (from, end)
            }
            None => (begin, end),
        }
    }

    /// Decodes a lease record key: its name.
    pub(crate) fn parse_lease(&self, key: &[u8]) -> Result<String, Error> {
        let (_, _, name): (String, String, String) =
            self.root.unpack(key).map_err(|_| corrupt("a lease key"))?;
        Ok(name)
    }

    /// The `p`, `x` or `i` entries with ids from `first_id` on.
    pub(crate) fn ids_from(&self, which: &str, first_id: u64) -> (Vec<u8>, Vec<u8>) {
        let end = strinc_range(self.pack(&(which,))).1;
        (self.pack(&(which, first_id)), end)
    }

    /// The death record with `seq`.
    pub(crate) fn death(&self, seq: u64) -> Vec<u8> {
        self.pack(&("D", seq))
    }

    /// The seq of dead `token`'s death record, until its sweep ends.
    pub(crate) fn death_of(&self, token: FencingToken) -> Vec<u8> {
        self.pack(&("Dt", token.0))
    }

    /// The running tally of dead `token`'s sweep.
    pub(crate) fn death_tally(&self, token: FencingToken) -> Vec<u8> {
        self.pack(&("Dw", token.0))
    }

    pub(crate) fn count(&self, which: Count) -> Vec<u8> {
        self.pack(&("c", which.name()))
    }

    /// The `which` count of `queue`, a queue other than the default (whose counts
    /// are the totals, [`Layout::count`], less the other queues').
    pub(crate) fn queue_count(&self, queue: QueueName, which: Count) -> Vec<u8> {
        self.pack(&("cq", queue.as_str(), which.name()))
    }

    /// Every count of every queue but the default, by queue name.
    pub(crate) fn queue_counts_all(&self) -> (Vec<u8>, Vec<u8>) {
        strinc_range(self.pack(&("cq",)))
    }

    /// Decodes a key of [`Layout::queue_counts_all`]: its queue and count.
    pub(crate) fn parse_queue_count(&self, key: &[u8]) -> Result<(QueueName, Count), Error> {
        let bad = || corrupt("a queue's count key");
        let (_, queue, which): (String, String, String) =
            self.root.unpack(key).map_err(|_| bad())?;
        let queue = QueueName::new(&queue).map_err(|_| bad())?;
        let which = Count::named(&which).ok_or_else(bad)?;
        Ok((queue, which))
    }
}

/// The three item counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Pending,
    Owned,
    Dead,
}

impl Count {
    fn name(self) -> &'static str {
        match self {
            Count::Pending => "pending",
            Count::Owned => "owned",
            Count::Dead => "dead",
        }
    }

    /// The count [`Count::name`] names.
    fn named(name: &str) -> Option<Count> {
        [Count::Pending, Count::Owned, Count::Dead]
            .into_iter()
            .find(|c| c.name() == name)
    }

    pub(crate) fn of(state: ItemState) -> Count {
        match state {
            ItemState::Pending => Count::Pending,
            ItemState::Owned(_) => Count::Owned,
            ItemState::DeadLettered => Count::Dead,
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_be_bytes(a))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(s);
    Some(u32::from_be_bytes(a))
}

/// The lease record.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRec {
    pub(crate) stamp: Stamp,
    pub(crate) token: FencingToken,
    pub(crate) ttl_ms: u64,
    /// The id of the acquire call that wrote it (to recognise our own commit after
    /// an unknown result).
    pub(crate) nonce: u64,
    pub(crate) holder: HolderId,
    /// For a member riding a session: the session's key and token. Such a record has
    /// no expiry of its own (no index entry): it lives while that session lease does.
    pub(crate) session: Option<(Key, FencingToken)>,
}

impl LeaseRec {
    /// The value with a stamp placeholder and its offset suffix (0). A riding
    /// member's record appends a 0x00 byte (never in a holder id, which has no
    /// control characters), its session's token and key.
    pub(crate) fn encode_stamped(
        token: FencingToken,
        ttl_ms: u64,
        nonce: u64,
        holder: &HolderId,
        session: Option<(&Key, FencingToken)>,
    ) -> Vec<u8> {
        let mut v = Vec::with_capacity(38 + holder.as_str().len());
        v.extend_from_slice(&INCOMPLETE);
        v.extend_from_slice(&token.0.to_be_bytes());
        v.extend_from_slice(&ttl_ms.to_be_bytes());
        v.extend_from_slice(&nonce.to_be_bytes());
        v.extend_from_slice(holder.as_str().as_bytes());
        if let Some((key, token)) = session {
            v.push(0);
            v.extend_from_slice(&token.0.to_be_bytes());
            v.extend_from_slice(key.to_string().as_bytes());
        }
        v.extend_from_slice(&0u32.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<LeaseRec, Error> {
        let bad = || corrupt("a lease record");
        let mut stamp = [0u8; 10];
        stamp.copy_from_slice(b.get(..10).ok_or_else(bad)?);
        let token = FencingToken(u64_at(b, 10).ok_or_else(bad)?);
        let ttl_ms = u64_at(b, 18).ok_or_else(bad)?;
        let nonce = u64_at(b, 26).ok_or_else(bad)?;
        let rest = b.get(34..).ok_or_else(bad)?;
        let (holder, session) = match rest.iter().position(|&c| c == 0) {
            None => (rest, None),
            Some(at) => {
                let token = FencingToken(u64_at(rest, at + 1).ok_or_else(bad)?);
                let text = rest.get(at + 9..).ok_or_else(bad)?;
                let text = std::str::from_utf8(text).map_err(|_| bad())?;
                let key = Key::parse(text).map_err(|_| bad())?;
                (&rest[..at], Some((key, token)))
            }
        };
        let holder = HolderId::from_bytes(holder).map_err(|_| bad())?;
        Ok(LeaseRec {
            stamp,
            token,
            ttl_ms,
            nonce,
            holder,
            session,
        })
    }
}

/// The index entry's value: token and holder.
pub(crate) fn encode_index_value(token: FencingToken, holder: &HolderId) -> Vec<u8> {
    let mut v = token.0.to_be_bytes().to_vec();
    v.extend_from_slice(holder.as_str().as_bytes());
    v
}

pub(crate) fn decode_index_value(b: &[u8]) -> Result<(FencingToken, HolderId), Error> {
    let bad = || corrupt("an expiry index entry");
    let token = FencingToken(u64_at(b, 0).ok_or_else(bad)?);
    let holder = HolderId::from_bytes(b.get(8..).ok_or_else(bad)?).map_err(|_| bad())?;
    Ok((token, holder))
}

/// The dead-set entry's value: the nonce of the call that declared it dead, and the key.
pub(crate) fn encode_dead(nonce: u64, key: &Key) -> Vec<u8> {
    let mut v = nonce.to_be_bytes().to_vec();
    v.extend_from_slice(key.to_string().as_bytes());
    v
}

pub(crate) fn decode_dead(b: &[u8]) -> Result<(u64, Key), Error> {
    let bad = || corrupt("a dead set entry");
    let nonce = u64_at(b, 0).ok_or_else(bad)?;
    let text = std::str::from_utf8(b.get(8..).ok_or_else(bad)?).map_err(|_| bad())?;
    let key = Key::parse(text).map_err(|_| bad())?;
    Ok((nonce, key))
}

pub(crate) fn decode_u64(b: &[u8]) -> Result<u64, Error> {
    u64_at(b, 0).ok_or_else(|| corrupt("a counter"))
}

pub(crate) fn decode_count(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::try_from(i64::from_le_bytes(a)).unwrap_or(0)
}

/// Item metadata (the payload lives in its own key, written once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ItemMeta {
    pub(crate) attempts: u32,
    pub(crate) max_attempts: u32,
    pub(crate) state: ItemState,
    /// The queue it waits in: its name follows the 17 bytes of the rest, unless it
    /// is the default (what a record written before queues holds).
    pub(crate) queue: QueueName,
}

impl ItemMeta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17 + self.queue.as_str().len());
        v.extend_from_slice(&self.attempts.to_be_bytes());
        v.extend_from_slice(&self.max_attempts.to_be_bytes());
        let (tag, token) = match self.state {
            ItemState::Pending => (0u8, 0),
            ItemState::Owned(t) => (1, t.0),
            ItemState::DeadLettered => (2, 0),
        };
        v.push(tag);
        v.extend_from_slice(&token.to_be_bytes());
        if !self.queue.is_default() {
            v.extend_from_slice(self.queue.as_str().as_bytes());
        }
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<ItemMeta, Error> {
        let bad = || corrupt("an item record");
        let attempts = u32_at(b, 0).ok_or_else(bad)?;
        let max_attempts = u32_at(b, 4).ok_or_else(bad)?;
        let token = u64_at(b, 9).ok_or_else(bad)?;
        let state = match b.get(8) {
            Some(0) => ItemState::Pending,
            Some(1) => ItemState::Owned(FencingToken(token)),
            Some(2) => ItemState::DeadLettered,
            _ => return Err(bad()),
        };
        let queue = match b.get(17..).unwrap_or_default() {
            [] => QueueName::DEFAULT,
            name => std::str::from_utf8(name)
                .ok()
                .and_then(|name| QueueName::new(name).ok())
                .ok_or_else(bad)?,
        };
        Ok(ItemMeta {
            attempts,
            max_attempts,
            state,
            queue,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value as the commit writes it: the placeholder replaced, the offset gone.
    fn committed(mut v: Vec<u8>) -> Vec<u8> {
        v.truncate(v.len() - 4);
        v[..10].copy_from_slice(&[7; 10]);
        v
    }

    #[test]
    fn a_riding_member_s_record_names_its_session() {
        let holder = HolderId::new("node a#1").unwrap();
        let session = Key::parse("sessions/proc-1").unwrap();
        let raw = LeaseRec::encode_stamped(
            FencingToken(9),
            60_000,
            5,
            &holder,
            Some((&session, FencingToken(4))),
        );
        let rec = LeaseRec::decode(&committed(raw)).unwrap();
        assert_eq!(
            (rec.token, rec.ttl_ms, rec.nonce),
            (FencingToken(9), 60_000, 5)
        );
        assert_eq!(rec.holder, holder);
        assert_eq!(rec.session, Some((session, FencingToken(4))));

        let own = LeaseRec::encode_stamped(FencingToken(9), 60_000, 5, &holder, None);
        let rec = LeaseRec::decode(&committed(own)).unwrap();
        assert_eq!(rec.holder, holder);
        assert_eq!(rec.session, None);
    }

    #[test]
    fn an_item_meta_keeps_its_queue_and_old_ones_are_the_default_s() {
        let mail = QueueName::new("mail").unwrap();
        let meta = ItemMeta {
            attempts: 2,
            max_attempts: 5,
            state: ItemState::Owned(FencingToken(7)),
            queue: mail,
        };
        assert_eq!(ItemMeta::decode(&meta.encode()).unwrap(), meta);
        // The default queue's record is the layout from before queues: 17 bytes.
        let old = ItemMeta {
            queue: QueueName::DEFAULT,
            ..meta
        };
        assert_eq!(old.encode().len(), 17);
        assert_eq!(ItemMeta::decode(&old.encode()).unwrap(), old);
        // A name no queue can have is corrupt data, not a panic.
        for bad in [&b"a b"[..], b"\xff", b"x/y"] {
            let mut raw = old.encode();
            raw.extend_from_slice(bad);
            assert!(ItemMeta::decode(&raw).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_queue_s_pending_range_holds_its_own_entries_only() {
        let layout = Layout::new("liveness", &Namespace::new("ns").unwrap());
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
            let (b, e) = layout.pending_in(a);
            for other in queues {
                for id in [0, 7, u64::MAX] {
                    let key = layout.pending(other, id);
                    let inside = b <= key && key < e;
                    assert_eq!(inside, a == other, "{a:?} {other:?} {id}");
                    assert_eq!(layout.parse_id(&key).unwrap(), id);
                }
            }
        }
        // The default queue's entries are where they were before queues.
        assert_eq!(
            layout.pending(QueueName::DEFAULT, 3),
            layout.pack(&("p", 3u64))
        );
        let (b, e) = layout.pending_named();
        assert!(
            !(b <= layout.pending(QueueName::DEFAULT, 3)
                && layout.pending(QueueName::DEFAULT, 3) < e)
        );
        assert!(b <= layout.pending(q("mail"), 3) && layout.pending(q("mail"), 3) < e);
        let key = layout.queue_count(q("mail"), Count::Owned);
        let (queue, which) = layout.parse_queue_count(&key).unwrap();
        assert_eq!((queue, which.name()), (q("mail"), "owned"));
    }
}
