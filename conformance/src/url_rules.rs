//! The URL rules of [`liveness_core::url`], as one table run against every store's
//! parser (and its `connect`).
//!
//! The table is built from the store's own [`UrlForm`]: every parameter it declares is
//! tried misspelt, repeated, empty and with values outside its kind (numbers past each
//! end of the range, `4294967295`, `2147483648`, a sign, a decimal point, a word; a
//! word or flag that is not listed), plus the rules every store shares (an unknown
//! parameter, `namespace=` and `NS=` for `ns`, `ns=a&ns=b`, a bad namespace, another
//! scheme, a fragment, and no host where the form needs one). Each case must be
//! refused with [`Error::InvalidInput`] naming the parameter, by the parser alone.
//!
//! ```
//! use liveness_core::url::{Authority, Param, UrlForm};
//! use liveness_core::Result;
//!
//! const FORM: UrlForm = UrlForm {
//!     schemes: &["mystore"],
//!     authority: Authority::OneHost,
//!     params: &[Param::number("pool", 1, 64)],
//!     fragments: &[],
//!     expected: "mystore://HOST?ns=NAME&pool=N",
//! };
//! fn from_url(url: &str) -> Result<()> {
//!     FORM.parse(url).map(|_| ())
//! }
//! liveness_conformance::url_rules::check(&FORM, "mystore://127.0.0.1:1", from_url);
//! ```

use std::future::Future;

/// Expands into the two URL-rule tests of a store whose `connect` talks to a server:
/// `every_url_rule` ([`check`] on `from_url`) and `connect_refuses_every_bad_url`
/// ([`check_connect`] on `connect`, a 60 s deadline turning a hang into a failure).
/// `base` should name a port nothing listens on, so a connection attempt could not
/// pass for a refusal. Needs `tokio` (with `macros`) in the calling crate.
///
/// ```ignore
/// liveness_conformance::url_suite!(liveness_redis::URL, "redis://127.0.0.1:1",
///     liveness_redis::RedisConfig::from_url, liveness_redis::connect);
/// ```
#[macro_export]
macro_rules! url_suite {
    ($form:expr, $base:expr, $from_url:path, $connect:path) => {
        #[test]
        fn every_url_rule() {
            $crate::url_rules::check(&$form, $base, $from_url);
        }

        #[tokio::test]
        async fn connect_refuses_every_bad_url() {
            let deadline = ::std::time::Duration::from_secs(60);
            $crate::url_rules::check_connect(&$form, $base, deadline, |url: String| async move {
                $connect(&url).await
            })
            .await;
        }
    };
}
use std::time::Duration;

use liveness_core::url::{Authority, Kind, Param, UrlForm, NAMESPACE};
use liveness_core::{Error, InputProblem, Result};

