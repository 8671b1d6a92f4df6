//! The expiry watch: a watch on the namespace's lease-bound keys whose DELETE events
//! (etcd expiring or revoking a lease) feed an in-handle set of candidate keys, so
//! that `expired` costs O(expired) and the checker wakes the moment etcd expires a
//! lease.
//!
//! - Started lazily by the first `expired`, `next_expiry` or `wakeups` call on a
//!   handle (members that only acquire and renew never pay for it).
//! - A handle *checks* from its first `expired` or `next_expiry` on. Only then does
//!   the watch keep candidates and tick `wakeups` for every expiry. Before (a handle
//!   that only subscribed to `wakeups`, like an election candidate), it keeps no
//!   candidates, scans nothing, and ticks only for the keys whose `acquire` this
//!   handle lost (`Held`): a candidate wakes when its role's lease ends, not on every
//!   member's death.
//! - When a handle starts checking, and whenever the watch cannot resume (its
//!   revision was compacted) while it checks, a full scan compares the namespace's
//!   records with its lease-bound keys at one revision: O(leases) once, then the
//!   watch resumes from that revision + 1. After a plain break (connection lost,
//!   member restarted) it resumes from the last revision it saw, so no DELETE is
//!   missed.
//! - Candidates are hints: `expired` verifies each against the records before
//!   listing it, and forgets the stale ones (released or re-acquired keys).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, KeyValue, KvClient, WatchClient, WatchOptions};
use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::{Backoff, CancellationToken, Key, Result, Space};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::map;
use crate::keys::{Keys, Record};

/// Keys per page of the fallback scan.
const PAGE: i64 = 5_000;

/// etcd's lessor revokes expired leases in passes every 500 ms, and within a pass in
/// parallel (so in no useful revision order). DELETEs that arrive within this long
/// of the first one of a pass count as one pass, ordered by token inside it.
const PASS: Duration = Duration::from_millis(250);

/// A candidate's place in the order `expired` lists: (pass, token).
type Rank = (u64, u64);

#[derive(Default)]
struct Candidates {
    by_space: HashMap<Space, BTreeSet<(Rank, Key)>>,
    /// Each candidate's rank, and the generation it was (re)inserted at.
    by_key: HashMap<Key, (Rank, u64)>,
    /// Counts insertions: a candidate inserted after a read began is newer than
    /// what that read saw, and the read's verdict must not drop it.
    generation: u64,
    pass: u64,
    pass_started: Option<tokio::time::Instant>,
}

impl Candidates {
    fn insert(&mut self, rank: Rank, key: Key) {
        self.generation += 1;
        if let Some((old, _)) = self.by_key.insert(key.clone(), (rank, self.generation)) {
            if let Some(set) = self.by_space.get_mut(key.space()) {
                set.remove(&(old, key.clone()));
            }
        }
        self.by_space
            .entry(key.space().clone())
            .or_default()
            .insert((rank, key));
    }
}

/// A full scan a handle owes itself ([`ExpiryWatch::owe_scan`]): owed again when
/// dropped before [`OwedScan::paid`].
pub(crate) struct OwedScan<'a>(Option<&'a ExpiryWatch>);

impl OwedScan<'_> {
    /// The scan came: absorbed, nothing is owed.
    pub(crate) fn paid(mut self, scan: Scan) {
        if let Some(w) = self.0.take() {
            w.absorb_scan(scan);
        }
    }
}

impl Drop for OwedScan<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.0 {
            lock(&w.mode).scan_owed = true;
        }
    }
}

/// At most this many keys are watched for a handle that does not check; past it,
/// it ticks for every expiry (a tick is only a hint).
const MAX_INTEREST: usize = 1024;

/// What a handle wants from its watch.
#[derive(Default)]
struct Mode {
    /// The handle checks (`expired`, `next_expiry`): candidates are kept, every
    /// expiry ticks.
    checking: bool,
    /// The watch started (or restarted) without the full scan that checking needs:
    /// the first `expired` runs it.
    scan_owed: bool,
    /// Keys whose lease's end ticks even while the handle does not check (its
    /// acquire was refused: `Held`).
    interest: std::collections::HashSet<Key>,
    /// More keys than [`MAX_INTEREST`] were of interest: every expiry ticks.
    overflow: bool,
}

