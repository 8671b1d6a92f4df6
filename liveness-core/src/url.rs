//! Small helpers every store's URL parser shares, so that the same mistake gets the
//! same error from every backend (and from a custom store that uses them).
//!
//! ```
//! use std::time::Duration;
//! use liveness_core::{url, Error, InputProblem};
//!
//! const EXPECTED: &str = "mystore://host?timeout_ms=N";
//! assert_eq!(url::millis("250", EXPECTED).unwrap(), Duration::from_millis(250));
//! assert!(matches!(
//!     url::millis("0", EXPECTED),
//!     Err(Error::InvalidInput { what: "url", problem: InputProblem::Zero })
//! ));
//! assert!(matches!(
//!     url::millis("soon", EXPECTED),
//!     Err(Error::InvalidInput { what: "url", problem: InputProblem::Malformed { .. } })
//! ));
//! ```

use std::time::Duration;

use crate::error::{Error, InputProblem, Result};

/// [`Error::InvalidInput`] about the URL (`what: "url"`), saying which form was
/// expected.
pub fn malformed(expected: &'static str) -> Error {
    Error::invalid("url", InputProblem::Malformed { expected })
}

/// A positive whole number of milliseconds from a URL parameter (`timeout_ms=250`).
///
/// Fails with [`InputProblem::Zero`] for `0` and with [`malformed`]`(expected)` for
/// anything that is not a whole number that fits in a `u64`.
pub fn millis(value: &str, expected: &'static str) -> Result<Duration> {
    match value.parse::<u64>() {
        Ok(0) => Err(Error::invalid("url", InputProblem::Zero)),
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) => Err(malformed(expected)),
    }
}
