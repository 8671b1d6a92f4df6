//! The actions: retry one dead letter, or all of them; cancel a pending item or discard
//! a dead letter. Each is a `POST` obeyed only
//! when actions are on, the request carries the access token in `X-Liveness-Token`,
//! and it comes from the dashboard's own origin (`Sec-Fetch-Site`, `Origin`); any
//! other answers 403 with the reason.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use liveness_core::{Error, ItemId, ItemState};
use subtle::ConstantTimeEq;

use crate::data::within;
use crate::{Actions, Shared};

/// The header that carries the access token.
pub(crate) const TOKEN_HEADER: &str = "x-liveness-token";

/// At most this many `retry_dead_letters` calls per "retry all" (each moves up to the
/// store's `max_batch`); the operator presses again for more.
const MAX_RETRY_CALLS: usize = 100;

type Answer = (StatusCode, String);

fn refuse(why: &str) -> Answer {
    (StatusCode::FORBIDDEN, format!("refused: {why}"))
}

/// Ok when the request may act; the 403 answer otherwise.
pub(crate) fn allowed(actions: &Actions, headers: &HeaderMap) -> Result<(), Answer> {
    let Actions::Token(token) = actions else {
        return Err(refuse(
            "this dashboard is read-only (start it with --allow-actions and an access token)",
        ));
    };
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(refuse("a cross-site request"));
        }
    }
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        let host = text(header::HOST.as_str()).unwrap_or_default();
        let own = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if own != Some(host) || host.is_empty() {
            return Err(refuse("a request from another origin"));
        }
    }
    match text(TOKEN_HEADER).filter(|given| !given.is_empty()) {
        // In time independent of where the two differ (only of their lengths).
        Some(given)
            if !token.is_empty() && bool::from(given.as_bytes().ct_eq(token.as_bytes())) =>
        {
            Ok(())
        }
        Some(_) => Err(refuse("wrong access token")),
        None => Err(refuse("no access token (enter it at the top of the page)")),
    }
}

/// What an action's store `call` on item `id` answered, once the request may act.
/// A refused request (403), the store's silence within the timeout or its fault
/// (503) and its refusal of the input (409) are answers already; `Ok` holds the
/// call's own. The call runs only when the request may act.
async fn act_on<T>(
    shared: &Shared,
    headers: &HeaderMap,
    id: u64,
    call: impl Future<Output = liveness_core::Result<T>>,
) -> Result<T, Answer> {
    allowed(&shared.options.actions, headers)?;
    match tokio::time::timeout(shared.options.timeout, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e @ Error::InvalidInput { .. })) => {
            Err((StatusCode::CONFLICT, format!("item {id}: {e}")))
        }
        Ok(Err(e)) => Err((StatusCode::SERVICE_UNAVAILABLE, format!("item {id}: {e}"))),
        Err(_) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the store did not answer".to_string(),
        )),
    }
}

/// `POST /actions/retry/{id}`: one dead letter back to pending.
pub(crate) async fn retry_one(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Answer {
    let call = shared.store.retry_dead_letter(ItemId(id));
    match act_on(&shared, &headers, id, call).await {
        Ok(()) => {
            tracing::info!(item = id, "dashboard: dead letter retried");
            (StatusCode::OK, format!("item {id} is pending again"))
        }
        Err(answer) => answer,
    }
}

/// `POST /actions/cancel/{id}`: a pending (or scheduled) item removed before anybody
/// runs it, or a dead letter discarded (`OperatorStore::cancel`). An item a worker
/// runs is left to it (409, naming its owner); an unknown one answers 404.
pub(crate) async fn cancel_one(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Answer {
    let call = shared.store.cancel(ItemId(id));
    match act_on(&shared, &headers, id, call).await {
        Ok(Some(ItemState::Pending)) => {
            tracing::info!(item = id, "dashboard: pending item cancelled");
            (StatusCode::OK, format!("item {id} cancelled"))
        }
        Ok(Some(ItemState::DeadLettered)) => {
            tracing::info!(item = id, "dashboard: dead letter discarded");
            (StatusCode::OK, format!("item {id} discarded"))
        }
        Ok(Some(ItemState::Owned(token))) => (
            StatusCode::CONFLICT,
            format!("item {id} is running under token {token}: left to its worker"),
        ),
        Ok(None) => (StatusCode::NOT_FOUND, format!("no item {id}")),
        Err(answer) => answer,
    }
}

/// `POST /actions/retry-all`: every dead letter back to pending.
pub(crate) async fn retry_all(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Answer {
    if let Err(refused) = allowed(&shared.options.actions, &headers) {
        return refused;
    }
    let t = shared.options.timeout;
    let limit = shared.store.capabilities().max_batch.max(1);
    let mut moved = 0usize;
    for _ in 0..MAX_RETRY_CALLS {
        match within(t, shared.store.retry_dead_letters(limit)).await {
            Ok(ids) if ids.is_empty() => break,
            Ok(ids) => moved += ids.len(),
            Err(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{moved} items pending again, then: {e}"),
                )
            }
        }
    }
    tracing::info!(items = moved, "dashboard: dead letters retried");
    (StatusCode::OK, format!("{moved} items pending again"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_same_origin_requests_with_the_token_act() {
        let on = Actions::Token("t0ken".into());
        let good = [("host", "127.0.0.1:9"), (TOKEN_HEADER, "t0ken")];
        assert!(allowed(&on, &headers(&good)).is_ok());
        assert!(allowed(&Actions::Off, &headers(&good)).is_err());
        assert!(allowed(&on, &headers(&[(TOKEN_HEADER, "nope")])).is_err());
        assert!(allowed(&on, &headers(&[("host", "127.0.0.1:9")])).is_err());
        let cross = [
            ("host", "127.0.0.1:9"),
            (TOKEN_HEADER, "t0ken"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert!(allowed(&on, &headers(&cross)).is_err());
        let other = [
            ("host", "127.0.0.1:9"),
            (TOKEN_HEADER, "t0ken"),
            ("origin", "http://evil.example"),
        ];
        assert!(allowed(&on, &headers(&other)).is_err());
        let own = [
            ("host", "127.0.0.1:9"),
            (TOKEN_HEADER, "t0ken"),
            ("origin", "http://127.0.0.1:9"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(allowed(&on, &headers(&own)).is_ok());
        // A wrong token of the same length, a prefix and a longer one are refused.
        for wrong in ["t0keN", "t0ke", "t0kens"] {
            let given = [("host", "127.0.0.1:9"), (TOKEN_HEADER, wrong)];
            assert!(allowed(&on, &headers(&given)).is_err(), "{wrong}");
        }
        // An empty configured token never matches.
        let empty = Actions::Token(String::new());
        assert!(allowed(&empty, &headers(&[(TOKEN_HEADER, "")])).is_err());
    }
}
