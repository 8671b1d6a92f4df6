//! A TEST DOUBLE of the transaction interface: an in-process, serializable,
//! multi-version ordered key-value map with FoundationDB's transaction semantics.
//!
//! It is NOT FoundationDB and proves nothing about a real cluster. It exists so that
//! the store logic of this crate (the same code that drives the real client under
//! feature `native`) runs through the whole conformance suite in every `cargo test`,
//! on machines without `libfdb_c`.
//!
//! What it models, because the store logic depends on it:
//! - snapshot reads at a read version (multi-version history), read-your-writes;
//! - optimistic concurrency: a commit fails with `not_committed` (retryable) when a
//!   transaction committed after its read version wrote a key or range it read
//!   without `snapshot`, so conflicting concurrent transactions really abort and retry;
//! - versionstamps: every committing transaction gets a strictly increasing commit
//!   version, written into `SetVersionstampedKey` / `SetVersionstampedValue`
//!   placeholders (4-byte little-endian offset suffix, API version ≥ 520 format);
//! - atomic `ADD` (no read conflict), FoundationDB's size limits (keys 10,000 bytes,
//!   values 100,000 bytes, 10,000,000 bytes of mutations per transaction) and the
//!   5-second transaction age limit (`transaction_too_old`, retryable);
//! - `commit_unknown_result` on demand ([`DoubleDatabase::inject_unknown_results`]): the
//!   commit is applied but reported as maybe-committed, to test idempotent retries.
//!
//! What it does not model: durability, networking, recoveries, the batching of
//! several transactions into one commit version (here each commit has its own
//! version and batch order 0), read version delays and throttling.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{async_trait, Namespace};
use tokio::time::Instant;

use crate::config::Options;
use crate::core::FdbStore;
use crate::kv::{Class, Database, DbError, Pair, RangeRead, Stamp, Transaction};

const MAX_KEY: usize = 10_000;
const MAX_VALUE: usize = 100_000;
const MAX_TXN_BYTES: usize = 10_000_000;
const MAX_TXN_AGE: Duration = Duration::from_secs(5);
const MAX_RETRIES: u32 = 10_000;

/// A failure of the test double, named after the FoundationDB error it stands for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DoubleError {
    /// 1020 `not_committed`: a read conflicted with a later commit. Retryable.
    #[error(
        "test double: transaction not committed due to conflict with another transaction (1020)"
    )]
    NotCommitted,
    /// 1021 `commit_unknown_result`: the commit may or may not have been applied.
    /// Retryable; a retry must check what it finds.
    #[error("test double: transaction may or may not have committed (1021)")]
    CommitUnknownResult,
    /// 1007 `transaction_too_old`: older than five seconds. Retryable.
    #[error("test double: transaction is too old to perform reads or be committed (1007)")]
    TransactionTooOld,
    /// 2101 `transaction_too_large`: over 10,000,000 bytes of mutations.
    #[error("test double: transaction exceeds byte limit (2101)")]
    TransactionTooLarge,
    /// 2102 `key_too_large`.
    #[error("test double: key length exceeds limit (2102)")]
    KeyTooLarge,
    /// 2103 `value_too_large`.
    #[error("test double: value length exceeds limit (2103)")]
    ValueTooLarge,
    /// 2000-range `client_invalid_operation`: a versionstamp offset outside the key
    /// or value.
    #[error("test double: invalid versionstamp offset")]
    InvalidVersionstampOffset,
    /// The retry loop gave up after too many conflicts in a row.
    #[error("test double: gave up after {0} retries")]
    TooManyRetries(u32),
}

impl DoubleError {
    fn retryable(&self) -> bool {
        matches!(
            self,
            DoubleError::NotCommitted
                | DoubleError::CommitUnknownResult
                | DoubleError::TransactionTooOld
        )
    }

    fn maybe_committed(&self) -> bool {
        matches!(self, DoubleError::CommitUnknownResult)
    }

    /// Faults that a later call may not meet (mapped to `Unavailable`).
    fn is_transient(&self) -> bool {
        self.retryable() || matches!(self, DoubleError::TooManyRetries(_))
    }
}

