//! The pure routing core: config, request inspection, strategies and error bodies.
//!
//! Nothing here calls proxy-wasm. Time and randomness are passed in, so every decision
//! can be reproduced in a unit test.

pub mod access_log;
pub mod admission;
pub mod answer_faults;
pub mod batch;
pub mod caller;
pub mod config;
pub mod conversation;
pub mod decision;
pub mod edit_in_place;
pub mod endpoint;
pub mod errors;
pub mod fallback;
pub mod flight;
pub mod headers;
pub mod health;
pub mod json_scan;
pub mod metadata;
pub mod metrics;
pub mod multipart;
pub mod nfc;
pub mod outbound;
pub mod overhead;
pub mod pair_search;
pub mod plugin;
pub mod report;
pub mod request;
pub mod responses;
pub mod router_path;
pub mod routing;
pub mod seal;
pub mod simd;
pub mod sse;
pub mod status_set;
pub mod stream;
pub mod text;
pub mod trace;
pub mod translate;
pub mod usage;
pub mod when;