/// The watch state of one store handle (shared by its clones).
pub(crate) struct ExpiryWatch {
    candidates: Mutex<Candidates>,
    mode: Mutex<Mode>,
    seen: watch::Sender<i64>,
    wake: watch::Sender<u64>,
    /// Asks the watch task for a progress notification (no write needed).
    progress: tokio::sync::Notify,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Full scans absorbed (tests compare costs with it).
    pub(crate) scans: std::sync::atomic::AtomicU64,
    /// Per space, the lease-bound key `next_expiry` reads by key while it lives
    /// (found by the last scan or range), instead of ranging over the space.
    pub(crate) probes: Mutex<HashMap<Space, String>>,
}

impl ExpiryWatch {
    pub(crate) fn new() -> Arc<ExpiryWatch> {
        Arc::new(ExpiryWatch {
            candidates: Mutex::default(),
            mode: Mutex::default(),
            seen: watch::channel(0).0,
            wake: watch::channel(0).0,
            progress: tokio::sync::Notify::new(),
            stop: CancellationToken::new(),
            task: Mutex::new(None),
            scans: std::sync::atomic::AtomicU64::new(0),
            probes: Mutex::default(),
        })
    }

    /// Starts the watch task on the current tokio runtime unless it runs already.
    pub(crate) fn ensure(self: &Arc<Self>, kv: &KvClient, wc: &WatchClient, keys: &Keys) {
        let mut task = lock(&self.task);
        if task.as_ref().is_some_and(|t| !t.is_finished()) || self.stop.is_cancelled() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let me = self.clone();
        let (kv, wc, keys) = (kv.clone(), wc.clone(), keys.clone());
        *task = Some(rt.spawn(async move { me.run(kv, wc, keys).await }));
    }

    /// Ticks `wakeups` when the lease on `key` ends (this handle's acquire of it
    /// was refused), also while the handle does not check.
    pub(crate) fn interested(&self, key: &Key) {
        let mut m = lock(&self.mode);
        if m.interest.len() >= MAX_INTEREST && !m.interest.contains(key) {
            m.overflow = true;
            return;
        }
        m.interest.insert(key.clone());
    }

    /// Forgets the interest in `key` (this handle acquired it).
    pub(crate) fn not_interested(&self, key: &Key) {
        let mut m = lock(&self.mode);
        if !m.interest.is_empty() {
            m.interest.remove(key);
        }
    }

    /// The handle checks from now on. True when the watch started without the full
    /// scan that checking needs: the caller runs it (after this call, so that it
    /// reads at a revision past the watch's start).
    pub(crate) fn checking(&self) -> bool {
        let mut m = lock(&self.mode);
        m.checking = true;
        std::mem::take(&mut m.scan_owed)
    }

    /// True while the watch owes the handle its first full scan.
    #[cfg(test)]
    pub(crate) fn scan_owed(&self) -> bool {
        lock(&self.mode).scan_owed
    }

