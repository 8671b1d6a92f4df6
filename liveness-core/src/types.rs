//! Validated value types: names, keys, namespaces, ttls, fencing tokens, store time.
//!
//! Every type here is checked when it is built, so a store never sees an empty key, a
//! control character or a zero ttl: bad input fails with [`Error::InvalidInput`] before
//! anything is sent.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, InputProblem, Result};

/// The maximum length in bytes of a [`Name`], [`HolderId`] or [`Space`].
pub const MAX_NAME_LEN: usize = 128;

/// The maximum length in bytes of a [`Namespace`].
pub const MAX_NAMESPACE_LEN: usize = 48;

fn check_text(what: &'static str, s: &str, max: usize, allow: impl Fn(char) -> bool) -> Result<()> {
    if s.is_empty() {
        return Err(Error::invalid(what, InputProblem::Empty));
    }
    if s.len() > max {
        return Err(Error::invalid(
            what,
            InputProblem::TooLong { max, len: s.len() },
        ));
    }
    if let Some(ch) = s.chars().find(|c| !allow(*c)) {
        return Err(Error::invalid(what, InputProblem::ForbiddenChar { ch }));
    }
    Ok(())
}

fn printable(c: char) -> bool {
    !c.is_control()
}

macro_rules! text_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:expr, $allow:expr) => {
        $(#[$doc])*
        ///
        /// Cloning is cheap: clones share the text (a reference count, no copy), so a
        /// lease passed around on every renewal allocates nothing.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates and wraps a string. Fails with [`Error::InvalidInput`] when it is
            /// empty, too long, or holds a forbidden character.
            pub fn new(s: impl Into<String>) -> Result<Self> {
                let s = s.into();
                check_text($what, &s, $max, $allow)?;
                Ok(Self(Arc::from(s)))
            }

            /// Validates raw bytes, rejecting non-UTF-8 with [`InputProblem::NotUtf8`].
            pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| Error::invalid($what, InputProblem::NotUtf8))?;
                Self::new(s)
            }

            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

text_type!(
    /// The name part of a [`Key`]: a member name, a leader role.
    ///
    /// Guarantees: non-empty, valid UTF-8, at most [`MAX_NAME_LEN`] bytes, no control
    /// characters. Any other character, `/` included, is allowed.
    Name,
    "name",
    MAX_NAME_LEN,
    printable
);

text_type!(
    /// Who holds a lease: an opaque id chosen by the caller (a host and process id, say).
    ///
    /// Guarantees: non-empty, valid UTF-8, at most [`MAX_NAME_LEN`] bytes, no control
    /// characters.
    HolderId,
    "holder",
    MAX_NAME_LEN,
    printable
);

impl HolderId {
    /// The separator between a configured holder id and the instance nonce of
    /// [`HolderId::instance`].
    pub const NONCE_SEPARATOR: char = '#';

    /// The holder id one instance's acquire attempts carry: this (configured) id, `#`,
    /// and a random 64-bit nonce in 16 hex digits, e.g. `node-a#3f9c0e7a1b2d4c5e`.
    /// The configured id is cut (at a character boundary) when both would not fit in
    /// [`MAX_NAME_LEN`] bytes. Two instances configured with one id never hold one
    /// another's leases: a lease is recognised as one's own only by the whole id.
    pub fn instance(&self) -> HolderId {
        let nonce = format!("{}{:016x}", Self::NONCE_SEPARATOR, fastrand::u64(..));
        let mut end = self.0.len().min(MAX_NAME_LEN - nonce.len());
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        HolderId(Arc::from(format!("{}{nonce}", &self.0[..end])))
    }
}

text_type!(
    /// A space of leases: `members`, `leaders`, or a user's own.
    ///
    /// Guarantees: non-empty, at most [`MAX_NAME_LEN`] bytes, only ASCII letters, digits,
    /// `-`, `_` and `.` (so it never contains the `/` that joins it to a name).
    Space,
    "space",
    MAX_NAME_LEN,
    |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
);

