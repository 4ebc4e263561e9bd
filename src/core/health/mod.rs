//! Per-target health: failure windows, eviction with backoff, SLA samples, and the shared
//! store they live in. Pure: time comes in as `now_ms`, storage through the [`store::Store`]
//! trait.

pub mod codec;
pub mod failure_class;
pub mod policy;
pub mod record;
pub mod retry_after;
pub mod sla;
pub mod store;
pub mod view;
