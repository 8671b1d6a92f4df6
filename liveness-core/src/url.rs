//! The one URL parser every store uses, so that the same mistake gets the same error
//! from every backend (and from a custom store that uses it).
//!
//! A store declares its URL once, as a [`UrlForm`]: its schemes, whether it names
//! hosts or a path, and the query parameters it takes beyond the [`NAMESPACE`] every
//! store takes, each with its [`Kind`] and range. [`UrlForm::parse`] then splits the
//! URL strictly and checks **every** parameter before the store opens anything:
//!
//! - a scheme the form does not list: [`InputProblem::UnknownScheme`];
//! - a parameter the form does not declare (names are case-sensitive, so `NS=x` is
//!   not `ns=x`): [`InputProblem::UnknownParameter`];
//! - a parameter given twice: [`InputProblem::RepeatedParameter`];
//! - a parameter without a value (`ns=` or `ns`): [`InputProblem::EmptyParameter`];
//! - a number that is not plain ASCII digits, or is outside its range:
//!   [`InputProblem::OutOfRange`];
//! - a word not among the listed ones, a flag other than `true` / `false`:
//!   [`InputProblem::BadValue`];
//! - an invalid `ns` (anything but 1 to 48 of `a-z`, `0-9`, `_`, `-`): the
//!   [`Namespace`]'s own error (`what: "namespace"`);
//! - anything else that does not fit the form (a missing host, a bad port, a bad
//!   percent escape, a fragment the form does not list): [`InputProblem::Malformed`]
//!   with the form's `expected` text, or [`InputProblem::OutOfRange`] for a port.
//!
//! Every error is [`Error::InvalidInput`] with `what: "url"` (or `"namespace"`) and
//! names the offending parameter. Values are percent-decoded (`%20` is a space; `+` is
//! a plus sign).
//!
//! ```
//! use std::time::Duration;
//! use liveness_core::url::{Authority, Param, UrlForm};
//! use liveness_core::{Error, InputProblem};
//!
//! const POOL: Param = Param::number("pool", 1, 64);
//! const TIMEOUT: Param = Param::timeout_ms("timeout_ms");
//! const FORM: UrlForm = UrlForm {
//!     schemes: &["mystore"],
//!     authority: Authority::OneHost,
//!     params: &[POOL, TIMEOUT],
//!     fragments: &[],
//!     expected: "mystore://HOST[:PORT][?ns=NAME&pool=N&timeout_ms=N]",
//! };
//!
//! let url = FORM.parse("mystore://db.example:7000?ns=jobs&pool=8").unwrap();
//! assert_eq!(url.hosts()[0].name, "db.example");
//! assert_eq!(url.hosts()[0].port, Some(7000));
//! assert_eq!(url.namespace().unwrap().as_str(), "jobs");
//! assert_eq!(url.number::<u32>(POOL).unwrap(), Some(8));
//! assert_eq!(url.millis(TIMEOUT).unwrap(), None); // not given: the store's default
//!
//! assert!(matches!(
//!     FORM.parse("mystore://h?pool=4294967295"),
//!     Err(Error::InvalidInput {
//!         what: "url",
//!         problem: InputProblem::OutOfRange { name: "pool", min: 1, max: 64, .. }
//!     })
//! ));
//! assert!(matches!(
//!     FORM.parse("mystore://h?NS=x"),
//!     Err(Error::InvalidInput { problem: InputProblem::UnknownParameter { .. }, .. })
//! ));
//! assert!(matches!(
//!     FORM.parse("mystore://h?ns=a&ns=b"),
//!     Err(Error::InvalidInput { problem: InputProblem::RepeatedParameter { .. }, .. })
//! ));
//! ```

use std::net::Ipv6Addr;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::error::{Error, InputProblem, Result};
use crate::types::Namespace;

/// The longest timeout any store accepts in a URL: 10 minutes, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// The namespace parameter every store takes: `ns=NAME`, default `default`
/// ([`StoreUrl::namespace`]). `NAME` is 1 to 48 ASCII lowercase letters, digits, `_`
/// and `-` (`ns=my-app`), as [`Namespace`] requires.
pub const NAMESPACE: Param = Param {
    name: "ns",
    kind: Kind::Namespace,
};

/// The namespace a URL without `ns` selects.
pub const DEFAULT_NAMESPACE: &str = "default";

