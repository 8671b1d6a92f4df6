//! Input checks, once, in front of every store: the [`CheckInput`] layer.
//!
//! A store receives only checked input (see the store contract in
//! [`crate::store`]): the state machines, [`checked`] and the umbrella crate's
//! `connect` put this layer in front of every store they hand out, so a store that
//! forgets a check cannot let bad input through: it never sees it. A backend or a
//! custom store writes only its own logic.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::{BatchResult, Error, InputProblem, Result};
use crate::item::Outcome;
use crate::layer::{Intercept, Layer, Next, Op, Reply, Request};
use crate::lease::{Issuer, Lease};
use crate::store::{check_batch, Store};
use crate::types::Space;

/// Checks every call's input against the inner store's [`StoreInfo`](crate::StoreInfo)
/// before it reaches the store, and answers [`Error::InvalidInput`] without sending
/// it when a check fails (so the store changes nothing).
///
/// # Guarantees
/// What the store behind it never receives:
/// - an operation of a part of the contract its [`Capabilities`]
///   do not offer (work items on a store with `items: false`, the operator's views
///   with `operator_views: false`): `what` names the operation,
///   [`InputProblem::Unsupported`];
/// - a lease issued by another store or namespace (`release`, `claim`, `finish`,
///   the session of `join_session_many`, and each entry of `renew_many`):
///   `what: "lease"`, [`InputProblem::ForeignLease`];
/// - a ttl outside `min_ttl ..= max_ttl` (each entry of `acquire_many` and
///   `renew_many`): `what: "ttl"`;
/// - a batch longer than `max_batch` (`acquire_many`: `"acquires"`, `renew_many`:
///   `"leases"`, `reap_many`: `"expired"`, `join_session_many`: `"joins"`);
///   `sweep_many` takes any number;
/// - an empty batch (any `*_many` method): it is answered at once with no entries;
/// - a zero `limit` (`expired`, `dead_tokens`, `leases`, `deaths`, `items`,
///   `retry_dead_letters`) or `n` (`claim`): [`InputProblem::Zero`]; a
///   larger one reaches the store clamped to `max_batch`;
/// - a `members` page whose `after` key is of another space: `what: "after"`,
///   [`InputProblem::OtherSpace`];
/// - a `join_session_many` whose session is another store's (`what: "lease"`) or not
///   in [`Space::sessions`] (`what: "session"`), which fails the whole call, and each
///   entry whose key is in [`Space::sessions`] (`what: "key"`), which fails alone;
/// - an `enqueue` with `max_attempts == 0` or a payload over `max_payload`;
/// - a queue other than the default on a store without
///   [`Capabilities::queues`](crate::Capabilities::queues) (`what: "queue"`,
///   [`InputProblem::Unsupported`]), and a claim's queue list that is empty, longer
///   than [`MAX_CLAIM_QUEUES`](crate::MAX_CLAIM_QUEUES) or names a queue twice
///   (`what: "queues"`).
///
/// A batch with some invalid entries answers `InvalidInput` for just those, in their
/// places, and sends the others as one smaller batch (none, when none is valid).
/// Invalid input wins over every other answer: a call that fails a check answers
/// `InvalidInput` whatever the state of the store (a `claim` with `n == 0` under a
/// lost lease is `InvalidInput`, not `Lost`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckInput;

/// `store` behind [`CheckInput`]: the form in which the state machines and `connect`
/// hand stores out. A store already behind it ([`LeaseStore::checks_input`](crate::LeaseStore::checks_input)) is
/// returned as it is: one layer of checks, however often a store is passed on.
pub fn checked(store: Arc<dyn Store>) -> Arc<dyn Store> {
    if store.checks_input() {
        // Already behind the checks (a store from `connect` given to a state machine):
        // one layer of checks is enough.
        return store;
    }
    Arc::new(CheckInput).layer(store)
}

/// [`rejoin`] for a batch answered by `Reply::$op`: the kept entries sent as one
/// `$batch` request, and its answers merged with the refusals into that reply.
macro_rules! rejoin_as {
    ($op:ident, $refused:expr, $kept:expr, $batch:expr, $next:expr) => {
        rejoin($refused, $kept, $batch, $next, |r| match r {
            Reply::$op(v) => Ok(v),
            other => Err(other.op()),
        })
        .await
        .map(Reply::$op)
    };
}

