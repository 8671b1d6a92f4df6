//! The dashboard over HTTP, on the memory store: what the page lists, how big and how
//! fast it is with 100,000 members, that it names no outside host and no password,
//! that it says when the store does not answer, and which actions it obeys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use liveness_core::layer::{Intercept, Next, Reply, Request as StoreRequest, StoreBuilder};
use liveness_core::{
    async_trait, Acquire, Checker, CheckerConfig, Error, HolderId, ItemId, ItemStateKind, Key,
    Member, MemberConfig, MemoryStore, Name, Page, Result, Space, Store, Ttl,
};
use liveness_dashboard::{redact_url, Actions, CheckerSource, CheckerState, Dashboard, Options};
use tower::ServiceExt;

const TOKEN: &str = "s3cret-token";

/// Sends one request; answers the status and the body.
async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

/// A POST from the page itself: same origin, with the given token.
fn post(path: &str, token: Option<&str>) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("host", "127.0.0.1:9464")
        .header("origin", "http://127.0.0.1:9464")
        .header("sec-fetch-site", "same-origin");
    if let Some(token) = token {
        req = req.header("x-liveness-token", token);
    }
    req.body(Body::empty()).unwrap()
}

/// Enqueues `n` items (`poison pill 0`, …) and dead-letters them through a member that
/// fails each.
async fn dead_letters(store: &Arc<dyn Store>, n: usize) -> Vec<u64> {
    liveness_testkit::fixtures::dead_letters(store, n, |i| format!("poison pill {i}")).await
}

fn options(actions: Actions) -> Options {
    Options {
        actions,
        store_description: redact_url("postgres://ops:hunter2@db.internal/live?ns=default"),
        ..Options::default()
    }
}

struct Fixed;

