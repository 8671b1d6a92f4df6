//! A store wrapper that gives every store call a `tracing` span. The state machines
//! wrap the store they are given with it, so every call they make is traced.

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::Result;
use crate::layer::{BoxCall, Call, Layer};
use crate::store::Store;

/// Wraps `store` in a [`Traced`].
pub(crate) fn traced(store: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(Traced { inner: store })
}

/// A store whose every call runs inside a `liveness.store` span carrying the
/// operation, the backend and, where the call has them, the key, the token, the item
/// and the batch size.
#[derive(Debug)]
pub struct Traced {
    inner: Arc<dyn Store>,
}

#[async_trait]
impl Layer for Traced {
    fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    async fn call<'a, T: Send + 'a>(&'a self, call: Call<'a>, run: BoxCall<'a, T>) -> Result<T> {
        let span = tracing::debug_span!(
            "liveness.store",
            op = call.op.name(),
            backend = self.inner.backend(),
            key = call.key.map(tracing::field::display),
            space = call.space.map(tracing::field::display),
            token = call.token.map(tracing::field::display),
            item = call.item.map(tracing::field::display),
            n = call.n,
        );
        run.instrument(span).await
    }
}