/// What values a URL parameter takes. [`UrlForm::parse`] checks them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole number in `min..=max`, written in plain ASCII digits (no sign, no
    /// spaces, no decimal point).
    Number {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// One of these words (ASCII case ignored); [`StoreUrl::word`] gives the listed
    /// spelling.
    Word(&'static [&'static str]),
    /// `true` or `false` (also `on` / `off`, `1` / `0`).
    Flag,
    /// Any text (a file path, a name); the store checks it further.
    Text,
    /// A [`Namespace`].
    Namespace,
}

/// `key_retention_s`: how long, in seconds, a store with a clock keeps an enqueue's
/// idempotency key (1 s to 366 days; default
/// [`DEFAULT_KEY_RETENTION`](crate::DEFAULT_KEY_RETENTION)). Every store that counts
/// the retention takes it; read it with [`StoreUrl::key_retention`].
pub const KEY_RETENTION: Param = Param::number("key_retention_s", 1, 366 * 24 * 3600);

/// The shortest key retention a store takes: the URL's lower bound, 1 s.
pub const MIN_KEY_RETENTION: Duration = Duration::from_secs(1);

/// The longest key retention a store takes: the URL's upper bound, 366 days.
pub const MAX_KEY_RETENTION: Duration = Duration::from_secs(366 * 24 * 3600);

/// `retention` when a store takes it as its key retention (from
/// [`MIN_KEY_RETENTION`] to [`MAX_KEY_RETENTION`], the URL's range): what each
/// store's `with_key_retention` checks, so that a builder and a URL agree.
/// `InvalidInput` naming `key_retention` otherwise.
///
/// ```
/// use std::time::Duration;
/// use liveness_core::url::check_key_retention;
/// assert!(check_key_retention(Duration::from_secs(60)).is_ok());
/// assert!(check_key_retention(Duration::from_millis(999)).is_err());
/// ```
pub fn check_key_retention(retention: Duration) -> Result<Duration> {
    check_retention("key_retention", retention)
}

/// `dead_letter_retention_s`: how long, in seconds, a store with a clock keeps a dead
/// letter (1 s to 366 days; default
/// [`DEFAULT_DEAD_LETTER_RETENTION`](crate::DEFAULT_DEAD_LETTER_RETENTION)). Every
/// store that counts the retention takes it; read it with
/// [`StoreUrl::dead_letter_retention`].
pub const DEAD_LETTER_RETENTION: Param =
    Param::number("dead_letter_retention_s", 1, 366 * 24 * 3600);

/// `retention` when a store takes it as its dead-letter retention (the same range as
/// the key retention's, [`MIN_KEY_RETENTION`] to [`MAX_KEY_RETENTION`]): what each
/// store's `with_dead_letter_retention` checks. `InvalidInput` naming
/// `dead_letter_retention` otherwise.
///
/// ```
/// use std::time::Duration;
/// use liveness_core::url::check_dead_letter_retention;
/// assert!(check_dead_letter_retention(Duration::from_secs(3600)).is_ok());
/// assert!(check_dead_letter_retention(Duration::ZERO).is_err());
/// ```
pub fn check_dead_letter_retention(retention: Duration) -> Result<Duration> {
    check_retention("dead_letter_retention", retention)
}

/// `retention` when it lies in the URL's range for retentions; `InvalidInput` naming
/// `what` otherwise.
fn check_retention(what: &'static str, retention: Duration) -> Result<Duration> {
    let problem = if retention.is_zero() {
        InputProblem::Zero
    } else if retention < MIN_KEY_RETENTION {
        InputProblem::TooShort {
            min: MIN_KEY_RETENTION,
            got: retention,
        }
    } else if retention > MAX_KEY_RETENTION {
        InputProblem::TooLongDuration {
            max: MAX_KEY_RETENTION,
            got: retention,
        }
    } else {
        return Ok(retention);
    };
    Err(Error::invalid(what, problem))
}

/// One query parameter of a [`UrlForm`]: its exact (case-sensitive) name and its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// The name, as written in the URL.
    pub name: &'static str,
    /// What values it takes.
    pub kind: Kind,
}

impl Param {
    /// A whole number in `min..=max`.
    pub const fn number(name: &'static str, min: u64, max: u64) -> Param {
        Param {
            name,
            kind: Kind::Number { min, max },
        }
    }

    /// A timeout in milliseconds, from 1 ms to [`MAX_TIMEOUT_MS`]: the range every
    /// store's `*timeout_ms` parameters share.
    pub const fn timeout_ms(name: &'static str) -> Param {
        Param::number(name, 1, MAX_TIMEOUT_MS)
    }

