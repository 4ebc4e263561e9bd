//! The Responses API's conversation state: a conversation lives on the provider account that
//! created it (TrueFoundry virtual models, "Responses API conversations"; Zuplo model load
//! balancing, "Stored responses").

pub mod continuation;
pub mod id;
pub mod rewrite;
