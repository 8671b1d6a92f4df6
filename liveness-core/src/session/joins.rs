//! The layer in front of a session's store (one with native sessions) that gathers
//! its members' re-joins into [`LeaseStore::join_session_many`] calls: after a
//! session loss every member re-joins the re-opened session in the same instant, and
//! they then cost about `members / max_batch` round trips instead of one each.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::layer::{Intercept, Next, Reply, Request};
use crate::lease::Lease;
#[cfg(doc)]
use crate::store::LeaseStore;
use crate::store::Store;
use crate::sync::lock;
use crate::types::{FencingToken, HolderId, Key};

/// At most this many batches' worth of joins are gathered before they are sent.
const GATHER_BATCHES: usize = 16;

/// One member's join, waiting for its batch.
#[derive(Debug)]
struct Ask {
    session: Lease,
    key: Key,
    holder: HolderId,
    answer: oneshot::Sender<Result<Lease>>,
}

/// Sends each `join_session` into a re-opened session (any lease of it but the
/// first, which its members join as the process starts them: one by one, or through
/// [`Session::join_many`](super::Session::join_many), which batches them itself)
/// through a task that gathers the joins waiting at the same moment and sends them as
/// `join_session_many` calls of at most
/// [`Capabilities::max_batch`](crate::Capabilities::max_batch) entries per session
/// lease (a lone join goes as a `join_session`). A batch whose whole call fails with a
/// transport fault answers that fault to each join (it may have been applied: each
/// join's own retry adopts its lease); one refused as a whole is sent again one join
/// at a time, so each member gets its own answer. Every other
/// call goes on unchanged.
#[derive(Debug)]
pub(crate) struct JoinBatches {
    queue: Arc<Queue>,
    /// The session's first lease: joins into it go on at once.
    first: FencingToken,
}

/// The joins waiting for the gatherer, and its wake-up.
#[derive(Debug, Default)]
struct Queue {
    asks: Mutex<Vec<Ask>>,
    wake: Notify,
    stop: CancellationToken,
}

impl JoinBatches {
    /// A gatherer sending to `store` the joins into every lease of the session but
    /// its `first` (spawned on the current tokio runtime; it ends when this layer is
    /// dropped).
    pub(crate) fn new(store: Arc<dyn Store>, first: FencingToken) -> JoinBatches {
        let queue = Arc::new(Queue::default());
        tokio::spawn(run(store, queue.clone()));
        JoinBatches { queue, first }
    }
}

impl Drop for JoinBatches {
    fn drop(&mut self) {
        self.queue.stop.cancel();
    }
}

#[async_trait]
impl Intercept for JoinBatches {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let Request::JoinSession {
            session,
            key,
            holder,
        } = req
        else {
            return next.run(req).await;
        };
        if session.token == self.first {
            let req = Request::JoinSession {
                session,
                key,
                holder,
            };
            return next.run(req).await;
        }
        let (answer, rx) = oneshot::channel();
        lock(&self.queue.asks).push(Ask {
            session,
            key,
            holder,
            answer,
        });
        self.queue.wake.notify_one();
        match rx.await {
            Ok(answer) => answer.map(Reply::JoinSession),
            // The gatherer ended without sending it (its runtime is gone).
            Err(_) => Err(Error::unavailable(
                next.store().backend(),
                "the session's join batcher is gone",
            )),
        }
    }
}

/// Gathers the joins waiting together and sends them, until the layer is dropped.
async fn run(store: Arc<dyn Store>, queue: Arc<Queue>) {
    let max = store.capabilities().max_batch.max(1);
    loop {
        tokio::select! {
            _ = queue.stop.cancelled() => return,
            _ = queue.wake.notified() => {}
        }
        // The members woken with the first one (a re-opened session wakes them all)
        // queue their joins meanwhile: take them while more keep coming.
        let mut asks: Vec<Ask> = Vec::new();
        loop {
            let more = std::mem::take(&mut *lock(&queue.asks));
            if more.is_empty() {
                break;
            }
            asks.extend(more);
            if asks.len() >= max * GATHER_BATCHES {
                break;
            }
            tokio::task::yield_now().await;
        }
        for (session, group) in by_session(asks) {
            let mut group = group.into_iter();
            loop {
                let chunk: Vec<Ask> = group.by_ref().take(max).collect();
                if chunk.is_empty() {
                    break;
                }
                send(&*store, &session, chunk).await;
            }
        }
    }
}

/// The joins grouped by the session lease they ride, in order of first appearance.
fn by_session(asks: Vec<Ask>) -> Vec<(Lease, Vec<Ask>)> {
    let mut groups: Vec<(Lease, Vec<Ask>)> = Vec::new();
    for ask in asks {
        let same = |l: &Lease| l.key == ask.session.key && l.token == ask.session.token;
        match groups.iter_mut().find(|(l, _)| same(l)) {
            Some((_, group)) => group.push(ask),
            None => groups.push((ask.session.clone(), vec![ask])),
        }
    }
    groups
}

/// Sends one batch (a lone join as `join_session`) and answers each join; when the
/// whole call fails, each join is sent alone.
async fn send(store: &dyn Store, session: &Lease, chunk: Vec<Ask>) {
    if chunk.len() > 1 {
        let pairs: Vec<(Key, HolderId)> = chunk
            .iter()
            .map(|a| (a.key.clone(), a.holder.clone()))
            .collect();
        match store.join_session_many(session, &pairs).await {
            Ok(answers) if answers.len() == chunk.len() => {
                for (ask, answer) in chunk.into_iter().zip(answers) {
                    let _ = ask.answer.send(answer);
                }
                return;
            }
            Ok(answers) => tracing::warn!(
                session = %session.key,
                sent = chunk.len(),
                answered = answers.len(),
                "a batch of joins was answered with another number of entries, joining one at a time"
            ),
            // A transport fault: the store may have applied the batch and lost the
            // reply. Each join gets the fault, as a join of its own would, and its own
            // retry adopts what its holder id left (sent alone now, each entry would
            // find its own lease and answer `Held` against itself).
            Err(Error::Unavailable { backend, source }) => {
                let why = source.to_string();
                for ask in chunk {
                    let _ = ask
                        .answer
                        .send(Err(Error::unavailable(backend, why.clone())));
                }
                return;
            }
            Err(e) => tracing::warn!(
                session = %session.key,
                error = %e,
                "a batch of joins was refused, joining one at a time"
            ),
        }
    }
    for ask in chunk {
        let answer = store.join_session(session, &ask.key, &ask.holder).await;
        let _ = ask.answer.send(answer);
    }
}