    /// One of `words`.
    pub const fn word(name: &'static str, words: &'static [&'static str]) -> Param {
        Param {
            name,
            kind: Kind::Word(words),
        }
    }

    /// `true` or `false`.
    pub const fn flag(name: &'static str) -> Param {
        Param {
            name,
            kind: Kind::Flag,
        }
    }

    /// Free text, checked by the store.
    pub const fn text(name: &'static str) -> Param {
        Param {
            name,
            kind: Kind::Text,
        }
    }

    /// Checks one value of this parameter.
    fn check(&self, value: &str) -> Result<()> {
        match self.kind {
            Kind::Number { .. } => self.parse_number(value).map(|_| ()),
            Kind::Word(_) => self.parse_word(value).map(|_| ()),
            Kind::Flag => self.parse_flag(value).map(|_| ()),
            Kind::Text => Ok(()),
            Kind::Namespace => Namespace::new(value).map(|_| ()),
        }
    }

    fn out_of_range(&self, got: &str) -> Error {
        let (min, max) = match self.kind {
            Kind::Number { min, max } => (min, max),
            _ => (0, 0),
        };
        out_of_range(self.name, min, max, got)
    }

    /// `value` as a [`Kind::Number`] of this parameter, for a number that is not a
    /// query parameter (a path segment such as Redis's `/db`): plain ASCII digits in
    /// range, else [`InputProblem::OutOfRange`] naming this parameter.
    pub fn parse_number(&self, value: &str) -> Result<u64> {
        let Kind::Number { min, max } = self.kind else {
            return Err(self.out_of_range(value));
        };
        digits(value)
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.out_of_range(value))
    }

    fn parse_word(&self, value: &str) -> Result<&'static str> {
        let words = match self.kind {
            Kind::Word(words) => words,
            _ => &[],
        };
        words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(value))
            .copied()
            .ok_or_else(|| bad_value(self.name, value, format!("one of {}", words.join(", "))))
    }

    fn parse_flag(&self, value: &str) -> Result<bool> {
        match value.to_ascii_lowercase().as_str() {
            "true" | "on" | "1" => Ok(true),
            "false" | "off" | "0" => Ok(false),
            _ => Err(bad_value(self.name, value, "true or false".to_owned())),
        }
    }
}

/// What a URL names between `scheme:` and the query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authority {
    /// `scheme:PATH` or `scheme://PATH`: no host; everything up to `?` is a
    /// (percent-decoded) path, which may be empty. For stores named by a file.
    Path,
    /// `scheme://[USER[:PASSWORD]@]HOST[:PORT][/PATH]`: exactly one host.
    OneHost,
    /// Like [`Authority::OneHost`], with one or more comma-separated `HOST[:PORT]`.
    Hosts,
}

/// How one store's URLs look: declared once per store, checked by [`UrlForm::parse`].
#[derive(Clone, Copy, Debug)]
pub struct UrlForm {
    /// The schemes the store serves (ASCII case ignored).
    pub schemes: &'static [&'static str],
    /// Hosts or a path.
    pub authority: Authority,
    /// The store's own query parameters; [`NAMESPACE`] is always accepted too.
    pub params: &'static [Param],
    /// The fragments (`#insecure`) accepted; any other fragment is malformed.
    pub fragments: &'static [&'static str],
    /// The URL's form, shown in [`InputProblem::Malformed`] errors.
    pub expected: &'static str,
}

/// One `HOST[:PORT]` of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The host as written: a name, an IPv4 address, or a bracketed IPv6 address
    /// (`[::1]`). Percent escapes are kept as written.
    pub name: String,
    /// The port, when one is given (1 to 65535).
    pub port: Option<u16>,
}

impl Host {
    /// The name as a driver takes it: percent escapes decoded (a Unix socket folder
    /// written `%2Fvar%2Frun%2Fpostgresql`), IPv6 brackets removed. `None` when an
    /// escape is bad or decodes to text that is not UTF-8.
    pub fn decoded(&self) -> Option<String> {
        let name = self
            .name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(&self.name);
        percent_decode(name)
    }
}