text_type!(
    /// The namespace that scopes one store handle. Two namespaces never see each other.
    ///
    /// Guarantees: non-empty, at most [`MAX_NAMESPACE_LEN`] bytes, only ASCII lowercase
    /// letters, digits, `_` and `-` (`my-app`): never a quote, a space, `/`, `:`, `.`,
    /// a brace or an uppercase letter, so it is usable verbatim in a quoted SQL schema
    /// name, a Redis hash tag and an etcd key prefix.
    Namespace,
    "namespace",
    MAX_NAMESPACE_LEN,
    |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-')
);

impl Space {
    /// The space of worker members: what the checker watches.
    pub fn members() -> Space {
        Space(Arc::from("members"))
    }

    /// The space of singleton roles: what elections campaign on.
    pub fn leaders() -> Space {
        Space(Arc::from("leaders"))
    }

    /// The space of sessions: one lease per process, which members ride
    /// ([`LeaseStore::join_session_many`](crate::LeaseStore::join_session_many)).
    pub fn sessions() -> Space {
        Space(Arc::from("sessions"))
    }
}

/// A lease key: a [`Space`] and a [`Name`], written `space/name`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    space: Space,
    name: Name,
}

impl Key {
    /// A key in the given space.
    pub fn new(space: Space, name: Name) -> Key {
        Key { space, name }
    }

    /// A key in the members space: `members/NAME`. Fails on an invalid name.
    pub fn member(name: &str) -> Result<Key> {
        Ok(Key::new(Space::members(), Name::new(name)?))
    }

    /// A key in the leaders space: `leaders/NAME`. Fails on an invalid name.
    pub fn leader(name: &str) -> Result<Key> {
        Ok(Key::new(Space::leaders(), Name::new(name)?))
    }

    /// Parses `space/name`, as written by [`Key`]'s `Display`.
    pub fn parse(s: &str) -> Result<Key> {
        let (space, name) = s.split_once('/').ok_or(Error::invalid(
            "key",
            InputProblem::Malformed {
                expected: "space/name",
            },
        ))?;
        Ok(Key::new(Space::new(space)?, Name::new(name)?))
    }

    /// The least key of `space`: no key of `space` sorts before it, and every key of a
    /// space that sorts before `space` does. A store that keeps keys in one ordered map
    /// starts a range here to read `space` alone (with its name `" "`: no valid name
    /// sorts lower, since control characters are refused).
    ///
    /// ```
    /// use liveness_core::{Key, Space};
    /// let first = Key::first_in(&Space::members());
    /// assert!(first <= Key::member(" ").unwrap());
    /// assert!(first < Key::member("a").unwrap());
    /// assert!(Key::leader("zzz").unwrap() < first);
    /// ```
    pub fn first_in(space: &Space) -> Key {
        Key::new(space.clone(), Name(Arc::from(" ")))
    }

    /// The key's space.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The key's name.
    pub fn name(&self) -> &Name {
        &self.name
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.space, self.name)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// A work item's id, assigned by the store at `enqueue`; increasing in enqueue order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ItemId(pub u64);

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A fencing token: strictly increasing over every acquisition in a namespace, never
/// reused, also after the lease record is gone.
///
/// Pass it along with every write a lease holder makes elsewhere; the receiver refuses
/// any write whose token is lower than the highest it has seen.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lease's time to live, counted by the store clock.
///
/// Guarantees: at least one millisecond and a whole number of milliseconds. Each store
/// further checks it against its [`Capabilities`](crate::Capabilities) bounds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Ttl(Duration);

impl Ttl {
    /// The largest ttl any store accepts: one day. Longer ones are no liveness signal.
    pub const MAX: Duration = Duration::from_secs(24 * 3600);