/// What a [`BadUrl`] must be refused with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// [`InputProblem::UnknownScheme`].
    UnknownScheme,
    /// [`InputProblem::UnknownParameter`] with this name.
    Unknown(String),
    /// [`InputProblem::RepeatedParameter`] with this name.
    Repeated(&'static str),
    /// [`InputProblem::EmptyParameter`] with this name.
    Empty(&'static str),
    /// [`InputProblem::OutOfRange`] with this name.
    OutOfRange(&'static str),
    /// [`InputProblem::BadValue`] with this name.
    BadValue(&'static str),
    /// The namespace's own error (`what: "namespace"`).
    Namespace,
    /// [`InputProblem::Malformed`].
    Malformed,
}

impl Expect {
    /// Whether `error` is the one expected.
    pub fn matches(&self, error: &Error) -> bool {
        use InputProblem as P;
        let Error::InvalidInput { what, problem } = error else {
            return false;
        };
        match (self, problem) {
            (Expect::Namespace, _) => *what == "namespace",
            (Expect::UnknownScheme, P::UnknownScheme { .. })
            | (Expect::Malformed, P::Malformed { .. }) => *what == "url",
            (Expect::Unknown(want), P::UnknownParameter { name, .. }) => name == want,
            (Expect::Repeated(want), P::RepeatedParameter { name })
            | (Expect::Empty(want), P::EmptyParameter { name }) => name == want,
            (Expect::OutOfRange(want), P::OutOfRange { name, .. })
            | (Expect::BadValue(want), P::BadValue { name, .. }) => name == want,
            _ => false,
        }
    }
}

/// One URL a store must refuse, the rule it breaks, and the error expected.
#[derive(Clone, Debug)]
pub struct BadUrl {
    /// The rule, in words.
    pub rule: &'static str,
    /// The URL.
    pub url: String,
    /// The error it must get.
    pub expect: Expect,
}

/// A valid value of `param`, for the cases that need one.
fn sample(param: Param) -> String {
    match param.kind {
        Kind::Number { min, .. } => min.to_string(),
        Kind::Word(words) => words.first().copied().unwrap_or("x").to_owned(),
        Kind::Flag => "true".to_owned(),
        Kind::Text => "x".to_owned(),
        Kind::Namespace => "a".to_owned(),
    }
}

/// Every URL the rules say `form` must refuse, built on `base` (a valid URL of the
/// form without query or fragment, e.g. `redis://127.0.0.1:1`).
pub fn bad_urls(form: &UrlForm, base: &str) -> Vec<BadUrl> {
    let mut out = Vec::new();
    let mut add = |rule, query: String, expect| {
        out.push(BadUrl {
            rule,
            url: format!("{base}?{query}"),
            expect,
        })
    };
    add(
        "unknown parameter",
        "nosuch=1".into(),
        Expect::Unknown("nosuch".into()),
    );
    add(
        "misspelt namespace",
        "namespace=typo".into(),
        Expect::Unknown("namespace".into()),
    );
    add(
        "names are case-sensitive",
        "NS=x".into(),
        Expect::Unknown("NS".into()),
    );
    add("invalid namespace", "ns=Bad-Name".into(), Expect::Namespace);
    add(
        "repeated namespace",
        "ns=a&ns=b".into(),
        Expect::Repeated("ns"),
    );
    let params = std::iter::once(NAMESPACE).chain(form.params.iter().copied());
    for param in params {
        let name = param.name;
        let upper = name.to_ascii_uppercase();
        if upper != name {
            add(
                "names are case-sensitive",
                format!("{upper}={}", sample(param)),
                Expect::Unknown(upper),
            );
        }
        let value = sample(param);
        add(
            "repeated parameter",
            format!("{name}={value}&{name}={value}"),
            Expect::Repeated(name),
        );
        add("empty value", format!("{name}="), Expect::Empty(name));
        add("no value", name.to_owned(), Expect::Empty(name));
        match param.kind {
            Kind::Number { min, max } => {
                let mut values: Vec<String> = vec![
                    "18446744073709551616".into(),
                    "-1".into(),
                    "+1".into(),
                    "1.5".into(),
                    "%201".into(),
                    "1e3".into(),
                    "soon".into(),
                ];
                if min > 0 {
                    values.push((min - 1).to_string());
                }
                if let Some(above) = max.checked_add(1) {
                    values.push(above.to_string());
                }
                for big in [u64::from(u32::MAX), 1 << 31] {
                    if big > max {
                        values.push(big.to_string());
                    }
                }
                for v in values {
                    add(
                        "not a whole number in range",
                        format!("{name}={v}"),
                        Expect::OutOfRange(name),
                    );
                }
            }
            Kind::Word(_) | Kind::Flag => add(
                "not one of the listed words",
                format!("{name}=bogus"),
                Expect::BadValue(name),
            ),
            Kind::Text | Kind::Namespace => {}
        }
    }
    let (scheme, rest) = base.split_once(':').unwrap_or((base, ""));
    out.push(BadUrl {
        rule: "unknown scheme",
        url: format!("nosuch:{rest}"),
        expect: Expect::UnknownScheme,
    });
    if !form.fragments.contains(&"frag") {
        out.push(BadUrl {
            rule: "unlisted fragment",
            url: format!("{base}#frag"),
            expect: Expect::Malformed,
        });
    }
    if form.authority != Authority::Path {
        for url in [
            format!("{scheme}://?ns=a"),
            format!("{scheme}:///x?ns=a"),
            format!("{scheme}://"),
            format!("{scheme}:"),
        ] {
            out.push(BadUrl {
                rule: "no host",
                url,
                expect: Expect::Malformed,
            });
        }
    }
    out
}

/// The URLs the rules say `form` must accept: `base` alone, with `ns`, and with each
/// number parameter at both ends of its range and each word or flag at every value.
pub fn good_urls(form: &UrlForm, base: &str) -> Vec<String> {
    let mut out = vec![base.to_owned(), format!("{base}?ns=url_rules")];
    for param in form.params {
        let values: Vec<String> = match param.kind {
            Kind::Number { min, max } => vec![min.to_string(), max.to_string()],
            Kind::Word(words) => words.iter().map(|w| (*w).to_owned()).collect(),
            Kind::Flag => vec!["true".into(), "false".into()],
            Kind::Text | Kind::Namespace => Vec::new(),
        };
        for v in values {
            out.push(format!("{base}?{}={v}", param.name));
        }
    }
    out
}

/// Asserts that `parse` refuses `url` with the error `expect` describes.
pub fn refused<T: std::fmt::Debug>(parse: impl Fn(&str) -> Result<T>, url: &str, expect: Expect) {
    match parse(url) {
        Err(e) if expect.matches(&e) => {}
        other => panic!("{url}: expected {expect:?}, got {other:?}"),
    }
}

/// Runs every rule against a store's URL parser `parse` (its `from_url`): each of
/// [`good_urls`] must parse and each of [`bad_urls`] must be refused as expected.
/// Panics listing every case that broke a rule.
pub fn check<T>(form: &UrlForm, base: &str, parse: impl Fn(&str) -> Result<T>) {
    let mut broken = Vec::new();
    for url in good_urls(form, base) {
        if let Err(e) = parse(&url) {
            broken.push(format!("{url}: refused a valid URL: {e}"));
        }
    }
    for bad in bad_urls(form, base) {
        match parse(&bad.url) {
            Ok(_) => broken.push(format!("{} ({}): accepted", bad.url, bad.rule)),
            Err(e) if !bad.expect.matches(&e) => broken.push(format!(
                "{} ({}): expected {:?}, got {e:?}",
                bad.url, bad.rule, bad.expect
            )),
            Err(_) => {}
        }
    }
    assert!(
        broken.is_empty(),
        "URL rules broken:\n{}",
        broken.join("\n")
    );
}

/// Runs every one of [`bad_urls`] through a store's `connect`: each must be refused
/// with the error expected, before anything is opened or any connection is attempted.
/// `deadline` only turns a hang into a failure (it is not a timing assertion): a
/// refusal by the parser takes microseconds. Panics listing every broken case.
pub async fn check_connect<T, F, Fut>(form: &UrlForm, base: &str, deadline: Duration, connect: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut broken = Vec::new();
    for bad in bad_urls(form, base) {
        match tokio::time::timeout(deadline, connect(bad.url.clone())).await {
            Err(_) => broken.push(format!("{} ({}): connect hung", bad.url, bad.rule)),
            Ok(Ok(_)) => broken.push(format!("{} ({}): connected", bad.url, bad.rule)),
            Ok(Err(e)) if !bad.expect.matches(&e) => broken.push(format!(
                "{} ({}): expected {:?}, got {e:?}",
                bad.url, bad.rule, bad.expect
            )),
            Ok(Err(_)) => {}
        }
    }
    assert!(
        broken.is_empty(),
        "URL rules broken:\n{}",
        broken.join("\n")
    );
}