impl From<DoubleError> for DbError {
    fn from(e: DoubleError) -> Self {
        let class = Class {
            transient: e.is_transient(),
            maybe_committed: e.maybe_committed(),
        };
        DbError::new(e, class)
    }
}

type Range = (Vec<u8>, Vec<u8>);

/// One key's history: (commit version, value or tombstone), oldest first.
type History = Vec<(u64, Option<Vec<u8>>)>;

#[derive(Debug, Default)]
struct State {
    /// The last committed version.
    version: u64,
    /// Per key, its history: (version, value or tombstone), oldest first.
    data: BTreeMap<Vec<u8>, History>,
    /// Write ranges of recent commits, for conflict checks.
    log: VecDeque<(u64, Vec<Range>)>,
    /// Read versions of open transactions (version -> count).
    active: BTreeMap<u64, usize>,
    /// How many of the next commits report `commit_unknown_result` after applying.
    inject_unknown: u32,
    /// The keys each commit wrote, one list per commit, while tests ask for them
    /// ([`DoubleDatabase::keep_written`]).
    written: Option<Vec<Vec<Vec<u8>>>>,
}

impl State {
    fn read_at(&self, key: &[u8], rv: u64) -> Option<&Vec<u8>> {
        self.data
            .get(key)
            .and_then(|h| h.iter().rev().find(|(v, _)| *v <= rv))
            .and_then(|(_, val)| val.as_ref())
    }

    fn oldest_needed(&self) -> u64 {
        self.active.keys().next().copied().unwrap_or(self.version)
    }

    fn release(&mut self, rv: u64) {
        if let Some(n) = self.active.get_mut(&rv) {
            *n -= 1;
            if *n == 0 {
                self.active.remove(&rv);
            }
        }
    }

    /// Drops history no open or future transaction can read.
    fn collect(&mut self, keys: &[Vec<u8>]) {
        let keep = self.oldest_needed();
        while self.log.front().is_some_and(|(v, _)| *v <= keep) {
            self.log.pop_front();
        }
        for key in keys {
            let Some(h) = self.data.get_mut(key) else {
                continue;
            };
            // Keep the newest entry at or below `keep` and everything above it.
            let first_needed = h.iter().rposition(|(v, _)| *v <= keep).unwrap_or(0);
            h.drain(..first_needed);
            if h.len() == 1 && h[0].1.is_none() && h[0].0 <= keep {
                self.data.remove(key);
            }
        }
    }
}

/// The in-process TEST DOUBLE of a FoundationDB database (see the module docs).
/// Clones share the same data, like several clients of one cluster.
#[derive(Debug, Clone, Default)]
pub struct DoubleDatabase {
    state: Arc<Mutex<State>>,
    conflicts: Arc<AtomicU64>,
    rows_read: Arc<AtomicU64>,
}

impl DoubleDatabase {
    /// An empty double.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store handle on `namespace` over this double. Each call is a separate handle
    /// with its own observations (like a separate process).
    pub fn store(&self, namespace: &Namespace) -> FdbStore {
        FdbStore::over(
            Arc::new(self.clone()),
            &format!("double {:p}", Arc::as_ptr(&self.state)),
            namespace,
            Options::default(),
        )
    }

    /// [`DoubleDatabase::store`] keeping `keep` death records (at least 1) instead of
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION).
    pub fn store_keeping_deaths(&self, namespace: &Namespace, keep: usize) -> FdbStore {
        let options = Options {
            death_retention: keep.max(1),
            ..Options::default()
        };
        FdbStore::over(
            Arc::new(self.clone()),
            &format!("double {:p}", Arc::as_ptr(&self.state)),
            namespace,
            options,
        )
    }

    /// Makes the next `n` commits apply their writes and then report
    /// `commit_unknown_result`, as FoundationDB does when a proxy fails mid-commit.
    pub fn inject_unknown_results(&self, n: u32) {
        lock(&self.state).inject_unknown = n;
    }

    /// Starts keeping the keys every later commit writes (set, cleared, added or
    /// versionstamped), one list per commit, until [`DoubleDatabase::take_written`]
    /// hands them over: lets tests check what an operation writes.
    pub fn keep_written(&self) {
        lock(&self.state).written.get_or_insert_with(Vec::new);
    }

    /// The keys each commit wrote since [`DoubleDatabase::keep_written`] or the last
    /// call, one list per commit, oldest first (empty when not keeping them).
    pub fn take_written(&self) -> Vec<Vec<Vec<u8>>> {
        lock(&self.state)
            .written
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// How many commits failed with a conflict so far (each was retried).
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// How many key-value pairs reads have returned so far (`get` hits and range
    /// rows): lets tests check what an operation costs, without timing it.
    pub fn rows_read(&self) -> u64 {
        self.rows_read.load(Ordering::Relaxed)
    }

    /// The last committed version.
    pub fn version(&self) -> u64 {
        lock(&self.state).version
    }
}