#[async_trait]
impl Intercept for CheckInput {
    fn checks_input(&self) -> bool {
        true
    }

    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let info = next.store().info();
        let (caps, issuer) = (info.caps, &info.issuer);
        let op = req.op();
        if !caps.offers(op.part()) {
            return Err(Error::invalid(op.name(), InputProblem::Unsupported));
        }
        let req = match req {
            Request::AcquireMany { asks } => {
                check_batch(caps, "acquires", asks.len())?;
                let (asks, refused) = sift(asks, |a| caps.check_ttl(a.ttl));
                return rejoin_as!(
                    AcquireMany,
                    refused,
                    asks,
                    |asks| Request::AcquireMany { asks },
                    next
                );
            }
            Request::RenewMany { leases } => {
                check_batch(caps, "leases", leases.len())?;
                let (leases, refused) = sift(leases, |l| {
                    l.check_issuer(issuer)?;
                    caps.check_ttl(l.ttl)
                });
                return rejoin_as!(
                    RenewMany,
                    refused,
                    leases,
                    |leases| Request::RenewMany { leases },
                    next
                );
            }
            Request::ReapMany { expired: pairs } => {
                check_batch(caps, "expired", pairs.len())?;
                if pairs.is_empty() {
                    return Ok(Reply::ReapMany(Vec::new()));
                }
                Request::ReapMany { expired: pairs }
            }
            Request::SweepMany { tokens } if tokens.is_empty() => {
                return Ok(Reply::SweepMany(Vec::new()));
            }
            Request::Release { lease } => {
                lease.check_issuer(issuer)?;
                Request::Release { lease }
            }
            Request::JoinSessionMany { session, asks } => {
                check_batch(caps, "joins", asks.len())?;
                session.check_issuer(issuer)?;
                let sessions = Space::sessions();
                if session.key.space() != &sessions {
                    return Err(Error::invalid("session", InputProblem::OtherSpace));
                }
                let (asks, refused) = sift(asks, |(key, _)| match key.space() == &sessions {
                    true => Err(Error::invalid("key", InputProblem::OtherSpace)),
                    false => Ok(()),
                });
                let batch = |asks| Request::JoinSessionMany { session, asks };
                return rejoin_as!(JoinSessionMany, refused, asks, batch, next);
            }
            Request::Finish { lease, id, outcome } => {
                check_finish(caps, issuer, &lease, outcome, "")?;
                Request::Finish { lease, id, outcome }
            }
            Request::FinishWithError {
                lease,
                id,
                outcome,
                error,
            } => {
                check_finish(caps, issuer, &lease, outcome, &error)?;
                Request::FinishWithError {
                    lease,
                    id,
                    outcome,
                    error,
                }
            }
            Request::Claim {
                lease,
                queues,
                n,
                req,
            } => {
                lease.check_issuer(issuer)?;
                let n = caps.clamp_limit("n", n)?;
                crate::queue_name::check_claim_queues(&queues)?;
                for queue in &queues {
                    check_queue(caps, *queue)?;
                }
                Request::Claim {
                    lease,
                    queues,
                    n,
                    req,
                }
            }
            Request::Expired { space, limit } => {
                let limit = caps.clamp_limit("limit", limit)?;
                Request::Expired { space, limit }
            }
            Request::DeadTokens { limit } => Request::DeadTokens {
                limit: caps.clamp_limit("limit", limit)?,
            },
            Request::Leases { space, mut page } => {
                page.limit = caps.clamp_limit("limit", page.limit)?;
                if page.after.as_ref().is_some_and(|k| k.space() != &space) {
                    return Err(Error::invalid("after", InputProblem::OtherSpace));
                }
                Request::Leases { space, page }
            }
            Request::Deaths { before, limit } => Request::Deaths {
                before,
                limit: caps.clamp_limit("limit", limit)?,
            },
            Request::Enqueue { payload, options } => {
                options.validate(&payload, caps.max_payload)?;
                check_delay(caps, "delay", options.delay)?;
                check_queue(caps, options.queue)?;
                Request::Enqueue { payload, options }
            }
            Request::EnqueueMany { payloads, options } => {
                check_batch(caps, "payloads", payloads.len())?;
                if payloads.is_empty() {
                    return Err(Error::invalid("payloads", InputProblem::Zero));
                }
                if options.key.is_some() {
                    return Err(Error::invalid(
                        "key",
                        InputProblem::Malformed {
                            expected: "no idempotency key: a key names one item",
                        },
                    ));
                }
                for payload in &payloads {
                    options.validate(payload, caps.max_payload)?;
                }
                check_delay(caps, "delay", options.delay)?;
                check_queue(caps, options.queue)?;
                Request::EnqueueMany { payloads, options }
            }
            Request::Items { state, mut page } => {
                page.limit = caps.clamp_limit("limit", page.limit)?;
                Request::Items { state, page }
            }
            Request::RetryDeadLetters { limit } => Request::RetryDeadLetters {
                limit: caps.clamp_limit("limit", limit)?,
            },
            other => other,
        };
        next.run(req).await
    }
}

/// Refuses a non-zero delay on a store without [`Capabilities::delays`]. (One over
/// [`MAX_DELAY`](crate::item::MAX_DELAY) is refused by `EnqueueOptions::validate` for
/// an enqueue, and before this for a retry's wait.)
fn check_delay(caps: Capabilities, what: &'static str, delay: Duration) -> Result<()> {
    if !delay.is_zero() && !caps.delays {
        return Err(Error::invalid(what, InputProblem::Unsupported));
    }
    Ok(())
}

