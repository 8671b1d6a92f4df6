//! The lease-keeping engine shared by a member of its own lease, a member riding a
//! session and the session itself: what a generation's checks read ([`Footing`]),
//! taking a lease and taking it again after a loss ([`first_join`], [`rejoin`], with
//! the hand-over rule [`wait_to_hand_over`]), and what keeps a rider join from
//! stranding a member ([`join_detached`], [`Leftovers`]). The heartbeat that keeps a
//! lease alive is [`crate::heartbeat`]; the release of a dropped handle,
//! [`crate::departure`].

mod detached;
mod footing;
mod join;

pub(crate) use detached::{join_detached, Leftovers};
pub(crate) use footing::{Footing, Riding, SessionGen};
pub(crate) use join::{
    attempt, born_dead, first_join, ghost_lease, rejoin, wait_to_hand_over, Joined, Ridden, Take,
};
