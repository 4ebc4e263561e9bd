//! The Responses API's conversation state: a conversation lives on the provider account that
//! created it (TrueFoundry virtual models, "Responses API conversations"; Zuplo model load
//! balancing, "Stored responses").

pub mod continuation;
pub mod id;
pub mod rewrite;
pub mod stored;

use crate::core::seal::Keys;
use id::{Turn, MARK_PREFIX};
use rewrite::Minter;

/// Mints the ids and marks of one answer: a turn of a virtual model served by a target.
pub struct TurnMinter<'a> {
    /// The config's keys.
    pub keys: &'a Keys,
    /// The turn.
    pub turn: Turn<'a>,
}

impl Minter for TurnMinter<'_> {
    fn response_id(&mut self, provider_id: &str, out: &mut Vec<u8>) {
        let minted = id::mint(self.keys, &self.turn, provider_id);
        out.extend_from_slice(minted.as_bytes());
    }

    fn encrypted_content(&mut self, value: &str, out: &mut Vec<u8>) {
        // A value already marked (echoed back by the provider) keeps its one mark.
        if value.starts_with(MARK_PREFIX) {
            out.extend_from_slice(value.as_bytes());
        } else {
            let marked = id::mark(self.keys, &self.turn, value);
            out.extend_from_slice(marked.as_bytes());
        }
    }
}

/// The whole of an answer that arrived at once (a call-out's), rewritten.
pub fn rewrite_whole(body: &[u8], minter: &mut TurnMinter<'_>) -> Vec<u8> {
    let mut rewriter = rewrite::AnswerRewriter::new();
    let mut out = Vec::with_capacity(body.len() + rewrite::ROOM);
    rewriter.feed(body, minter, &mut out);
    rewriter.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_answer_gets_its_own_id_minted_and_the_clients_echoed_ids_back_as_sent() {
        let keys = Keys::new(&["a-key-of-thirty-two-bytes-000001"]);
        let mut minter = TurnMinter {
            keys: &keys,
            turn: Turn::unbound("team/vm", "openai/gpt-4o"),
        };
        let body = br#"{"id":"resp_own","previous_response_id":"resp_prev","metadata":{"id":"resp_abc123"},"user":"resp_abc123","prompt_cache_key":"resp_abc123"}"#;
        let out: serde_json::Value =
            serde_json::from_slice(&rewrite_whole(body, &mut minter)).unwrap();
        for (field, raw) in [("id", "resp_own"), ("previous_response_id", "resp_prev")] {
            let minted = out[field].as_str().unwrap();
            let origin = id::decode(&keys, minted).unwrap();
            assert_eq!(
                (origin.provider_id.as_str(), origin.model.as_str()),
                (raw, "openai/gpt-4o")
            );
        }
        assert_eq!(out["metadata"]["id"], "resp_abc123");
        assert_eq!(out["user"], "resp_abc123");
        assert_eq!(out["prompt_cache_key"], "resp_abc123");
    }
}