/// Refuses a queue other than the default on a store without
/// [`Capabilities::queues`].
fn check_queue(caps: Capabilities, queue: crate::QueueName) -> Result<()> {
    if !queue.is_default() && !caps.queues {
        return Err(Error::invalid("queue", InputProblem::Unsupported));
    }
    Ok(())
}

/// What `finish` and `finish_with_error` check: a lease of this store, a retry's wait
/// the store can keep (at most [`MAX_DELAY`](crate::item::MAX_DELAY)), and an error
/// text of at most [`MAX_ERROR_LEN`](crate::item::MAX_ERROR_LEN) bytes.
fn check_finish(
    caps: Capabilities,
    issuer: &Issuer,
    lease: &Lease,
    outcome: Outcome,
    error: &str,
) -> Result<()> {
    lease.check_issuer(issuer)?;
    crate::item::check_delay("after", outcome.delay())?;
    check_delay(caps, "after", outcome.delay())?;
    if error.len() > crate::item::MAX_ERROR_LEN {
        return Err(Error::invalid(
            "error",
            InputProblem::TooLong {
                max: crate::item::MAX_ERROR_LEN,
                len: error.len(),
            },
        ));
    }
    Ok(())
}

/// Splits a batch into the entries that pass `check` and, per position, the error of
/// each one that does not (`None` where the entry was kept).
fn sift<E>(entries: Vec<E>, check: impl Fn(&E) -> Result<()>) -> (Vec<E>, Vec<Option<Error>>) {
    let mut kept = Vec::with_capacity(entries.len());
    let mut refused = Vec::with_capacity(entries.len());
    for entry in entries {
        match check(&entry) {
            Ok(()) => {
                kept.push(entry);
                refused.push(None);
            }
            Err(e) => refused.push(Some(e)),
        }
    }
    (kept, refused)
}

/// Sends the kept entries as one batch (none when nothing is kept) and puts the
/// answers back in the places of the whole batch, the refused entries' errors in
/// theirs. A store that answers another number of entries than it was sent breaks
/// the contract: the call fails with `Backend`.
async fn rejoin<E, T>(
    refused: Vec<Option<Error>>,
    kept: Vec<E>,
    batch: impl FnOnce(Vec<E>) -> Request,
    next: Next,
    take: impl FnOnce(Reply) -> std::result::Result<Vec<Result<T>>, Op>,
) -> BatchResult<T> {
    let sent = kept.len();
    let backend = next.store().backend();
    let answers = if sent == 0 {
        Vec::new()
    } else {
        let reply = next.run(batch(kept)).await?;
        take(reply).map_err(|other| {
            Error::backend(
                backend,
                format!("a batch was answered with the reply to {}", other.name()),
            )
        })?
    };
    if answers.len() != sent {
        return Err(Error::backend(
            backend,
            format!(
                "a batch of {sent} entries was answered with {}",
                answers.len()
            ),
        ));
    }
    let mut answers = answers.into_iter();
    Ok(refused
        .into_iter()
        .map(|r| match r {
            Some(e) => Err(e),
            None => answers
                .next()
                .unwrap_or_else(|| Err(Error::backend(backend, "a batch answer went missing"))),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::layer::Intercepted;
    use crate::types::{HolderId, Key, Name, Ttl};
    use crate::MemoryStore;

    /// Counts the calls that reach the store behind it.
    #[derive(Debug, Default)]
    struct Count(AtomicUsize);

    #[async_trait]
    impl Intercept for Count {
        async fn call(&self, req: Request, next: Next) -> Result<Reply> {
            self.0.fetch_add(1, Ordering::SeqCst);
            next.run(req).await
        }
    }

    #[tokio::test]
    async fn an_empty_batch_never_reaches_the_store() {
        let count = Arc::new(Count::default());
        let raw: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let store = checked(Arc::new(Intercepted::new(raw, count.clone())));
        let key = Key::new(Space::sessions(), Name::new("s").unwrap());
        let holder = HolderId::new("h").unwrap();
        let session = store
            .acquire(&key, &holder, Ttl::from_secs(10).unwrap())
            .await
            .unwrap();
        let before = count.0.load(Ordering::SeqCst);
        assert!(store.acquire_many(&[]).await.unwrap().is_empty());
        assert!(store.renew_many(&[]).await.unwrap().is_empty());
        assert!(store.reap_many(&[]).await.unwrap().is_empty());
        assert!(store.sweep_many(&[]).await.unwrap().is_empty());
        let joined = store.join_session_many(&session, &[]).await.unwrap();
        assert!(joined.is_empty());
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            before,
            "a call reached the store"
        );
    }

    #[test]
    fn a_checked_store_is_not_checked_twice() {
        let raw: Arc<dyn Store> = Arc::new(MemoryStore::new());
        assert!(!raw.checks_input());
        let once = checked(raw);
        assert!(once.checks_input());
        let twice = checked(once.clone());
        assert!(
            Arc::ptr_eq(&once, &twice),
            "a second CheckInput layer was added"
        );
    }
}