    /// The scan [`ExpiryWatch::checking`] asked for, owed until it is absorbed: a
    /// scan that fails, or a call dropped while it runs, leaves it to the next call.
    pub(crate) fn owe_scan(&self) -> OwedScan<'_> {
        OwedScan(Some(self))
    }

    /// Whether a DELETE of `key` keeps a candidate (the handle checks) and whether
    /// it ticks `wakeups`.
    fn wants(&self, key: &Key) -> (bool, bool) {
        let m = lock(&self.mode);
        (
            m.checking,
            m.checking || m.overflow || m.interest.contains(key),
        )
    }

    /// Ends the watch task (the store handle is gone).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    pub(crate) fn wakeups(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// Records `key` as possibly expired: its lease-bound key with `token` was just
    /// deleted.
    pub(crate) fn deleted(&self, token: u64, key: Key) {
        let mut c = lock(&self.candidates);
        let now = tokio::time::Instant::now();
        let new_pass = match c.pass_started {
            None => true,
            Some(t) => now.duration_since(t) > PASS,
        };
        if new_pass {
            c.pass += 1;
            c.pass_started = Some(now);
        }
        let pass = c.pass;
        c.insert((pass, token), key);
    }

    /// The current insertion generation: take it BEFORE reading a key, and pass it
    /// to [`ExpiryWatch::forget_upto`] after judging what was read.
    pub(crate) fn generation(&self) -> u64 {
        lock(&self.candidates).generation
    }

    /// Drops the candidate `key` (reaped, released, re-acquired, verified stale),
    /// unless the watch (re)inserted it after generation `seen`: that DELETE is
    /// newer than the read that judged the key, and dropping it would leave a dead
    /// lease unlisted until the next full scan.
    pub(crate) fn forget_upto(&self, key: &Key, seen: u64) {
        let mut c = lock(&self.candidates);
        let Some(&(rank, generation)) = c.by_key.get(key) else {
            return;
        };
        if generation > seen {
            return;
        }
        c.by_key.remove(key);
        if let Some(set) = c.by_space.get_mut(key.space()) {
            set.remove(&(rank, key.clone()));
            if set.is_empty() {
                c.by_space.remove(key.space());
            }
        }
    }

    /// The candidates of `space`, earliest DELETE first, with the generation they
    /// were read at.
    pub(crate) fn candidates(&self, space: &Space) -> (Vec<Key>, u64) {
        let c = lock(&self.candidates);
        let keys = c
            .by_space
            .get(space)
            .map(|set| set.iter().map(|(_, k)| k.clone()).collect())
            .unwrap_or_default();
        (keys, c.generation)
    }

    /// Asks etcd, through the watch stream, to report how far the watch has got (a
    /// progress notification, which etcd sends once the watch has delivered every
    /// event up to the revision it reports). Nothing is written.
    pub(crate) fn request_progress(&self) {
        self.progress.notify_one();
    }

    /// Waits until the watch has delivered every event up to `rev`; false after
    /// `within`.
    pub(crate) async fn caught_up(&self, rev: i64, within: Duration) -> bool {
        let mut rx = self.seen.subscribe();
        let ok = matches!(
            tokio::time::timeout(within, rx.wait_for(|seen| *seen >= rev)).await,
            Ok(Ok(_))
        );
        ok
    }

    fn saw(&self, rev: i64) {
        self.seen.send_if_modified(|s| {
            if rev > *s {
                *s = rev;
                true
            } else {
                false
            }
        });
    }

    /// Adds the result of a full scan: (token, key) pairs, ranked before any later
    /// pass, and a probe for `next_expiry` in each space that has none.
    pub(crate) fn absorb_scan(&self, scan: Scan) {
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut probes = lock(&self.probes);
            for (space, key) in scan.probes {
                probes.entry(space).or_insert(key);
            }
        }
        let expired = scan.expired;
        let any = !expired.is_empty();
        {
            let mut c = lock(&self.candidates);
            let pass = c.pass;
            for (token, key) in expired {
                c.insert((pass, token), key);
            }
        }
        if any {
            tick(&self.wake);
        }
    }

    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// Where the watch starts when it has no revision to resume from: after a full
    /// scan when the handle checks; otherwise at the current revision, with no scan
    /// (one is owed should the handle start checking). `None` when the handle started
    /// checking between the revision read and now.
    async fn start(&self, kv: &KvClient, keys: &Keys) -> Result<Option<i64>> {
        if lock(&self.mode).checking {
            let found = scan(kv, keys).await?;
            let rev = found.revision;
            self.absorb_scan(found);
            self.saw(rev);
            return Ok(Some(rev + 1));
        }
        let rev = now(kv, keys).await?;
        let mut m = lock(&self.mode);
        if m.checking {
            return Ok(None);
        }
        m.scan_owed = true;
        drop(m);
        self.saw(rev);
        Ok(Some(rev + 1))
    }

    async fn run(self: Arc<Self>, kv: KvClient, wc: WatchClient, keys: Keys) {
        let mut from: Option<i64> = None;
        let pace = || Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let mut backoff = pace();
        let lives = keys.lives();
        loop {
            if self.stop.is_cancelled() {
                return;
            }
            let start = match from {
                Some(r) => r,
                None => match self.start(&kv, &keys).await {
                    Ok(Some(start)) => start,
                    // It started checking meanwhile: scan after all.
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "etcd expiry watch: its scan or revision read failed");
                        if !self.pause(backoff.next()).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            from = Some(start);
            let opts = WatchOptions::new()
                .with_prefix()
                .with_prev_key()
                .with_start_revision(start);
            let mut client = wc.clone();
            let created = tokio::select! {
                _ = self.stop.cancelled() => return,
                r = client.watch(keys.watched(), Some(opts)) => r,
            };
            let (mut requests, mut stream) = match created {
                Ok(s) => s.split(),
                Err(e) => {
                    tracing::debug!(error = %e, "etcd expiry watch failed to start");
                    if !self.pause(backoff.next()).await {
                        return;
                    }
                    continue;
                }
            };
            loop {
                let msg = tokio::select! {
                    _ = self.stop.cancelled() => return,
                    () = self.progress.notified() => {
                        if let Err(e) = requests.request_progress().await {
                            tracing::debug!(error = %e, "etcd watch progress request failed");
                        }
                        continue;
                    }
                    m = stream.message() => m,
                };
                let resp = match msg {
                    Ok(Some(resp)) => resp,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "etcd expiry watch broke; resuming");
                        break;
                    }
                };
                if resp.compact_revision() > 0 {
                    // The history we need is gone: fall back to a full scan.
                    from = None;
                    break;
                }
                if resp.canceled() {
                    break;
                }
                backoff = pace();
                if resp.events().is_empty() && !resp.created() {
                    // A progress notification: every event up to its revision has
                    // been delivered.
                    if let Some(h) = resp.header() {
                        self.saw(h.revision());
                    }
                    continue;
                }
                let mut max = 0;
                let mut deleted = false;
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    max = max.max(kv.mod_revision());
                    if ev.event_type() == EventType::Delete {
                        if let Some(key) = keys.parse_key(&lives, kv.key()) {
                            let (keep, wake) = self.wants(&key);
                            if keep {
                                let token = ev
                                    .prev_kv()
                                    .and_then(|p| u64::try_from(p.create_revision()).ok())
                                    .unwrap_or(u64::MAX);
                                self.deleted(token, key);
                            }
                            deleted |= wake;
                        }
                    }
                }
                if max > 0 {
                    from = Some(max + 1);
                    self.saw(max);
                }
                if deleted {
                    tick(&self.wake);
                }
            }
            if !self.pause(backoff.next()).await {
                return;
            }
        }
    }
}