#[async_trait]
impl Database for DoubleDatabase {
    async fn begin(&self) -> Result<Box<dyn Transaction>, DbError> {
        Ok(Box::new(DoubleTxn {
            db: self.clone(),
            rv: None,
            started: Instant::now(),
            reads: Vec::new(),
            writes: BTreeMap::new(),
            stamped: Vec::new(),
            bytes: 0,
            bad: None,
            retries: 0,
        }))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Set(Vec<u8>),
    Clear,
    Add(i64),
}

#[derive(Debug)]
enum Stamped {
    Key(Vec<u8>, Vec<u8>),
    Value(Vec<u8>, Vec<u8>),
}

struct DoubleTxn {
    db: DoubleDatabase,
    rv: Option<u64>,
    started: Instant,
    reads: Vec<Range>,
    writes: BTreeMap<Vec<u8>, Op>,
    stamped: Vec<Stamped>,
    bytes: usize,
    bad: Option<DoubleError>,
    retries: u32,
}

impl Drop for DoubleTxn {
    fn drop(&mut self) {
        if let Some(rv) = self.rv.take() {
            lock(&self.db.state).release(rv);
        }
    }
}

fn key_after(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

fn add_to(base: Option<&[u8]>, delta: i64) -> Vec<u8> {
    let mut b = [0u8; 8];
    if let Some(v) = base {
        let n = v.len().min(8);
        b[..n].copy_from_slice(&v[..n]);
    }
    i64::from_le_bytes(b)
        .wrapping_add(delta)
        .to_le_bytes()
        .to_vec()
}

fn overlaps(a: &Range, b: &Range) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Splits off the 4-byte little-endian offset suffix and fills the stamp in.
fn fill_stamp(with_offset: &[u8], stamp: &Stamp) -> Result<Vec<u8>, DoubleError> {
    let Some(split) = with_offset.len().checked_sub(4) else {
        return Err(DoubleError::InvalidVersionstampOffset);
    };
    let (body, off) = with_offset.split_at(split);
    let mut o = [0u8; 4];
    o.copy_from_slice(off);
    let at = u32::from_le_bytes(o) as usize;
    if at + stamp.len() > body.len() {
        return Err(DoubleError::InvalidVersionstampOffset);
    }
    let mut out = body.to_vec();
    out[at..at + stamp.len()].copy_from_slice(stamp);
    Ok(out)
}

impl DoubleTxn {
    fn ensure_rv(&mut self) -> Result<u64, DbError> {
        if let Some(rv) = self.rv {
            if self.started.elapsed() > MAX_TXN_AGE {
                return Err(DoubleError::TransactionTooOld.into());
            }
            return Ok(rv);
        }
        let mut st = lock(&self.db.state);
        let rv = st.version;
        *st.active.entry(rv).or_default() += 1;
        self.rv = Some(rv);
        self.started = Instant::now();
        Ok(rv)
    }

    fn note_write(&mut self, key: &[u8], value_len: usize) {
        if key.len() > MAX_KEY {
            self.bad.get_or_insert(DoubleError::KeyTooLarge);
        }
        if value_len > MAX_VALUE {
            self.bad.get_or_insert(DoubleError::ValueTooLarge);
        }
        self.bytes += key.len() + value_len;
        if self.bytes > MAX_TXN_BYTES {
            self.bad.get_or_insert(DoubleError::TransactionTooLarge);
        }
    }

    fn overlay(op: &Op, base: Option<&[u8]>) -> Option<Vec<u8>> {
        match op {
            Op::Set(v) => Some(v.clone()),
            Op::Clear => None,
            Op::Add(d) => Some(add_to(base, *d)),
        }
    }

    fn reset(&mut self) {
        if let Some(rv) = self.rv.take() {
            lock(&self.db.state).release(rv);
        }
        self.reads.clear();
        self.writes.clear();
        self.stamped.clear();
        self.bytes = 0;
        self.bad = None;
        self.started = Instant::now();
    }
}

#[async_trait]
impl Transaction for DoubleTxn {
    async fn read_version(&mut self) -> Result<u64, DbError> {
        self.ensure_rv()
    }

    async fn get(&mut self, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, DbError> {
        let rv = self.ensure_rv()?;
        if !snapshot {
            self.reads.push((key.to_vec(), key_after(key)));
        }
        let st = lock(&self.db.state);
        let base = st.read_at(key, rv).map(Vec::as_slice);
        let out = match self.writes.get(key) {
            Some(op) => Self::overlay(op, base),
            None => base.map(<[u8]>::to_vec),
        };
        if out.is_some() {
            self.db.rows_read.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }

    async fn range(&mut self, read: RangeRead<'_>) -> Result<Vec<Pair>, DbError> {
        let RangeRead {
            begin,
            end,
            limit,
            reverse,
            snapshot,
        } = read;
        let rv = self.ensure_rv()?;
        let mut out: Vec<Pair> = Vec::new();
        if read.is_empty() {
            return Ok(out);
        }
        {
            let st = lock(&self.db.state);
            let bounds = (
                std::ops::Bound::Included(begin.to_vec()),
                std::ops::Bound::Excluded(end.to_vec()),
            );
            // Merge the snapshot with this transaction's own writes, in order.
            let base = st
                .data
                .range::<Vec<u8>, _>(bounds.clone())
                .filter_map(|(k, h)| {
                    h.iter()
                        .rev()
                        .find(|(v, _)| *v <= rv)
                        .and_then(|(_, val)| val.as_ref())
                        .map(|val| (k, val))
                });
            let own = self.writes.range::<Vec<u8>, _>(bounds);
            let mut base: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<u8>)>> = if reverse {
                Box::new(base.collect::<Vec<_>>().into_iter().rev())
            } else {
                Box::new(base)
            };
            let mut own: Box<dyn Iterator<Item = (&Vec<u8>, &Op)>> = if reverse {
                Box::new(own.rev())
            } else {
                Box::new(own)
            };
            let mut b = base.next();
            let mut o = own.next();
            let before = |x: &Vec<u8>, y: &Vec<u8>| if reverse { x > y } else { x < y };
            while out.len() < limit {
                match (b, o) {
                    (None, None) => break,
                    (Some((bk, bv)), None) => {
                        out.push((bk.clone(), bv.clone()));
                        b = base.next();
                    }
                    (Some((bk, bv)), Some((ok, _))) if before(bk, ok) => {
                        out.push((bk.clone(), bv.clone()));
                        b = base.next();
                    }
                    (bb, Some((ok, op))) => {
                        let same = bb.filter(|(bk, _)| *bk == ok);
                        if let Some(v) = Self::overlay(op, same.map(|(_, v)| v.as_slice())) {
                            out.push((ok.clone(), v));
                        }
                        if same.is_some() {
                            b = base.next();
                        }
                        o = own.next();
                    }
                }
            }
        }
        self.db
            .rows_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        if !snapshot {
            // Like FoundationDB: a read that stopped at its limit conflicts only on
            // the part of the range it actually read.
            let conflict = match (out.len() >= limit, out.last(), reverse) {
                (true, Some((k, _)), false) => (begin.to_vec(), key_after(k)),
                (true, Some((k, _)), true) => (k.clone(), end.to_vec()),
                _ => (begin.to_vec(), end.to_vec()),
            };
            self.reads.push(conflict);
        }
        Ok(out)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        self.note_write(key, value.len());
        self.writes.insert(key.to_vec(), Op::Set(value.to_vec()));
    }

    fn clear(&mut self, key: &[u8]) {
        self.note_write(key, 0);
        self.writes.insert(key.to_vec(), Op::Clear);
    }

    fn add(&mut self, key: &[u8], delta: i64) {
        self.note_write(key, 8);
        let op = match self.writes.get(key) {
            Some(Op::Set(v)) => Op::Set(add_to(Some(v), delta)),
            Some(Op::Clear) => Op::Set(add_to(None, delta)),
            Some(Op::Add(d)) => Op::Add(d.wrapping_add(delta)),
            None => Op::Add(delta),
        };
        self.writes.insert(key.to_vec(), op);
    }

    fn set_versionstamped_key(&mut self, key: &[u8], value: &[u8]) {
        self.note_write(
            key.get(..key.len().saturating_sub(4)).unwrap_or(key),
            value.len(),
        );
        self.stamped
            .push(Stamped::Key(key.to_vec(), value.to_vec()));
    }

    fn set_versionstamped_value(&mut self, key: &[u8], value: &[u8]) {
        self.note_write(key, value.len().saturating_sub(4));
        self.stamped
            .push(Stamped::Value(key.to_vec(), value.to_vec()));
    }

    async fn commit(&mut self) -> Result<Option<Stamp>, DbError> {
        if let Some(bad) = self.bad.clone() {
            return Err(bad.into());
        }
        if self.writes.is_empty() && self.stamped.is_empty() {
            return Ok(None); // read-only: nothing to commit
        }
        if self.rv.is_some() && self.started.elapsed() > MAX_TXN_AGE {
            return Err(DoubleError::TransactionTooOld.into());
        }
        let db = self.db.clone();
        let mut st = lock(&db.state);
        if let Some(rv) = self.rv {
            let conflict = st
                .log
                .iter()
                .filter(|(v, _)| *v > rv)
                .any(|(_, ws)| ws.iter().any(|w| self.reads.iter().any(|r| overlaps(w, r))));
            if conflict {
                self.db.conflicts.fetch_add(1, Ordering::Relaxed);
                return Err(DoubleError::NotCommitted.into());
            }
        }
        let version = st.version + 1;
        let mut stamp: Stamp = [0; 10];
        stamp[..8].copy_from_slice(&version.to_be_bytes());
        // Resolve everything before applying anything: a bad offset changes nothing.
        let mut resolved: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for (k, op) in &self.writes {
            let v = match op {
                Op::Add(d) => Some(add_to(st.read_at(k, st.version).map(Vec::as_slice), *d)),
                Op::Set(v) => Some(v.clone()),
                Op::Clear => None,
            };
            resolved.push((k.clone(), v));
        }
        for s in &self.stamped {
            match s {
                Stamped::Key(k, v) => resolved.push((fill_stamp(k, &stamp)?, Some(v.clone()))),
                Stamped::Value(k, v) => resolved.push((k.clone(), Some(fill_stamp(v, &stamp)?))),
            }
        }
        let mut ranges = Vec::with_capacity(resolved.len());
        let mut keys = Vec::with_capacity(resolved.len());
        for (k, v) in resolved {
            ranges.push((k.clone(), key_after(&k)));
            keys.push(k.clone());
            st.data.entry(k).or_default().push((version, v));
        }
        st.version = version;
        st.log.push_back((version, ranges));
        if let Some(rv) = self.rv.take() {
            st.release(rv);
        }
        if let Some(written) = st.written.as_mut() {
            written.push(keys.clone());
        }
        st.collect(&keys);
        let unknown = st.inject_unknown > 0;
        if unknown {
            st.inject_unknown -= 1;
            return Err(DoubleError::CommitUnknownResult.into());
        }
        Ok((!self.stamped.is_empty()).then_some(stamp))
    }

    async fn on_error(&mut self, err: DbError) -> Result<(), DbError> {
        let retryable = err
            .downcast_ref::<DoubleError>()
            .is_some_and(DoubleError::retryable);
        if !retryable {
            return Err(err);
        }
        self.retries += 1;
        if self.retries > MAX_RETRIES {
            return Err(DoubleError::TooManyRetries(MAX_RETRIES).into());
        }
        self.reset();
        // Backoff with jitter, like fdb_transaction_on_error: let the winner finish.
        let cap = 1u64 << self.retries.min(6);
        tokio::time::sleep(Duration::from_micros(fastrand::u64(0..cap * 100))).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn txn(db: &DoubleDatabase) -> Box<dyn Transaction> {
        db.begin().await.unwrap()
    }

    #[tokio::test]
    async fn conflicting_transactions_abort_and_retry() {
        let db = DoubleDatabase::new();
        let mut a = txn(&db).await;
        let mut b = txn(&db).await;
        // Both read the counter, both write it: the second commit must fail.
        assert_eq!(a.get(b"n", false).await.unwrap(), None);
        assert_eq!(b.get(b"n", false).await.unwrap(), None);
        a.set(b"n", b"1");
        b.set(b"n", b"1");
        a.commit().await.unwrap();
        let err = b.commit().await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<DoubleError>(),
            Some(&DoubleError::NotCommitted)
        );
        assert_eq!(db.conflicts(), 1);
        // on_error resets it: the retry sees the first commit and succeeds.
        b.on_error(err).await.unwrap();
        assert_eq!(b.get(b"n", false).await.unwrap(), Some(b"1".to_vec()));
        b.set(b"n", b"2");
        b.commit().await.unwrap();
        // A snapshot read or a blind write does not conflict.
        let mut c = txn(&db).await;
        let mut d = txn(&db).await;
        c.get(b"n", true).await.unwrap();
        c.set(b"m", b"x");
        d.set(b"n", b"3");
        d.commit().await.unwrap();
        c.commit().await.unwrap();
    }

    #[tokio::test]
    async fn snapshots_and_read_your_writes() {
        let db = DoubleDatabase::new();
        let mut w = txn(&db).await;
        for k in [b"a", b"b", b"c"] {
            w.set(k, k);
        }
        w.commit().await.unwrap();
        let mut r = txn(&db).await;
        r.read_version().await.unwrap();
        let mut w = txn(&db).await;
        w.clear(b"b");
        w.commit().await.unwrap();
        // r still sees its snapshot, plus its own writes.
        r.set(b"bb", b"x");
        r.clear(b"c");
        let rows = r
            .range(RangeRead::new(b"a", b"z", 10).snapshot())
            .await
            .unwrap();
        let keys: Vec<_> = rows.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, vec![b"a".as_slice(), b"b", b"bb"]);
        let rev = r
            .range(RangeRead::new(b"a", b"z", 2).reverse().snapshot())
            .await
            .unwrap();
        assert_eq!(rev[0].0, b"bb");
        assert_eq!(rev[1].0, b"b");
        r.add(b"cnt", 5);
        r.add(b"cnt", -2);
        assert_eq!(
            r.get(b"cnt", true).await.unwrap(),
            Some(3i64.to_le_bytes().to_vec())
        );
    }

    #[tokio::test]
    async fn versionstamps_increase_with_every_commit() {
        let db = DoubleDatabase::new();
        let mut last = [0u8; 10];
        for _ in 0..5 {
            let mut t = txn(&db).await;
            let mut value = vec![0xff; 10];
            value.extend_from_slice(&0u32.to_le_bytes());
            t.set_versionstamped_value(b"v", &value);
            let stamp = t.commit().await.unwrap().unwrap();
            assert!(stamp > last);
            let mut r = txn(&db).await;
            assert_eq!(r.get(b"v", false).await.unwrap(), Some(stamp.to_vec()));
            last = stamp;
        }
        let mut bad = txn(&db).await;
        bad.set_versionstamped_value(b"v", &[0, 0, 5, 0, 0, 0]);
        assert!(bad.commit().await.is_err(), "offset outside the value");
    }

    #[tokio::test]
    async fn size_limits_are_enforced() {
        let db = DoubleDatabase::new();
        let mut t = txn(&db).await;
        t.set(&vec![1u8; MAX_KEY + 1], b"");
        let err = t.commit().await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<DoubleError>(),
            Some(&DoubleError::KeyTooLarge)
        );
        let mut t = txn(&db).await;
        for i in 0..110u32 {
            t.set(&i.to_be_bytes(), &vec![0u8; MAX_VALUE]);
        }
        let err = t.commit().await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<DoubleError>(),
            Some(&DoubleError::TransactionTooLarge)
        );
    }
}
