//! What the backends' durability tests read from their errors: a connect refused for
//! an unsafe server setting, a store found to have lost state.

use liveness_core::durability::{StoreLostState, UnsafeSetting};
use liveness_core::Error;

/// The setting a refused connect names: `err` must be a permanent `Backend` error
/// whose source is an [`UnsafeSetting`].
///
/// # Panics
///
/// When it is anything else: the test then fails, showing the error.
pub fn refused_setting(err: &Error) -> &'static str {
    match err {
        Error::Backend { source, .. } => {
            source
                .downcast_ref::<UnsafeSetting>()
                .unwrap_or_else(|| panic!("not an unsafe setting: {err:?}"))
                .setting
        }
        other => panic!("expected a permanent Backend error, got {other:?}"),
    }
}

/// What a store that lost state reports: `err` must be a permanent `Backend` error
/// whose source is a [`StoreLostState`].
///
/// # Panics
///
/// When it is anything else: the test then fails, showing the error.
pub fn lost_state(err: &Error) -> &StoreLostState {
    match err {
        Error::Backend { source, .. } => source
            .downcast_ref::<StoreLostState>()
            .unwrap_or_else(|| panic!("not a store-lost-state error: {err:?}")),
        other => panic!("expected store-lost-state, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal of a server with `fsync` off.
    fn fsync_off() -> Error {
        let refusal = UnsafeSetting::new(
            "fsync",
            "off",
            "a crash can lose acknowledged writes",
            "fsync = on",
        );
        Error::backend("test", refusal)
    }

    #[test]
    fn names_the_setting_of_a_refusal() {
        assert_eq!(refused_setting(&fsync_off()), "fsync");
    }

    #[test]
    fn names_the_lease_a_store_lost() {
        let key = liveness_core::Key::member("m").unwrap();
        let token = liveness_core::FencingToken(9);
        let lost_lease = StoreLostState::new(key.clone(), token);
        let err = Error::backend("test", lost_lease);
        let lost = lost_state(&err);
        assert_eq!((&lost.key, lost.token), (&key, token));
    }

    #[test]
    #[should_panic(expected = "not a store-lost-state error")]
    fn refuses_an_unsafe_setting_for_lost_state() {
        lost_state(&fsync_off());
    }

    #[test]
    #[should_panic(expected = "not an unsafe setting")]
    fn refuses_another_backend_error() {
        refused_setting(&Error::backend("test", std::io::Error::other("down")));
    }
}
