//! Turning a requested model name into an ordered list of catalog targets.
//!
//! A catalog model routes straight to itself; a virtual model asks its strategy. The plan is
//! the primary target first, then the order later attempts would take. One question per file:
//! what a request shows routing (`request.rs`), which targets it may reach and why the others
//! are out (`eligible.rs`), which strategy orders them (`order.rs`, then one file per
//! strategy), how health reorders them (`health_input.rs`), and the plan itself (`plan.rs`).

pub mod agent_session;
pub mod body_member;
pub mod classifier;
pub mod complexity;
pub mod conditional;
pub mod eligible;
pub mod hash;
pub mod health_input;
pub mod latency;
pub mod native;
mod order;
pub mod pins;
pub mod plan;
pub mod priority;
pub mod rendezvous;
pub mod request;
pub mod round_robin;
pub mod shared_state;
pub mod sticky;
pub mod weighted;

pub use eligible::{eligible, Skip};
pub use health_input::HealthInput;
pub use plan::{plan, plan_within, Plan};
pub use request::Request;
pub use shared_state::{CursorKey, LocalState, RoutingState};
