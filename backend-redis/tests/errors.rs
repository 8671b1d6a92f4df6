//! A failure's error text on the server: the field `e` of the item's own hash,
//! written by the one `finish` script (one `EVALSHA`) byte for byte, and gone with the
//! hash: a completed or cancelled item leaves no key behind. A failure without text
//! and a sweep's requeue leave it as it was.

use liveness_core::{
    EnqueueOptions, HolderId, ItemId, ItemState, ItemStore, Key, LeaseStore, OperatorStore,
    Outcome, Store, Ttl,
};

mod common;
use common::{calls, fresh};

/// The field `e` of item `id`'s hash, as the server holds it.
async fn field(
    conn: &mut redis::aio::MultiplexedConnection,
    ns: &str,
    id: ItemId,
) -> Option<Vec<u8>> {
    redis::cmd("HGET")
        .arg(format!("liveness:{{{ns}}}:i:{}", id.0))
        .arg("e")
        .query_async(conn)
        .await
        .unwrap()
}

/// The item hashes of namespace `ns` on the server, sorted.
async fn item_keys(conn: &mut redis::aio::MultiplexedConnection, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("liveness:{{{ns}}}:i:*"))
        .query_async(conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_s_text_lives_and_dies_with_its_item_hash() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    assert!(store.capabilities().error_text);
    let ns = store.namespace().as_str().to_owned();
    let options = EnqueueOptions::default().max_attempts(5);
    let ids = store
        .enqueue_many(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], options)
        .await
        .unwrap();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let holder = HolderId::new("w").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let lease = store
        .acquire(&Key::member("w").unwrap(), &holder, ttl)
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 3).await.unwrap().len(), 3);

    // One script, the text as sent: a NUL, quotes, a newline, a backslash, a Lua
    // escape and characters beyond ASCII.
    let text = "nul \0 \"quoted\"\nback\\slash %s \\x41 ünï ✓";
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    let r = store
        .finish_with_error(&lease, a, Outcome::RETRY, text)
        .await;
    assert_eq!(r.unwrap(), Some(ItemState::Pending));
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(
        field(&mut conn, &ns, a).await.as_deref(),
        Some(text.as_bytes())
    );
    let record = store.item(a).await.unwrap().unwrap();
    assert_eq!(record.last_error.as_deref(), Some(text));

    // A failure without text writes no field.
    let r = store.finish(&lease, b, Outcome::DeadLetter).await;
    assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
    assert_eq!(field(&mut conn, &ns, b).await, None);
    assert_eq!(store.item(b).await.unwrap().unwrap().last_error, None);

    // A dead letter cancelled with its text: the hash goes, the text with it.
    let r = store
        .finish_with_error(&lease, c, Outcome::DeadLetter, "gave up")
        .await;
    assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
    assert_eq!(
        field(&mut conn, &ns, c).await.as_deref(),
        Some(&b"gave up"[..])
    );
    assert_eq!(
        store.cancel(c).await.unwrap(),
        Some(ItemState::DeadLettered)
    );
    assert_eq!(field(&mut conn, &ns, c).await, None);

    // A requeue after its owner's death keeps the text.
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, a);
    assert!(store.release(&lease).await.unwrap());
    let swept = store.sweep(lease.token).await.unwrap();
    assert_eq!(swept.requeued, [a]);
    assert_eq!(
        field(&mut conn, &ns, a).await.as_deref(),
        Some(text.as_bytes())
    );

    // A completed item leaves no key behind, whatever text came with it.
    let lease = store
        .acquire(&Key::member("w").unwrap(), &holder, ttl)
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, a);
    let r = store
        .finish_with_error(&lease, a, Outcome::Completed, "ignored")
        .await;
    assert_eq!(r.unwrap(), None);
    assert_eq!(
        item_keys(&mut conn, &ns).await,
        [format!("liveness:{{{ns}}}:i:{}", b.0)],
        "only the text-less dead letter is left"
    );
    assert_eq!(store.item_counts().await.unwrap().dead_lettered, 1);
}
