//! The scenario every server backend's "existing stores only" connect passes (the
//! config's `with_existing_only(true)`, what `liveness::connect_existing` uses): a
//! namespace that is not there is refused as bad input naming it, and looking creates
//! nothing; a namespace that a normal connect wrote to opens and reads what it holds.

use liveness_bench::fixtures::acquire_member;
use liveness_bench::fresh_namespace;
use liveness_core::{EnqueueOptions, Error, InputProblem, Result, Store, Ttl};

/// What [`only_a_namespace_that_is_there_opens`] hands the backend's own check that
/// the refusal wrote nothing.
pub struct Refusal {
    /// The namespace that is there: a normal connect wrote a lease and an item in it.
    pub held: String,
    /// The namespace that is not there, refused.
    pub missing: String,
    /// The refusal's message.
    pub message: String,
}

/// Runs the scenario on the server at `server_url` (a URL without `ns`), through
/// `connect(url, existing_only)`: the backend's connect with its config's
/// `with_existing_only(existing_only)`.
///
/// 1. A normal connect on a fresh namespace (`held`) takes a lease and enqueues an
///    item.
/// 2. An existing-only connect on another fresh namespace (`missing`) is refused with
///    [`Error::InvalidInput`] (`what: "namespace"`, [`InputProblem::BadValue`]) whose
///    message names `ns=<missing>`; and refused again, so the first look wrote
///    nothing that makes the namespace count as there.
/// 3. `wrote_nothing(&store, &refusal)`: the backend's own checks of the message and
///    of its storage (no schema, no key for `missing`).
/// 4. An existing-only connect on `held` opens and reads the lease and the item.
///
/// Returns the store of the normal connect (for a backend's clean-up).
///
/// # Panics
///
/// When a step does not hold: the test then fails, saying which.
pub async fn only_a_namespace_that_is_there_opens<S: Store>(
    server_url: &str,
    connect: impl AsyncFn(&str, bool) -> Result<S>,
    wrote_nothing: impl AsyncFn(&S, &Refusal),
) -> S {
    let url = |ns: &str| crate::with_query(server_url, &format!("ns={ns}"));
    let held = fresh_namespace().as_str().to_owned();
    let store = connect(&url(&held), false)
        .await
        .unwrap_or_else(|e| panic!("connect to {held}: {e}"));
    let lease = acquire_member(
        &store,
        "w",
        "h",
        Ttl::from_secs(60).unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    let id = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap_or_else(|e| panic!("enqueue in {held}: {e}"));

    let missing = fresh_namespace().as_str().to_owned();
    let mut message = String::new();
    for look in ["first", "second"] {
        let err = match connect(&url(&missing), true).await {
            Ok(_) => panic!("the {look} look opened {missing}, which is not there"),
            Err(err) => err,
        };
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "namespace",
                    problem: InputProblem::BadValue { .. }
                }
            ),
            "{look} look: {err:?}"
        );
        message = err.to_string();
        assert!(message.contains(&format!("ns={missing}")), "{message}");
    }
    let refusal = Refusal {
        held: held.clone(),
        missing,
        message,
    };
    wrote_nothing(&store, &refusal).await;

    let reader = connect(&url(&held), true)
        .await
        .unwrap_or_else(|e| panic!("existing-only connect to {held}: {e}"));
    let read = reader
        .inspect(&lease.key)
        .await
        .unwrap_or_else(|e| panic!("inspect in {held}: {e}"));
    assert_eq!(read.map(|l| l.token), Some(lease.token));
    let item = reader
        .item(id)
        .await
        .unwrap_or_else(|e| panic!("item in {held}: {e}"));
    assert!(item.is_some(), "item {id:?} of {held} not read");
    store
}