/// A URL that passed [`UrlForm::parse`]: its parts, and query parameters that are
/// all declared, given once, non-empty and valid for their [`Kind`]. Its `Debug`
/// output never shows the password.
#[derive(Clone)]
pub struct StoreUrl {
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<Host>,
    path: String,
    fragment: Option<String>,
    params: Vec<(Param, String)>,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreUrl")
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("fragment", &self.fragment)
            .field("params", &self.params)
            .finish()
    }
}

impl UrlForm {
    /// The form's error for a URL that does not fit it.
    pub fn malformed(&self) -> Error {
        Error::invalid(
            "url",
            InputProblem::Malformed {
                expected: self.expected,
            },
        )
    }

    /// The parameter called `name` ([`NAMESPACE`] or one of the form's own).
    pub fn param(&self, name: &str) -> Option<Param> {
        std::iter::once(&NAMESPACE)
            .chain(self.params)
            .find(|p| p.name == name)
            .copied()
    }

    /// Splits `text` strictly and checks its scheme, hosts or path, and every query
    /// parameter (see the [module docs](self) for each error). Does no I/O.
    ///
    /// The split is this crate's own, not `url::Url`'s: that parser accepts what a
    /// store must refuse (tabs and newlines it strips, hosts such as `h~x`, `%zz`), or
    /// rewrites what it accepts (`/a/../b`, `[0::1]`), reads a [`Authority::Path`]
    /// such as `sqlite://rel.db` as a host and cannot parse `h1:2379,h2:2379`.
    pub fn parse(&self, text: &str) -> Result<StoreUrl> {
        let (scheme, rest) = text.split_once(':').ok_or_else(|| self.malformed())?;
        if !is_scheme(scheme) {
            return Err(self.malformed());
        }
        let Some(scheme) = self.schemes.iter().find(|s| s.eq_ignore_ascii_case(scheme)) else {
            return Err(Error::invalid(
                "url",
                InputProblem::UnknownScheme {
                    scheme: scheme.to_ascii_lowercase(),
                    known: self.schemes.to_vec(),
                },
            ));
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) if self.fragments.contains(&f) => (r, Some(f.to_owned())),
            Some(_) => return Err(self.malformed()),
            None => (rest, None),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut url = StoreUrl {
            scheme: (*scheme).to_owned(),
            user: None,
            password: None,
            hosts: Vec::new(),
            path: String::new(),
            fragment,
            params: Vec::new(),
        };
        if self.authority == Authority::Path {
            url.path = self.decode(rest.strip_prefix("//").unwrap_or(rest))?;
            url.params = self.query(query)?;
            return Ok(url);
        }
        let rest = rest.strip_prefix("//").ok_or_else(|| self.malformed())?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        url.path = self.decode(path)?;
        let (userinfo, hosts) = authority
            .rsplit_once('@')
            .map_or((None, authority), |(u, h)| (Some(u), h));
        if let Some(userinfo) = userinfo {
            let (user, password) = userinfo
                .split_once(':')
                .map_or((userinfo, None), |(u, p)| (u, Some(p)));
            url.user = Some(self.decode(user)?).filter(|u| !u.is_empty());
            url.password = password.map(|p| self.decode(p)).transpose()?;
        }
        url.hosts = hosts
            .split(',')
            .map(|h| self.parse_host(h))
            .collect::<Result<_>>()?;
        if self.authority == Authority::OneHost && url.hosts.len() != 1 {
            return Err(self.malformed());
        }
        url.params = self.query(query)?;
        Ok(url)
    }

