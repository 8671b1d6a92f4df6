//! A store layer that gives every store call a `tracing` span, counts the calls and
//! records the failed ones in [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
//! The state machines put the store they are given behind it, so every call they make
//! is checked ([`CheckInput`](crate::CheckInput)), traced and counted: by this one
//! layer, which makes the checks itself unless the store is behind them already.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::checked::CheckInput;
use crate::error::Result;
use crate::layer::{Intercept, Intercepted, Next, Reply, Request};
use crate::metrics::{error_kind, Labels, STORE_ERRORS_TOTAL};
use crate::store::Store;

/// `store` behind a [`Traced`] layer that also makes the checks of
/// [`CheckInput`](crate::CheckInput) when the store is not behind them already: the
/// form in which the state machines use a store. One layer, so a call is built into a
/// request once.
pub(crate) fn traced(store: Arc<dyn Store>) -> Arc<Intercepted<Traced>> {
    let hook = Arc::new(Traced {
        labels: Labels::of(&*store),
        calls: AtomicU64::new(0),
        check: !store.checks_input(),
    });
    Arc::new(Intercepted::new(store, hook))
}

/// A layer whose every call runs inside a `liveness.store` span carrying the
/// operation, the backend and, where the call has them, the key, the space, the
/// token, the item and the batch size; and whose failed calls are counted in
/// [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
#[derive(Debug)]
pub struct Traced {
    labels: Labels,
    calls: AtomicU64,
    /// Makes the input checks before a call goes on (the store below does not).
    check: bool,
}

impl Traced {
    /// How many store calls went through this layer so far.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Intercept for Traced {
    fn checks_input(&self) -> bool {
        self.check
    }

    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let op = req.op().name();
        let span = tracing::debug_span!(
            "liveness.store",
            op,
            backend = next.store().backend(),
            key = req.key().map(tracing::field::display),
            space = req.space().map(tracing::field::display),
            token = req.token().map(tracing::field::display),
            item = req.item().map(tracing::field::display),
            n = req.n(),
        );
        let answer = match self.check {
            true => CheckInput.call(req, next).instrument(span).await,
            false => next.run(req).instrument(span).await,
        };
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
