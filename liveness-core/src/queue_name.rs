//! [`QueueName`]: which named queue an item waits in, and which a worker takes from.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, InputProblem, Result};

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME_LEN: usize = 64;

/// The most queues one claim takes from
/// ([`ItemStore::claim_from`](crate::ItemStore::claim_from)).
pub const MAX_CLAIM_QUEUES: usize = 16;

/// The name of a queue: 1 to [`MAX_QUEUE_NAME_LEN`] bytes of ASCII letters, digits,
/// `_`, `-` and `.`, so that every store can put it in a key or a column as it is.
/// Items are enqueued on one queue ([`EnqueueOptions::queue`]); a worker claims from
/// the queues it names. [`QueueName::DEFAULT`] (`default`) is where an item goes
/// unless told otherwise, and the one queue of a store without
/// [`Capabilities::queues`](crate::Capabilities::queues).
///
/// `Copy` (the name is kept inline), so options that carry one stay `Copy`.
///
/// ```
/// use liveness_core::QueueName;
/// let mail: QueueName = "mail".parse()?;
/// assert_eq!(mail.as_str(), "mail");
/// assert_eq!(QueueName::default(), QueueName::DEFAULT);
/// assert!(QueueName::new("no spaces").is_err());
/// assert!(QueueName::new("").is_err());
/// # Ok::<(), liveness_core::Error>(())
/// ```
///
/// [`EnqueueOptions::queue`]: crate::EnqueueOptions::queue
/// Names compare by their bytes (`"default" < "mail"`), as every store orders them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "String", into = "String")
)]
pub struct QueueName {
    len: u8,
    bytes: [u8; MAX_QUEUE_NAME_LEN],
}

impl QueueName {
    /// `default`: the queue of an item enqueued without one, and the one queue a
    /// store without [`Capabilities::queues`](crate::Capabilities::queues) keeps.
    pub const DEFAULT: QueueName = QueueName::from_static("default");

    /// Builds a name known at compile time; panics (at compile time in a `const`)
    /// when `name` is not a valid queue name.
    pub const fn from_static(name: &'static str) -> QueueName {
        let src = name.as_bytes();
        assert!(
            !src.is_empty() && src.len() <= MAX_QUEUE_NAME_LEN,
            "a queue name has 1 to 64 bytes"
        );
        let mut bytes = [0u8; MAX_QUEUE_NAME_LEN];
        let mut i = 0;
        while i < src.len() {
            assert!(allowed(src[i]), "a queue name has letters, digits, _ - .");
            bytes[i] = src[i];
            i += 1;
        }
        QueueName {
            len: src.len() as u8,
            bytes,
        }
    }

    /// `name` as a queue name, or `InvalidInput` (`what: "queue"`) when it is empty,
    /// longer than [`MAX_QUEUE_NAME_LEN`] bytes, or has a byte other than ASCII
    /// letters, digits, `_`, `-` and `.`.
    pub fn new(name: &str) -> Result<QueueName> {
        let src = name.as_bytes();
        if src.is_empty() {
            return Err(Error::invalid("queue", InputProblem::Empty));
        }
        if src.len() > MAX_QUEUE_NAME_LEN {
            return Err(Error::invalid(
                "queue",
                InputProblem::TooLong {
                    max: MAX_QUEUE_NAME_LEN,
                    len: src.len(),
                },
            ));
        }
        if !src.iter().all(|&b| allowed(b)) {
            return Err(Error::invalid(
                "queue",
                InputProblem::Malformed {
                    expected: "ASCII letters, digits, '_', '-' and '.'",
                },
            ));
        }
        let mut bytes = [0u8; MAX_QUEUE_NAME_LEN];
        bytes[..src.len()].copy_from_slice(src);
        Ok(QueueName {
            len: src.len() as u8,
            bytes,
        })
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// True for [`QueueName::DEFAULT`].
    pub fn is_default(&self) -> bool {
        *self == QueueName::DEFAULT
    }
}

/// The bytes a queue name may hold.
const fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

impl Ord for QueueName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for QueueName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Default for QueueName {
    fn default() -> Self {
        QueueName::DEFAULT
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueueName({:?})", self.as_str())
    }
}

impl FromStr for QueueName {
    type Err = Error;
    fn from_str(s: &str) -> Result<QueueName> {
        QueueName::new(s)
    }
}

impl TryFrom<&str> for QueueName {
    type Error = Error;
    fn try_from(s: &str) -> Result<QueueName> {
        QueueName::new(s)
    }
}

impl TryFrom<String> for QueueName {
    type Error = Error;
    fn try_from(s: String) -> Result<QueueName> {
        QueueName::new(&s)
    }
}

impl From<QueueName> for String {
    fn from(name: QueueName) -> String {
        name.as_str().to_owned()
    }
}

impl AsRef<str> for QueueName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Checks the queue list of a claim: 1 to [`MAX_CLAIM_QUEUES`] names, none twice.
pub(crate) fn check_claim_queues(queues: &[QueueName]) -> Result<()> {
    if queues.is_empty() {
        return Err(Error::invalid("queues", InputProblem::Empty));
    }
    if queues.len() > MAX_CLAIM_QUEUES {
        return Err(Error::invalid(
            "queues",
            InputProblem::TooLong {
                max: MAX_CLAIM_QUEUES,
                len: queues.len(),
            },
        ));
    }
    for (i, q) in queues.iter().enumerate() {
        if queues[..i].contains(q) {
            return Err(Error::invalid(
                "queues",
                InputProblem::Malformed {
                    expected: "each queue named once",
                },
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_text_and_refuse_what_no_store_can_key() {
        let long = "q".repeat(MAX_QUEUE_NAME_LEN);
        assert_eq!(QueueName::new(&long).unwrap().as_str(), long);
        assert!(QueueName::new(&format!("{long}q")).is_err());
        for bad in ["", "a b", "a/b", "a:b", "é", "a\0"] {
            assert!(QueueName::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(QueueName::DEFAULT.as_str(), "default");
        assert!(QueueName::new("default").unwrap().is_default());
        // By bytes, not by length first.
        let (mail, a) = (
            QueueName::new("mail").unwrap(),
            QueueName::new("a").unwrap(),
        );
        assert!(QueueName::DEFAULT < mail && a < QueueName::DEFAULT && mail > a);
        assert_eq!(
            format!("{:?}", QueueName::DEFAULT),
            "QueueName(\"default\")"
        );
    }

    #[test]
    fn a_claim_names_some_queues_each_once() {
        let a = QueueName::new("a").unwrap();
        let b = QueueName::new("b").unwrap();
        assert!(check_claim_queues(&[a, b]).is_ok());
        assert!(check_claim_queues(&[]).is_err());
        assert!(check_claim_queues(&[a, b, a]).is_err());
        let many: Vec<QueueName> = (0..=MAX_CLAIM_QUEUES)
            .map(|i| QueueName::new(&format!("q{i}")).unwrap())
            .collect();
        assert!(check_claim_queues(&many).is_err());
        assert!(check_claim_queues(&many[..MAX_CLAIM_QUEUES]).is_ok());
    }
}