    /// The query's parameters, each declared, given once, non-empty and valid.
    fn query(&self, query: &str) -> Result<Vec<(Param, String)>> {
        let mut params: Vec<(Param, String)> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = self.decode(name)?;
            let Some(param) = self.param(&name) else {
                if name.is_empty() {
                    return Err(self.malformed());
                }
                return Err(Error::invalid(
                    "url",
                    InputProblem::UnknownParameter {
                        name,
                        known: std::iter::once(&NAMESPACE)
                            .chain(self.params)
                            .map(|p| p.name)
                            .collect(),
                    },
                ));
            };
            if params.iter().any(|(p, _)| p.name == param.name) {
                return Err(Error::invalid(
                    "url",
                    InputProblem::RepeatedParameter { name },
                ));
            }
            let value = self.decode(value)?;
            if value.is_empty() {
                return Err(Error::invalid("url", InputProblem::EmptyParameter { name }));
            }
            params.push((param, value));
        }
        for (param, value) in &params {
            param.check(value)?;
        }
        Ok(params)
    }

    /// One `HOST[:PORT]`: a name (letters, digits, `.`, `-`, `_`, valid percent
    /// escapes) or a bracketed IPv6 address, and a port from 1 to 65535 (a port outside
    /// is [`InputProblem::OutOfRange`] named `port`, anything else is malformed).
    pub fn parse_host(&self, text: &str) -> Result<Host> {
        let end = match text.starts_with('[') {
            true => text.find(']').map(|i| i + 1),
            false => Some(text.find(':').unwrap_or(text.len())),
        };
        let (name, port) = text.split_at(end.ok_or_else(|| self.malformed())?);
        let valid = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            Some(ip) => ip.parse::<Ipv6Addr>().is_ok(),
            None => {
                let allowed =
                    |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '%');
                !name.is_empty() && name.chars().all(allowed) && percent_decode(name).is_some()
            }
        };
        if !valid {
            return Err(self.malformed());
        }
        let port = match port {
            "" => None,
            port => {
                let p = port.strip_prefix(':').ok_or_else(|| self.malformed())?;
                let n = digits(p)
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|n| *n != 0);
                Some(n.ok_or_else(|| out_of_range("port", 1, u16::MAX.into(), p))?)
            }
        };
        Ok(Host {
            name: name.to_owned(),
            port,
        })
    }

    /// Percent-decodes `text` (`+` stays a plus sign); malformed on a bad escape or
    /// bytes that are not UTF-8.
    fn decode(&self, text: &str) -> Result<String> {
        percent_decode(text).ok_or_else(|| self.malformed())
    }
}

impl StoreUrl {
    /// The scheme, spelled as in the form's list.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user of `USER[:PASSWORD]@`, percent-decoded; `None` when absent or empty.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password of `USER:PASSWORD@`, percent-decoded.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts: exactly one for [`Authority::OneHost`], at least one for
    /// [`Authority::Hosts`], none for [`Authority::Path`].
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The path, percent-decoded: everything up to `?` for [`Authority::Path`], the
    /// part after the hosts (with its leading `/`, or empty) otherwise.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The fragment, one of the form's `fragments`.
    pub fn fragment(&self) -> Option<&str> {
        self.fragment.as_deref()
    }

    /// The `ns` parameter, or the namespace [`DEFAULT_NAMESPACE`].
    pub fn namespace(&self) -> Result<Namespace> {
        Namespace::new(self.value(NAMESPACE).unwrap_or(DEFAULT_NAMESPACE))
    }

    /// The URL's [`KEY_RETENTION`], or [`DEFAULT_KEY_RETENTION`](crate::DEFAULT_KEY_RETENTION)
    /// when it gives none; `InvalidInput` for a value out of range.
    pub fn key_retention(&self) -> Result<Duration> {
        match self.value(KEY_RETENTION) {
            None => Ok(crate::item::DEFAULT_KEY_RETENTION),
            Some(v) => KEY_RETENTION.parse_number(v).map(Duration::from_secs),
        }
    }

    /// The URL's [`DEAD_LETTER_RETENTION`], or
    /// [`DEFAULT_DEAD_LETTER_RETENTION`](crate::DEFAULT_DEAD_LETTER_RETENTION) when it
    /// gives none; `InvalidInput` for a value out of range.
    pub fn dead_letter_retention(&self) -> Result<Duration> {
        match self.value(DEAD_LETTER_RETENTION) {
            None => Ok(crate::item::DEFAULT_DEAD_LETTER_RETENTION),
            Some(v) => DEAD_LETTER_RETENTION
                .parse_number(v)
                .map(Duration::from_secs),
        }
    }

    /// The (percent-decoded, non-empty) value of `param`, if given.
    pub fn value(&self, param: Param) -> Option<&str> {
        self.params
            .iter()
            .find(|(p, _)| p.name == param.name)
            .map(|(_, v)| v.as_str())
    }

    /// Every parameter given, in the URL's order.
    pub fn given(&self) -> impl Iterator<Item = (Param, &str)> {
        self.params.iter().map(|(p, v)| (*p, v.as_str()))
    }

    /// The value of a [`Kind::Number`] parameter, if given, as a `T`. Fails with
    /// [`InputProblem::OutOfRange`] when it does not fit `T` (a range wider than `T`).
    pub fn number<T: TryFrom<u64>>(&self, param: Param) -> Result<Option<T>> {
        self.value(param)
            .map(|v| {
                param
                    .parse_number(v)
                    .and_then(|n| T::try_from(n).map_err(|_| param.out_of_range(v)))
            })
            .transpose()
    }

