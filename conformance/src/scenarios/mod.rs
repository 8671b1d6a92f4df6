//! The conformance scenarios: one plain `pub async fn(Ctx)` per contract bullet, so a
//! failure points at readable code. The list below is the only list: [`suite!`](crate::suite)
//! expands it into tests, and [`SCENARIOS`] into a table [`run`](crate::run) looks in.

use std::future::Future;
use std::pin::Pin;

use crate::Ctx;

mod batches;
mod cancel;
mod common;
mod delays;
mod drops;
mod errors;
mod holders;
mod items;
mod leases;
mod machines;
mod operator;
mod pending;
mod positions;
mod queues;
mod retention;
mod session_sweeps;
mod sessions;
mod times;
mod waits;
mod workers;

pub use batches::*;
pub use cancel::*;
pub use delays::*;
pub use drops::*;
pub use errors::*;
pub use holders::*;
pub use items::*;
pub use leases::*;
pub use machines::*;
pub use operator::*;
pub use pending::*;
pub use positions::*;
pub use queues::*;
pub use retention::*;
pub use session_sweeps::*;
pub use sessions::*;
pub use times::*;
pub use waits::*;
pub use workers::*;

/// One named scenario.
#[derive(Clone, Copy)]
pub struct Scenario {
    /// Its name (the test's name).
    pub name: &'static str,
    /// True when it needs the lease contract only ([`LeaseStore`](liveness_core::LeaseStore)
    /// and the state machines on it): what a store of elections alone runs.
    pub leases: bool,
    /// Runs it; panics on a contract violation.
    pub run: fn(Ctx) -> Pin<Box<dyn Future<Output = ()> + Send>>,
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenarios {
    (@list $mode:ident $($args:tt)*) => {
        $crate::__scenarios!(@expand $mode [$($args)*]
            // What every store runs: leases, elections and members (a store of
            // elections alone runs these only).
            [
            acquire_free_key,
            acquire_held_key_fails_unchanged,
            tokens_strictly_increase,
            renew_extends_live_lease,
            expired_lease_never_renewed,
            renew_superseded_or_released_is_lost,
            renew_uses_the_lease_values_ttl,
            release_is_idempotent_and_fenced,
            inspect_reports_live_and_expired,
            expired_lists_only_expired,
            expired_respects_limit_and_order,
            reap_only_expired_current_lease,
            reap_has_exactly_one_winner,
            acquire_reaps_expired_lease,
            next_expiry_is_a_duration,
            acquire_many_over_max_batch_rejected,
            racing_acquire_many_take_each_key_once,
            renew_many_answers_each_lease_alone,
            renew_many_over_max_batch_rejected,
            renew_many_extends_each_entry_at_every_position,
            members_renewed_through_a_batcher_stay_live,
            member_cancel_fires_before_store_expiry,
            member_rejoins_with_new_token,
            election_one_leader_among_three,
            election_failover_after_leader_stops,
            a_dropped_leadership_hands_the_role_over,
            a_dropped_session_releases_its_lease
            ]
            // What a store with work items and the operator's views runs besides.
            [
            release_puts_token_in_dead_set,
            store_time_never_decreases,
            enqueue_claim_complete,
            claim_repeat_answers_the_same_items,
            late_claim_after_its_repeat_completed_assigns_nothing,
            older_claim_id_after_a_newer_one_assigns_nothing,
            enqueue_with_key_is_idempotent,
            enqueue_many_adds_each_payload_in_order,
            claim_refused_on_expired_lease,
            claim_refused_on_superseded_lease,
            complete_fenced_after_requeue,
            fail_retry_and_dead_letter,
            requeue_is_idempotent,
            requeue_ignores_live_tokens,
            acquire_many_answers_each_entry_alone,
            reap_many_answers_each_entry_alone,
            sweep_many_answers_each_token_alone,
            acquire_many_takes_each_entry_at_every_position,
            reap_many_reaps_each_entry_at_every_position,
            sweep_many_requeues_each_token_at_every_position,
            poison_item_is_dead_lettered,
            namespaces_are_isolated,
            foreign_lease_refused_unchanged,
            bad_input_rejected_unchanged,
            works_through_box_and_arc,
            leases_pages_in_key_order,
            leases_show_expired_until_reaped,
            deaths_record_each_death_once,
            death_swept_counts_are_exact,
            deaths_retention_keeps_newest,
            retry_dead_letters_back_to_pending,
            items_page_by_state,
            checker_declares_each_death_once,
            checker_crash_between_reap_and_requeue_loses_nothing,
            member_leave_hands_back_items,
            member_recovers_lost_claim_reply,
            member_complete_retried_after_lost_reply,
            dropped_calls_leave_every_later_answer_its_own,
            a_member_joins_only_a_live_session,
            a_riding_member_lives_and_dies_with_its_session,
            a_dead_session_s_members_die_once_each,
            racing_sweepers_declare_each_member_dead_once,
            a_member_dies_alone,
            checkers_declare_a_dead_session_s_members_once,
            a_batch_of_joins_answers_each_entry_as_its_join,
            a_dropped_rider_hands_back_its_work,
            a_dropped_member_hands_back_its_work,
            a_rider_whose_record_is_gone_rejoins,
            a_session_loss_leaves_one_death_record,
            the_watchdog_stops_a_wedged_job_not_an_idle_member,
            sweep_many_sweeps_each_session_alone,
            a_dead_worker_s_jobs_run_again_on_a_live_worker,
            workers_riding_a_dead_session_have_their_jobs_run_again,
            the_pending_signal_ticks_when_an_item_becomes_pending,
            a_delayed_item_is_claimed_only_once_due,
            a_retry_waits_its_backoff_before_the_next_claim,
            cancel_removes_what_nobody_runs,
            a_failure_s_error_text_stays_on_its_item,
            a_claim_says_how_long_its_item_waited,
            named_queues_keep_their_items_apart,
            an_item_stays_in_its_queue_through_every_hand_back,
            a_claim_names_its_queues_once_each,
            an_item_says_when_it_was_enqueued_attempted_and_finished,
            a_dead_letter_is_kept_for_the_retention_then_removed
            ]
        );
    };
    (@expand tests [$factory:expr] [$($lease:ident),*] [$($name:ident),*]) => {
        $crate::__scenarios!(@expand leases [$factory] [$($lease),*] []);
        $(
            #[test]
            fn $name() {
                $crate::run(stringify!($name), $crate::factory($factory));
            }
        )*
    };
    (@expand leases [$factory:expr] [$($lease:ident),*] [$($name:ident),*]) => {
        $(
            #[test]
            fn $lease() {
                $crate::run(stringify!($lease), $crate::factory($factory));
            }
        )*
    };
    (@expand table [] [$($lease:ident),*] [$($name:ident),*]) => {
        /// Every scenario, in the order the suite lists them.
        pub const SCENARIOS: &[Scenario] = &[
            $( Scenario { name: stringify!($lease), leases: true, run: |ctx| Box::pin($lease(ctx)) }, )*
            $( Scenario { name: stringify!($name), leases: false, run: |ctx| Box::pin($name(ctx)) }, )*
        ];
    };
}

__scenarios!(@list table);