impl CheckerSource for Fixed {
    fn state(&self) -> CheckerState {
        CheckerState {
            healthy: false,
            summary: "store unreachable: rounds failing for 3.0s: boom".into(),
            last_round: Some(Duration::from_secs(4)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_members_deaths_and_dead_letters() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ttl = Ttl::from_secs(30).unwrap();
    let alive = Member::join(store.clone(), MemberConfig::new("alive-1", ttl).unwrap())
        .await
        .unwrap();
    let gone = Member::join(store.clone(), MemberConfig::new("gone-1", ttl).unwrap())
        .await
        .unwrap();
    gone.leave(Duration::ZERO).await.unwrap();
    let ids = dead_letters(&store, 2).await;
    let app = Dashboard::new(store.clone(), options(Actions::Off))
        .checker(Arc::new(Fixed))
        .router();

    let (status, page) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"data-name="alive-1""#), "{page}");
    assert!(page.contains(alive.lease().holder.as_str()), "{page}");
    // The member that left is in the deaths list, released, with its sweep.
    assert!(
        page.contains(r#"tr class="death" data-name="gone-1""#),
        "{page}"
    );
    assert!(page.contains("released"), "{page}");
    for id in &ids {
        assert!(page.contains(&format!(r#"data-id="{id}""#)), "{page}");
    }
    assert!(page.contains("poison pill 0"), "{page}");
    // Why each died: its failure's text.
    let why = liveness_testkit::fixtures::FAILER_ERROR;
    assert!(page.contains(&format!(r#"title="{why}">{why}<"#)), "{page}");
    assert!(page.contains("rounds failing for 3.0s: boom"), "{page}");
    assert!(page.contains("read-only"), "{page}");
    // Its URL shows, without the password.
    assert!(
        page.contains("postgres://ops:***@db.internal/live"),
        "{page}"
    );
    assert!(!page.contains("hunter2"), "{page}");

    // The live part alone, searched: only the matching member.
    let (status, part) = get(&app, "/parts?q=ALIVE").await;
    assert_eq!(status, StatusCode::OK);
    assert!(part.contains(r#"data-name="alive-1""#), "{part}");
    assert!(
        !part.contains(r#"tr class="member" data-name="failer""#),
        "{part}"
    );
    // Grouped by process: the holder without its nonce heads the group.
    let (_, grouped) = get(&app, "/parts?g=process").await;
    assert!(grouped.contains("process alive-1 · 1"), "{grouped}");
    alive.leave(Duration::ZERO).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_members_page_small_and_fast() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ttl = Ttl::from_secs(600).unwrap();
    let holder = HolderId::new("host-a/4242").unwrap();
    let batch = store.capabilities().max_batch;
    let asks: Vec<Acquire> = (0..100_000)
        .map(|i| {
            Acquire::new(
                Key::member(&format!("m{i:06}")).unwrap(),
                holder.clone(),
                ttl,
            )
        })
        .collect();
    for chunk in asks.chunks(batch) {
        for answer in store.acquire_many(chunk).await.unwrap() {
            answer.unwrap();
        }
    }
    let app = Dashboard::new(store.clone(), options(Actions::Off)).router();
    let started = Instant::now();
    let (status, page) = get(&app, "/").await;
    let elapsed = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    let (_, js) = get(&app, "/assets/app.js").await;
    let (_, css) = get(&app, "/assets/app.css").await;
    let total = page.len() + js.len() + css.len();
    println!(
        "page {} B + js {} B + css {} B = {total} B, served in {elapsed:?}",
        page.len(),
        js.len(),
        css.len()
    );
    assert!(total <= 150 * 1024, "{total} bytes");
    // One page of 50, and a link to the next.
    assert_eq!(page.matches(r#"tr class="member""#).count(), 50);
    assert!(page.contains("?m=m000049"), "the next page's link");
    let (_, next) = get(&app, "/parts?m=m000049").await;
    assert!(next.contains(r#"data-name="m000050""#));
    assert!(!next.contains(r#"data-name="m000049""#));
    // No outside host: nothing is loaded from anywhere but the page's own origin.
    for text in [&page, &js, &css] {
        for outside in ["http://", "https://", "//cdn", "@import"] {
            assert!(!text.contains(outside), "{outside} in {text}");
        }
    }
    // A search that matches nothing stops after a bounded read, offering to go on.
    let (_, none) = get(&app, "/parts?q=nobody").await;
    assert!(none.contains("read 2000 leases"), "{none}");
    assert!(none.contains("?q=nobody&amp;m=m001999"), "{none}");
}

/// Fails every store call while `down` is set.
#[derive(Debug, Default)]
struct Outage {
    down: AtomicBool,
}

#[async_trait]
impl Intercept for Outage {
    async fn call(&self, req: StoreRequest, next: Next) -> Result<Reply> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::unavailable("memory", "connection refused"));
        }
        next.run(req).await
    }
}

/// With items in named queues, the page counts each queue, and each item says its
/// queue; with the default queue alone, no queue table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_counts_each_queue() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let app = Dashboard::new(store.clone(), options(Actions::Off)).router();
    liveness_core::Queue::new(store.clone())
        .enqueue(b"d1")
        .await
        .unwrap();
    let (_, page) = get(&app, "/parts").await;
    assert!(!page.contains("id=\"queues\""), "{page}");
    let mail = liveness_core::Queue::named(store.clone(), "mail").unwrap();
    mail.enqueue_many(&[b"m1", b"m2"]).await.unwrap();
    let (status, page) = get(&app, "/parts").await;
    assert_eq!(status, StatusCode::OK);
    let table = &page[page.find("id=\"queues\"").expect("a queue table")..];
    let rows: Vec<&str> = table.split("data-queue=").skip(1).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(
        rows[0].starts_with("\"default\"") && rows[1].starts_with("\"mail\""),
        "{table}"
    );
    assert!(rows[1].contains(">2<"), "{}", rows[1]);
    let (_, page) = get(&app, "/parts?i=pending").await;
    assert!(
        page.contains("<td class=\"mono queue\">mail</td>"),
        "{page}"
    );
    // The memory store keeps item times: each row says how old its item is.
    let age = page
        .split("<td class=\"num age\">")
        .nth(1)
        .unwrap_or_default();
    let age = age.split("</td>").next().unwrap_or_default();
    let secs: f64 = age.trim_end_matches('s').parse().unwrap_or(f64::MAX);
    assert!(age.ends_with('s') && secs < 60.0, "{age}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_says_when_the_store_does_not_answer() {
    let outage = Arc::new(Outage::default());
    let store = StoreBuilder::new(Arc::new(MemoryStore::new()))
        .layer(outage.clone())
        .build();
    let app = Dashboard::new(store, options(Actions::Off)).router();
    let (_, up) = get(&app, "/parts").await;
    assert!(!up.contains("does not answer"), "{up}");
    outage.down.store(true, Ordering::SeqCst);
    let (status, down) = get(&app, "/parts").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        down.contains("The store does not answer: ") && down.contains("connection refused"),
        "{down}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_flag_the_token_and_the_own_origin() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ids = dead_letters(&store, 3).await;
    let retry = format!("/actions/retry/{}", ids[0]);

    // Read-only: refused even with a token.
    let read_only = Dashboard::new(store.clone(), options(Actions::Off)).router();
    let (status, body) = send(&read_only, post(&retry, Some(TOKEN))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("read-only"), "{body}");

    let app = Dashboard::new(store.clone(), options(Actions::Token(TOKEN.into()))).router();
    // No token, a wrong one, another origin, a cross-site fetch: 403, nothing moves.
    let (status, body) = send(&app, post(&retry, None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = send(&app, post(&retry, Some("guess"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let mut foreign = post(&retry, Some(TOKEN));
    foreign
        .headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    assert_eq!(send(&app, foreign).await.0, StatusCode::FORBIDDEN);
    let mut cross = post(&retry, Some(TOKEN));
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    assert_eq!(send(&app, cross).await.0, StatusCode::FORBIDDEN);
    // Never by GET.
    assert_eq!(get(&app, &retry).await.0, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(store.item_counts().await.unwrap().dead_lettered, 3);

    // With everything right: the item is pending again, attempts reset.
    let (status, body) = send(&app, post(&retry, Some(TOKEN))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let record = store
        .item(liveness_core::ItemId(ids[0]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state.kind(), ItemStateKind::Pending);
    assert_eq!(record.item.attempts, 0);
    // Again: not a dead letter any more.
    let (status, _) = send(&app, post(&retry, Some(TOKEN))).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, body) = send(&app, post("/actions/retry-all", Some(TOKEN))).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "2 items pending again")
    );
    let pending = store
        .items(ItemStateKind::Pending, Page::first(10))
        .await
        .unwrap();
    assert_eq!(pending.len(), 3);
    let (_, page) = get(&app, "/").await;
    assert!(page.contains(r#"id="token""#), "the token field: {page}");
    assert!(!page.contains(TOKEN), "the token never reaches the page");
}

/// Cancel removes a pending item and discards a dead letter, leaves an item a
/// worker runs to it (409), answers 404 for an unknown item, and, like every action,
/// needs the token; the page offers the buttons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_removes_a_pending_item_or_a_dead_letter_not_a_running_one() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let dead = dead_letters(&store, 1).await[0];
    let queue = liveness_core::Queue::new(store.clone());
    let pending = queue.enqueue(b"not yet").await.unwrap().0;
    let running = queue.enqueue(b"running").await.unwrap().0;
    let member = Member::join(
        store.clone(),
        MemberConfig::new("w", Ttl::from_secs(30).unwrap()).unwrap(),
    )
    .await
    .unwrap();
    let claimed = member.claim(2).await.unwrap();
    assert_eq!(claimed.len(), 2, "both pending items claimed");
    // Give one back, so that one is pending and one runs.
    let (back, run) = match claimed[0].item.id.0 == pending {
        true => (&claimed[0], &claimed[1]),
        false => (&claimed[1], &claimed[0]),
    };
    assert_eq!(run.item.id.0, running);
    member.fail(back, true).await.unwrap();

    let cancel = |id: u64| format!("/actions/cancel/{id}");
    let read_only = Dashboard::new(store.clone(), options(Actions::Off)).router();
    let (status, _) = send(&read_only, post(&cancel(pending), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let app = Dashboard::new(store.clone(), options(Actions::Token(TOKEN.into()))).router();
    let (status, _) = send(&app, post(&cancel(pending), None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no token");

    let (_, page) = get(&app, "/?i=pending").await;
    let button = |id: u64, what: &str| {
        format!(r#"button class="cancel" type="button" data-id="{id}" data-what="{what}""#)
    };
    let (_, dead_page) = get(&app, "/").await;
    assert!(page.contains(&button(pending, "cancel")), "{page}");
    assert!(dead_page.contains(&button(dead, "discard")), "{dead_page}");

    let (status, body) = send(&app, post(&cancel(pending), Some(TOKEN))).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, &*format!("item {pending} cancelled"))
    );
    let (status, body) = send(&app, post(&cancel(dead), Some(TOKEN))).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, &*format!("item {dead} discarded"))
    );
    let (status, body) = send(&app, post(&cancel(running), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("left to its worker"), "{body}");
    let (status, _) = send(&app, post(&cancel(pending), Some(TOKEN))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "gone already");
    assert_eq!(store.item(ItemId(pending)).await.unwrap(), None);
    assert_eq!(store.item(ItemId(dead)).await.unwrap(), None);
    assert!(store.item(ItemId(running)).await.unwrap().is_some());
    member.complete(run).await.unwrap();
    member.leave(Duration::ZERO).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_sample_deaths_renewals_and_delay() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let options = Options {
        sample_every: Duration::from_millis(100),
        ..Options::default()
    };
    let app = Dashboard::new(store.clone(), options).router();
    let config = MemberConfig::new("brief", Ttl::from_secs(30).unwrap()).unwrap();
    let member = Member::join(store.clone(), config).await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    member.leave(Duration::ZERO).await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, part) = get(&app, "/parts").await;
        if !part.contains("deaths per minute: <b>0.0") && part.contains("deaths per minute: <b>") {
            assert!(part.contains("<polyline"), "{part}");
            break;
        }
        assert!(Instant::now() < until, "no death in the chart: {part}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_listed_host_names_are_answered() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let options = Options {
        hosts: vec!["127.0.0.1".into(), "localhost".into()],
        ..Options::default()
    };
    let app = Dashboard::new(store, options).router();
    let with_host = |host: &'static str| {
        Request::get("/")
            .header("host", host)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&app, with_host("127.0.0.1:9464")).await.0,
        StatusCode::OK
    );
    assert_eq!(send(&app, with_host("localhost")).await.0, StatusCode::OK);
    // A DNS name rebound to the loopback address: not answered.
    let (status, _) = send(&app, with_host("rebound.example:9464")).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    let mut rebound = post("/actions/retry-all", Some(TOKEN));
    rebound
        .headers_mut()
        .insert("host", "rebound.example:9464".parse().unwrap());
    assert_eq!(send(&app, rebound).await.0, StatusCode::MISDIRECTED_REQUEST);
}

/// Where `needle` is in `page`, failing when it is not there.
fn at(page: &str, needle: &str) -> usize {
    page.find(needle)
        .unwrap_or_else(|| panic!("{needle} not in {page}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_group_by_session_and_a_session_death_counts_its_members() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ttl = Ttl::from_secs(30).unwrap();
    let holder = HolderId::new("host-a/4242").unwrap();
    let session_key = Key::new(Space::sessions(), Name::new("p-1").unwrap());
    let session = store.acquire(&session_key, &holder, ttl).await.unwrap();
    for name in ["w-1", "w-2"] {
        let key = Key::member(name).unwrap();
        store.join_session(&session, &key, &holder).await.unwrap();
    }
    // A lease of its own, first by name: listed after the session's members.
    let alone = Key::member("alpha").unwrap();
    store.acquire(&alone, &holder, ttl).await.unwrap();
    let app = Dashboard::new(store.clone(), Options::default()).router();

    let (status, page) = get(&app, "/parts").await;
    assert_eq!(status, StatusCode::OK);
    let head = at(&page, r#"<tr class="group session" data-session="p-1">"#);
    assert!(
        page[head..].contains("process p-1 · 2 members · "),
        "{page}"
    );
    let (w1, w2) = (
        at(&page, r#"data-name="w-1""#),
        at(&page, r#"data-name="w-2""#),
    );
    let own = at(&page, "own leases · 1 member");
    let alpha = at(&page, r#"data-name="alpha""#);
    assert!(head < w1 && w1 < w2 && w2 < own && own < alpha, "{page}");
    // The whole page offers the grouping, by session first.
    let (_, whole) = get(&app, "/").await;
    assert!(
        whole.contains(r#"<option value="" selected>by session"#),
        "{whole}"
    );
    // One list on request: no group rows, name order.
    let (_, flat) = get(&app, "/parts?g=none").await;
    assert!(!flat.contains(r#"class="group"#), "{flat}");
    assert!(at(&flat, r#"data-name="alpha""#) < at(&flat, r#"data-name="w-1""#));

    // The process dies: one death record, counting its members once swept.
    assert!(store.release(&session).await.unwrap());
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        checker.round().await.unwrap();
        let (_, part) = get(&app, "/parts").await;
        if part.contains(r#"data-members="2""#) {
            assert!(part.contains("process p-1: 2 members"), "{part}");
            assert_eq!(part.matches(r#"tr class="death""#).count(), 1, "{part}");
            break;
        }
        assert!(
            Instant::now() < until,
            "no count on the session's death: {part}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Embedded in a process without a checker, the page says when expired leases wait to
/// be reaped: if they stay, no checker runs in the fleet. Beside a checker it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_checker_the_page_points_at_unreaped_leases() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let app = Dashboard::new(store.clone(), options(Actions::Off)).router();
    let (_, page) = get(&app, "/").await;
    assert!(page.contains("No checker runs in this process."), "{page}");
    assert!(!page.contains("not yet reaped"), "{page}");

    let ttl = Ttl::from_millis(100).unwrap();
    let dead = Member::join(store.clone(), MemberConfig::new("dead-1", ttl).unwrap())
        .await
        .unwrap();
    dead.orphan();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, page) = get(&app, "/").await;
    assert!(page.contains("1 expired lease not yet reaped"), "{page}");

    let checked = Dashboard::new(store.clone(), options(Actions::Off))
        .checker(Arc::new(Fixed))
        .router();
    let (_, page) = get(&checked, "/").await;
    assert!(!page.contains("not yet reaped"), "{page}");
}

/// With a role held, the page says who holds it and under which token; with none,
/// no leaders table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_says_who_holds_each_role() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let app = Dashboard::new(store.clone(), options(Actions::Off)).router();
    let (_, page) = get(&app, "/parts").await;
    assert!(!page.contains("id=\"leaders\""), "{page}");
    let role = Key::new(Space::leaders(), Name::new("dispatcher").unwrap());
    let holder = HolderId::new("node-7").unwrap();
    let lease = store
        .acquire(&role, &holder, Ttl::from_secs(60).unwrap())
        .await
        .unwrap();
    let (status, page) = get(&app, "/parts").await;
    assert_eq!(status, StatusCode::OK);
    let table = &page[page.find("id=\"leaders\"").expect("a leaders table")..];
    let row = table
        .split("data-role=\"dispatcher\"")
        .nth(1)
        .expect("the role's row");
    let row = row.split("</tr>").next().unwrap_or_default();
    assert!(row.contains("node-7"), "{row}");
    assert!(row.contains(&format!(">{}<", lease.token.0)), "{row}");
}