    /// The value of a [`Kind::Number`] parameter counted in milliseconds, if given.
    pub fn millis(&self, param: Param) -> Result<Option<Duration>> {
        Ok(self.number::<u64>(param)?.map(Duration::from_millis))
    }

    /// The value of a [`Kind::Word`] parameter, if given, spelled as in its list.
    pub fn word(&self, param: Param) -> Result<Option<&'static str>> {
        self.value(param).map(|v| param.parse_word(v)).transpose()
    }

    /// The value of a [`Kind::Flag`] parameter, if given.
    pub fn flag(&self, param: Param) -> Result<Option<bool>> {
        self.value(param).map(|v| param.parse_flag(v)).transpose()
    }
}

/// [`Error::InvalidInput`] about the URL parameter `name`: its value `got` is not
/// accepted, `expected` says what is.
pub fn bad_value(name: &'static str, got: &str, expected: String) -> Error {
    Error::invalid(
        "url",
        InputProblem::BadValue {
            name,
            got: got.to_owned(),
            expected,
        },
    )
}

fn out_of_range(name: &'static str, min: u64, max: u64, got: &str) -> Error {
    Error::invalid(
        "url",
        InputProblem::OutOfRange {
            name,
            min,
            max,
            got: got.to_owned(),
        },
    )
}

