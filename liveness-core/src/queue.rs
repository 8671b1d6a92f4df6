//! The producer's handle: adds work for [`Worker`](crate::Worker)s, and nothing else.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::item::{EnqueueOptions, ItemId};
use crate::queue_name::QueueName;
use crate::store::Store;

/// Adds items to one of a store's queues: what a producer holds, without the lease
/// and checker calls of the [`Store`] itself. [`Queue::new`] adds to
/// [`QueueName::DEFAULT`], [`Queue::named`] to a named queue (on a store with
/// [`Capabilities::queues`](crate::Capabilities::queues)).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use liveness_core::{EnqueueOptions, MemoryStore, Queue, RequestId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> liveness_core::Result<()> {
/// let queue = Queue::new(Arc::new(MemoryStore::new()));
/// let first = queue.enqueue(b"send welcome mail to 42").await?;
/// // A retried call with the same key adds nothing and answers the first id.
/// let keyed = EnqueueOptions::keyed(RequestId(7));
/// let once = queue.enqueue_with(b"bill order 7", keyed).await?;
/// assert_eq!(queue.enqueue_with(b"bill order 7", keyed).await?, once);
/// assert!(once > first);
/// // A scheduled job: claimable an hour from now by the store's clock.
/// queue.enqueue_in(b"send the daily digest", Duration::from_secs(3600)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    store: Arc<dyn Store>,
    name: QueueName,
}

impl Queue {
    /// A producer on `store`'s default queue ([`QueueName::DEFAULT`]).
    pub fn new(store: Arc<dyn Store>) -> Queue {
        Queue {
            store,
            name: QueueName::DEFAULT,
        }
    }

    /// A producer on `store`'s queue `name`: every item it adds waits there, for the
    /// [`Worker`](crate::Worker)s that name it ([`WorkerConfig::queues`](crate::WorkerConfig::queues)).
    /// `InvalidInput` (`what: "queue"`) when `name` is no queue name
    /// ([`QueueName::new`]); adding to a queue other than the default on a store
    /// without [`Capabilities::queues`](crate::Capabilities::queues) is
    /// `InvalidInput` ([`InputProblem::Unsupported`](crate::InputProblem::Unsupported)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use liveness_core::{MemoryStore, Queue};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> liveness_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// let mail = Queue::named(store.clone(), "mail")?;
    /// mail.enqueue(b"welcome 42").await?;
    /// assert_eq!(mail.name().as_str(), "mail");
    /// # Ok(()) }
    /// ```
    pub fn named(store: Arc<dyn Store>, name: &str) -> Result<Queue> {
        Ok(Queue {
            store,
            name: QueueName::new(name)?,
        })
    }

    /// The queue this producer adds to.
    pub fn name(&self) -> QueueName {
        self.name
    }

    /// Adds a pending item carrying `payload`, with the default options.
    pub async fn enqueue(&self, payload: &[u8]) -> Result<ItemId> {
        self.enqueue_with(payload, EnqueueOptions::default()).await
    }

    /// Adds a pending item carrying `payload` that no worker claims before `delay` has
    /// passed by the store's own clock (a scheduled job; no host's clock is read).
    /// Needs a store with [`Capabilities::delays`](crate::Capabilities::delays):
    /// `InvalidInput` ([`InputProblem::Unsupported`](crate::InputProblem::Unsupported))
    /// on one without, and nothing is added.
    pub async fn enqueue_in(&self, payload: &[u8], delay: Duration) -> Result<ItemId> {
        self.enqueue_with(payload, EnqueueOptions::default().delay(delay))
            .await
    }

    /// Adds a pending item carrying `payload` with `options` (attempts, idempotency
    /// key, delay): [`ItemStore::enqueue`](crate::ItemStore::enqueue), in this
    /// producer's queue (whatever queue `options` names).
    pub async fn enqueue_with(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        self.store.enqueue(payload, options.queue(self.name)).await
    }

    /// Adds one item per payload, in order, with the default options; answers their
    /// ids in the same order. Sends them in batches of the store's `max_batch`, one
    /// [`ItemStore::enqueue_many`](crate::ItemStore::enqueue_many) call each (one
    /// round trip where the store has a native batch). Stops at the first error: the
    /// batches before it are added, and on a store without a native batch, the items
    /// of the failing batch before the failing one.
    pub async fn enqueue_many<P: AsRef<[u8]>>(&self, payloads: &[P]) -> Result<Vec<ItemId>> {
        self.enqueue_many_with(payloads, EnqueueOptions::default())
            .await
    }

    /// [`Queue::enqueue_many`] with `options` for every item (attempts, a delay: a
    /// scheduled batch), in this producer's queue. An idempotency key names one item:
    /// `InvalidInput` here.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use liveness_core::{EnqueueOptions, MemoryStore, Queue};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> liveness_core::Result<()> {
    /// let queue = Queue::new(Arc::new(MemoryStore::new()));
    /// let nightly = EnqueueOptions::default().delay(Duration::from_secs(6 * 3600));
    /// let ids = queue.enqueue_many_with(&[b"report a", b"report b"], nightly).await?;
    /// assert_eq!(ids.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_many_with<P: AsRef<[u8]>>(
        &self,
        payloads: &[P],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        let options = options.queue(self.name);
        let batch = self.store.capabilities().max_batch.max(1);
        let mut ids = Vec::with_capacity(payloads.len());
        for chunk in payloads.chunks(batch) {
            let owned: Vec<Vec<u8>> = chunk.iter().map(|p| p.as_ref().to_vec()).collect();
            ids.extend(self.store.enqueue_many(&owned, options).await?);
        }
        Ok(ids)
    }
}

#[cfg(feature = "serde")]
impl Queue {
    /// Adds a pending item carrying `job` as JSON (feature `serde`), with the default
    /// options; a worker reads it back with [`Job::json`](crate::Job::json).
    ///
    /// Fails with [`Error::InvalidInput`](crate::Error::InvalidInput) (`what:
    /// "payload"`) when `job` cannot be written as JSON (a map whose keys are not
    /// strings), before anything is sent.
    ///
    /// ```
    /// # #[cfg(feature = "serde")] {
    /// # use std::sync::Arc;
    /// # use liveness_core::{MemoryStore, Queue};
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Resize { image: u64, width: u32 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> liveness_core::Result<()> {
    /// let queue = Queue::new(Arc::new(MemoryStore::new()));
    /// queue.enqueue_json(&Resize { image: 42, width: 640 }).await?;
    /// # Ok(()) }
    /// # }
    /// ```
    pub async fn enqueue_json<T: serde::Serialize + ?Sized>(&self, job: &T) -> Result<ItemId> {
        self.enqueue(&to_json(job)?).await
    }

    /// [`Queue::enqueue_json`] with `options` (attempts, idempotency key).
    pub async fn enqueue_json_with<T: serde::Serialize + ?Sized>(
        &self,
        job: &T,
        options: EnqueueOptions,
    ) -> Result<ItemId> {
        self.enqueue_with(&to_json(job)?, options).await
    }
}

/// `job` as JSON bytes, or the input error that says it cannot be.
#[cfg(feature = "serde")]
fn to_json<T: serde::Serialize + ?Sized>(job: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(job).map_err(|_| {
        crate::Error::invalid(
            "payload",
            crate::InputProblem::Malformed {
                expected: "a value serde_json can write",
            },
        )
    })
}