/// The cluster's current revision, by a count-only read of one key (no write).
async fn now(kv: &KvClient, keys: &Keys) -> Result<i64> {
    let resp = kv
        .clone()
        .get(keys.sync(), Some(GetOptions::new().with_count_only()))
        .await
        .map_err(map)?;
    Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
}

/// The first key after every key that starts with `prefix`.
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Reads every key under `prefix` (keys only) in pages, all at one revision (the
/// first page's, unless `rev` is given). Returns the revision and the keys.
pub(crate) async fn range_all(
    kv: &KvClient,
    prefix: &str,
    rev: Option<i64>,
) -> Result<(i64, Vec<KeyValue>)> {
    let end = prefix_end(prefix);
    let mut start = prefix.as_bytes().to_vec();
    let mut rev = rev;
    let mut out = Vec::new();
    loop {
        let mut opts = GetOptions::new()
            .with_range(end.clone())
            .with_keys_only()
            .with_limit(PAGE);
        if let Some(r) = rev {
            opts = opts.with_revision(r);
        }
        let mut resp = kv
            .clone()
            .get(start.clone(), Some(opts))
            .await
            .map_err(map)?;
        if rev.is_none() {
            rev = resp.header().map(|h| h.revision());
        }
        let more = resp.more();
        let kvs = resp.take_kvs();
        let Some(last) = kvs.last() else { break };
        start = last.key().to_vec();
        start.push(0);
        out.extend(kvs);
        if !more {
            break;
        }
    }
    Ok((rev.unwrap_or(0), out))
}

/// What a full scan found.
pub(crate) struct Scan {
    /// The revision it read at.
    pub(crate) revision: i64,
    /// (rank, key) of the records whose lease-bound key is gone.
    pub(crate) expired: Vec<(u64, Key)>,
    /// Per space, its first live lease-bound key: `next_expiry`'s probe.
    pub(crate) probes: HashMap<Space, String>,
}

/// The full scan: records whose lease-bound key is gone, at one revision, with the
/// records' mod revisions (the token, unless a renewal changed the ttl) for ranking.
/// Costs O(leases in the namespace).
pub(crate) async fn scan(kv: &KvClient, keys: &Keys) -> Result<Scan> {
    let records = keys.records();
    let lives = keys.lives();
    let (rev, recs) = range_all(kv, &records, None).await?;
    let (_, live) = range_all(kv, &lives, Some(rev)).await?;
    let mut probes = HashMap::new();
    let live: std::collections::HashSet<Key> = live
        .iter()
        .filter_map(|kv| {
            let key = keys.parse_key(&lives, kv.key())?;
            probes
                .entry(key.space().clone())
                .or_insert_with(|| String::from_utf8_lossy(kv.key()).into_owned());
            Some(key)
        })
        .collect();
    let expired = recs
        .iter()
        // A riding member has no lease-bound key: its session's expiry is its own.
        .filter(|kv| !Record::rides_raw(kv.value()))
        .filter_map(|kv| {
            let key = keys.parse_key(&records, kv.key())?;
            let rank = u64::try_from(kv.mod_revision()).unwrap_or(0);
            (!live.contains(&key)).then_some((rank, key))
        })
        .collect();
    Ok(Scan {
        revision: rev,
        expired,
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("a/"), b"a0".to_vec());
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
    }

    #[tokio::test]
    async fn candidates_rank_by_pass_then_token_and_forget() {
        let w = ExpiryWatch::new();
        let a = Key::member("a").unwrap();
        let b = Key::member("b").unwrap();
        // One pass: token order.
        w.deleted(7, a.clone());
        w.deleted(5, b.clone());
        assert_eq!(
            w.candidates(&Space::members()).0,
            vec![b.clone(), a.clone()]
        );
        // A later pass ranks after.
        lock(&w.candidates).pass_started = None;
        w.deleted(1, b.clone());
        assert_eq!(
            w.candidates(&Space::members()).0,
            vec![a.clone(), b.clone()]
        );
        w.forget_upto(&a, w.generation());
        assert_eq!(w.candidates(&Space::members()).0, vec![b]);
        assert!(w.candidates(&Space::leaders()).0.is_empty());
    }

    /// A verdict must not drop a DELETE newer than its read: `verified` reads a
    /// candidate and judges it stale; should the watch re-insert the key meanwhile (a
    /// re-acquired lease that expired), forgetting it unconditionally would leave
    /// the dead member unlisted until a full rescan.
    #[tokio::test]
    async fn a_candidate_reinserted_after_the_read_survives_the_stale_verdict() {
        let w = ExpiryWatch::new();
        let a = Key::member("a").unwrap();
        w.deleted(5, a.clone());
        // `verified` takes the candidates and reads their records...
        let (listed, seen) = w.candidates(&Space::members());
        assert_eq!(listed, vec![a.clone()]);
        // ...meanwhile the key is re-acquired (token 9) and that lease expires: the
        // watch inserts the newer DELETE...
        w.deleted(9, a.clone());
        // ...and the read (which saw the re-acquired lease live) judges the first
        // candidate stale.
        w.forget_upto(&a, seen);
        assert_eq!(
            w.candidates(&Space::members()).0,
            vec![a.clone()],
            "the newer DELETE was dropped"
        );
        // A verdict read after the re-insertion does drop it.
        w.forget_upto(&a, w.generation());
        assert!(w.candidates(&Space::members()).0.is_empty());
    }
}