/// A number written in plain ASCII digits that fits a `u64`.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Decodes `%XX` escapes (`+` stays a plus sign); `None` when a `%` is not followed by
/// two hex digits (which `percent_decode_str` would keep as written) or the result is
/// not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let hex = |s: &str| {
        s.as_bytes()
            .get(..2)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    };
    let decoded = percent_decode_str(text).decode_utf8().ok()?;
    text.split('%')
        .skip(1)
        .all(hex)
        .then(|| decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: UrlForm = UrlForm {
        schemes: &["one"],
        authority: Authority::OneHost,
        params: &[
            Param::number("n", 1, 64),
            Param::word("w", &["alpha", "beta"]),
            Param::flag("f"),
            Param::text("t"),
        ],
        fragments: &["insecure"],
        expected: "one://HOST",
    };
    const MANY: UrlForm = UrlForm {
        schemes: &["many"],
        authority: Authority::Hosts,
        params: &[],
        fragments: &[],
        expected: "many://HOST,...",
    };
    const FILE: UrlForm = UrlForm {
        schemes: &["file"],
        authority: Authority::Path,
        params: &[],
        fragments: &[],
        expected: "file:PATH",
    };

    fn problem(form: &UrlForm, text: &str) -> InputProblem {
        match form.parse(text) {
            Err(Error::InvalidInput { problem, .. }) => problem,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn splits_every_part() {
        let u = ONE
            .parse("ONE://us%40er:p%3Ass@[::1]:7000/db/x%20y?n=64&w=BETA&f=off&t=a+b%26c#insecure")
            .unwrap();
        assert_eq!(u.scheme(), "one");
        assert_eq!(u.user(), Some("us@er"));
        assert_eq!(u.password(), Some("p:ss"));
        assert_eq!(
            u.hosts(),
            [Host {
                name: "[::1]".into(),
                port: Some(7000)
            }]
        );
        assert_eq!(u.path(), "/db/x y");
        assert_eq!(u.fragment(), Some("insecure"));
        assert_eq!(u.number::<u8>(ONE.params[0]).unwrap(), Some(64));
        assert_eq!(u.word(ONE.params[1]).unwrap(), Some("beta"));
        assert_eq!(u.flag(ONE.params[2]).unwrap(), Some(false));
        assert_eq!(u.value(ONE.params[3]), Some("a+b&c"));
        assert_eq!(u.namespace().unwrap().as_str(), "default");
        assert!(!format!("{u:?}").contains("p:ss"));

        let u = MANY.parse("many://a,b:1/?ns=x").unwrap();
        assert_eq!(u.hosts().len(), 2);
        assert_eq!(u.path(), "/");
        assert_eq!(u.namespace().unwrap().as_str(), "x");

        assert_eq!(FILE.parse("file:///abs/f.db").unwrap().path(), "/abs/f.db");
        assert_eq!(FILE.parse("file://rel.db").unwrap().path(), "rel.db");
        assert_eq!(FILE.parse("file:").unwrap().path(), "");
    }

    /// The problem's kind and the parameter it names, e.g. `OutOfRange port`.
    fn describe(p: &InputProblem) -> String {
        match p {
            InputProblem::UnknownParameter { name, .. } => format!("UnknownParameter {name}"),
            InputProblem::RepeatedParameter { name } => format!("RepeatedParameter {name}"),
            InputProblem::EmptyParameter { name } => format!("EmptyParameter {name}"),
            InputProblem::OutOfRange { name, .. } => format!("OutOfRange {name}"),
            InputProblem::BadValue { name, .. } => format!("BadValue {name}"),
            other => format!("{other:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_owned(),
        }
    }

    #[test]
    fn refuses_what_does_not_fit() {
        for (form, text, expected) in [
            (&ONE, "two://h", "UnknownScheme"),
            (&ONE, "one:h", "Malformed"),
            (&ONE, "one://", "Malformed"),
            (&ONE, "one:///db", "Malformed"),
            (&ONE, "one://a,b", "Malformed"),
            (&ONE, "one://h#other", "Malformed"),
            (&ONE, "one://h/%zz", "Malformed"),
            (&ONE, "one://h/%ff", "Malformed"),
            (&ONE, "one://h:0", "OutOfRange port"),
            (&ONE, "one://h:65536", "OutOfRange port"),
            (&ONE, "one://h:x", "OutOfRange port"),
            (&ONE, "one://h?NS=a", "UnknownParameter NS"),
            (&ONE, "one://h?ns=a&ns=a", "RepeatedParameter ns"),
            (&ONE, "one://h?ns=", "EmptyParameter ns"),
            (&ONE, "one://h?t", "EmptyParameter t"),
            (&ONE, "one://h?=x", "Malformed"),
            (&ONE, "one://h?n=0", "OutOfRange n"),
            (&ONE, "one://h?n=65", "OutOfRange n"),
            (&ONE, "one://h?n=+1", "OutOfRange n"),
            (&ONE, "one://h?n=99999999999999999999", "OutOfRange n"),
            (&ONE, "one://h?w=gamma", "BadValue w"),
            (&ONE, "one://h?f=yes", "BadValue f"),
            (&ONE, "one://h?ns=Bad", "ForbiddenChar"),
            (&MANY, "many://a,,b", "Malformed"),
            (&MANY, "many://a b", "Malformed"),
            (&FILE, "file:x#f", "Malformed"),
        ] {
            assert_eq!(describe(&problem(form, text)), expected, "{text}");
        }
        assert!(matches!(
            problem(&ONE, "one://h?n=0"),
            InputProblem::OutOfRange {
                name: "n",
                min: 1,
                max: 64,
                ..
            }
        ));
    }

    #[test]
    fn refuses_a_bad_ipv6_address_or_host_escape() {
        for text in [
            "one://[1:2:3]",
            "one://[a]",
            "one://[1.2.3.4]",
            "one://h%zz",
            "one://h%ff:80",
        ] {
            assert_eq!(describe(&problem(&ONE, text)), "Malformed", "{text}");
        }
        let u = MANY.parse("many://[::ffff:10.0.0.1]:1,h%2Dx").unwrap();
        assert_eq!(u.hosts()[0].decoded().as_deref(), Some("::ffff:10.0.0.1"));
        assert_eq!(u.hosts()[1].decoded().as_deref(), Some("h-x"));
    }

    #[test]
    fn a_number_that_does_not_fit_the_type_is_out_of_range() {
        const BIG: Param = Param::number("big", 0, u64::MAX);
        const FORM: UrlForm = UrlForm {
            params: &[BIG],
            ..ONE
        };
        let u = FORM.parse("one://h?big=300").unwrap();
        assert!(matches!(
            u.number::<u8>(BIG),
            Err(Error::InvalidInput {
                problem: InputProblem::OutOfRange { name: "big", .. },
                ..
            })
        ));
    }

    #[test]
    fn errors_name_the_parameter_and_say_what_to_do() {
        let text = ONE.parse("one://h?n=4294967295").unwrap_err().to_string();
        assert!(
            text.contains("`n=4294967295`") && text.contains("1 to 64"),
            "{text}"
        );
        let text = ONE.parse("one://h?nn=1").unwrap_err().to_string();
        assert!(
            text.contains("`nn`") && text.contains("ns, n, w, f, t"),
            "{text}"
        );
    }
}