    /// Validates a duration: rejects zero, sub-millisecond precision and anything over
    /// [`Ttl::MAX`] with [`Error::InvalidInput`].
    pub fn new(d: Duration) -> Result<Ttl> {
        let min = Duration::from_millis(1);
        if d < min {
            return Err(Error::invalid(
                "ttl",
                InputProblem::TooShort { min, got: d },
            ));
        }
        if d > Ttl::MAX {
            return Err(Error::invalid(
                "ttl",
                InputProblem::TooLongDuration {
                    max: Ttl::MAX,
                    got: d,
                },
            ));
        }
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::invalid(
                "ttl",
                InputProblem::Malformed {
                    expected: "a whole number of milliseconds",
                },
            ));
        }
        Ok(Ttl(d))
    }

    /// A ttl of `ms` milliseconds. Fails like [`Ttl::new`].
    pub fn from_millis(ms: u64) -> Result<Ttl> {
        Ttl::new(Duration::from_millis(ms))
    }

    /// A ttl of `s` seconds. Fails like [`Ttl::new`].
    pub fn from_secs(s: u64) -> Result<Ttl> {
        Ttl::new(Duration::from_secs(s))
    }

    /// The duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// The duration in whole milliseconds.
    pub fn as_millis(self) -> u64 {
        // Bounded by Ttl::MAX, so this never truncates.
        self.0.as_millis() as u64
    }
}

/// An opaque instant of a store's clock, for diagnostics and tests.
///
/// Only differences between two instants of the SAME store mean anything; the epoch is
/// the store's own (and on observer-local stores, the observer's). It is never
/// compared with any local clock.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct StoreTime(Duration);

impl StoreTime {
    /// An instant `since_epoch` after the store's own epoch.
    pub fn from_epoch(since_epoch: Duration) -> StoreTime {
        StoreTime(since_epoch)
    }

    /// The time since the store's epoch.
    pub fn since_epoch(self) -> Duration {
        self.0
    }

    /// How much later `self` is than `earlier` (zero when it is not later).
    pub fn saturating_since(self, earlier: StoreTime) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_bad_input() {
        assert!(matches!(
            Name::new(""),
            Err(Error::InvalidInput {
                problem: InputProblem::Empty,
                ..
            })
        ));
        assert!(matches!(
            Name::new("a\nb"),
            Err(Error::InvalidInput {
                problem: InputProblem::ForbiddenChar { ch: '\n' },
                ..
            })
        ));
        assert!(Name::new("x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(Name::new("x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(matches!(
            Name::from_bytes(&[0xff, 0xfe]),
            Err(Error::InvalidInput {
                problem: InputProblem::NotUtf8,
                ..
            })
        ));
        assert!(Space::new("a/b").is_err());
        assert!(Namespace::new("Upper").is_err());
        assert!(Namespace::new("ok_1").is_ok());
    }

    #[test]
    fn a_namespace_takes_a_hyphen_but_no_dot_or_uppercase() {
        assert_eq!(Namespace::new("my-app-2").unwrap().as_str(), "my-app-2");
        assert!(Namespace::new("-").is_ok());
        for (bad, ch) in [("my.app", '.'), ("My-app", 'M'), ("a/b", '/'), ("a b", ' ')] {
            assert!(
                matches!(
                    Namespace::new(bad),
                    Err(Error::InvalidInput {
                        what: "namespace",
                        problem: InputProblem::ForbiddenChar { ch: c },
                    }) if c == ch
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn instance_ids_keep_the_configured_id_and_fit() {
        let id = HolderId::new("node-a").unwrap();
        let (a, b) = (id.instance(), id.instance());
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("node-a#"));
        assert_eq!(a.as_str().len(), "node-a".len() + 17);
        let long = HolderId::new("é".repeat(MAX_NAME_LEN / 2)).unwrap();
        let cut = long.instance();
        assert!(cut.as_str().len() <= MAX_NAME_LEN);
        assert!(HolderId::new(cut.as_str()).is_ok());
    }

    #[test]
    fn keys_round_trip() {
        let k = Key::member("w/1").unwrap();
        assert_eq!(k.to_string(), "members/w/1");
        assert_eq!(Key::parse("members/w/1").unwrap(), k);
        assert!(Key::parse("nospace").is_err());
    }

    #[test]
    fn ttl_bounds() {
        assert!(Ttl::new(Duration::ZERO).is_err());
        assert!(Ttl::new(Duration::from_micros(1500)).is_err());
        assert!(Ttl::new(Duration::from_secs(24 * 3600 + 1)).is_err());
        assert_eq!(Ttl::from_millis(1500).unwrap().as_millis(), 1500);
    }
}
