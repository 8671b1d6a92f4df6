//! A store wrapper that gives every store call a `tracing` span, counts the calls and
//! records the failed ones in [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
//! The state machines wrap the store they are given with it, so every call they make
//! is traced and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::Result;
use crate::layer::{BoxCall, Call, Layer};
use crate::metrics::{error_kind, Labels, STORE_ERRORS_TOTAL};
use crate::store::Store;

/// Wraps `store` in a [`Traced`].
pub(crate) fn traced(store: Arc<dyn Store>) -> Arc<Traced> {
    Arc::new(Traced {
        labels: Labels::of(&*store),
        inner: store,
        calls: AtomicU64::new(0),
    })
}

/// A store whose every call runs inside a `liveness.store` span carrying the
/// operation, the backend and, where the call has them, the key, the space, the
/// token, the item and the batch size; and whose failed calls are counted in
/// [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
#[derive(Debug)]
pub struct Traced {
    inner: Arc<dyn Store>,
    labels: Labels,
    calls: AtomicU64,
}

impl Traced {
    /// How many store calls went through this wrapper so far.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Layer for Traced {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    async fn call<'a, T: Send + 'a>(&'a self, call: Call<'a>, run: BoxCall<'a, T>) -> Result<T> {
        let op = call.op.name();
        let span = tracing::debug_span!(
            "liveness.store",
            op,
            backend = self.inner.backend(),
            key = call.key.map(tracing::field::display),
            space = call.space.map(tracing::field::display),
            token = call.token.map(tracing::field::display),
            item = call.item.map(tracing::field::display),
            n = call.n,
        );
        let answer = run.instrument(span).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &answer {
            if let Some(kind) = error_kind(e) {
                self.labels
                    .counter(STORE_ERRORS_TOTAL, &[("op", op), ("kind", kind)])
                    .increment(1);
            }
        }
        answer
    }
}
