//! `hash-based-routing` (Zuplo model load balancing, "Sticky routing"): every model is scored by
//! hashing the request's key with the model's name, and the highest score wins; the second-highest
//! is the retry model, so it is stable too, and adding or removing a model only moves the keys it
//! wins or was winning. The key is the caller (the `authorization` header), the conversation
//! (system prompt and first user message text), a header or metadata value, or a claim of the JWT
//! Envoy's `jwt_authn` verified (Zuplo model load balancing, "Sticky by user": `request.user.sub`,
//! the authenticated subject, not a raw credential). A request without a usable key goes round
//! robin. Keys are hashed at once, never stored or logged.

use std::borrow::Cow;

use super::rendezvous::{hash64, rendezvous_score};
use super::request::Request;
use super::round_robin;
use crate::core::config::{Config, HashKey, ModelId};
use crate::core::nfc::nfc;

/// Longest key value accepted, in UTF-8 bytes (Zuplo model load balancing, "Sticky by expression").
pub const MAX_KEY_BYTES: usize = 256;

/// The hash of the request's key, or `None` when it has no usable one.
pub fn key_hash(by: &HashKey, request: &Request<'_>) -> Option<u64> {
    let header = |name: &str| request.headers.get(name);
    let hash = match by {
        HashKey::User => hash64(&[header("authorization").filter(|v| !v.is_empty())?]),
        // Zuplo model load balancing, "Sticky routing": a request "has no user message with
        // text, such as an embeddings ... request", has no key; only the conversation APIs
        // carry one (an embeddings or moderations `input` is no user message).
        HashKey::Conversation if !request.endpoint.is_conversation() => return None,
        HashKey::Conversation => {
            let text = crate::core::conversation::key(|name| request.field(name))?;
            hash64(&[text.as_bytes()])
        }
        HashKey::Header(name) => hash64(&[usable(header(name)?)?.as_bytes()]),
        HashKey::Metadata(key) => {
            hash64(&[usable(request.metadata.get(key)?.as_bytes())?.as_bytes()])
        }
        HashKey::Jwt { payload, claim } => {
            let value = request.state.verified_claim(payload, claim)?;
            hash64(&[usable(&value)?.as_bytes()])
        }
        HashKey::Identifier(id) => hash64(&[usable(&request.identifier(id)?)?.as_bytes()]),
    };
    Some(hash)
}

/// Zuplo model load balancing's value rules ("Sticky by expression"): the value made well-formed
/// (invalid UTF-8 becomes U+FFFD) and NFC, then refused when empty, over 256 bytes, or holding a
/// control character, U+2028 or U+2029. The conversation key is hashed as sent: it is long, and
/// those rules are for values.
fn usable(value: &[u8]) -> Option<Cow<'_, str>> {
    // NFC shrinks text at most threefold (three Hangul jamo become one syllable), so a longer
    // value can never pass; refusing it first bounds the work.
    if value.is_empty() || value.len() > 3 * MAX_KEY_BYTES {
        return None;
    }
    let text = match String::from_utf8_lossy(value) {
        Cow::Borrowed(text) => nfc(text),
        // Already owned: keep it when NFC changes nothing, rather than copying it again.
        Cow::Owned(text) => match nfc(&text) {
            Cow::Borrowed(_) => Cow::Owned(text),
            Cow::Owned(normalised) => Cow::Owned(normalised),
        },
    };
    let ok = text.len() <= MAX_KEY_BYTES
        && !text
            .chars()
            .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}');
    ok.then_some(text)
}

/// The order of a request's targets (those it may reach): by its key, or round robin when it
/// has no usable one (Zuplo model load balancing, "Sticky routing").
pub fn route(
    config: &Config,
    index: usize,
    targets: &[ModelId],
    by: &HashKey,
    request: &Request<'_>,
    rng: &mut fastrand::Rng,
) -> Vec<ModelId> {
    match key_hash(by, request) {
        Some(key) => order(config, targets, key),
        None => {
            let start = request.next_turn(&config.caller_identity, index, targets.len(), rng);
            round_robin::order(targets, start)
        }
    }
}

/// Every target by descending score for the key.
pub fn order(config: &Config, targets: &[ModelId], key: u64) -> Vec<ModelId> {
    let name = |m: ModelId| config.model(m).map_or("", |m| m.name.as_str());
    let mut scored: Vec<(f64, ModelId)> = targets
        .iter()
        .map(|m| (rendezvous_score(key, name(*m), 1), *m))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_follow_the_seed_rules() {
        assert!(usable(b"user-42").is_some());
        assert!(usable(b"").is_none());
        assert!(usable(&[b'a'; 257]).is_none());
        assert!(usable(&[b'a'; 256]).is_some());
        assert!(usable(b"a\nb").is_none());
        assert!(usable("a\u{2028}b".as_bytes()).is_none());
        assert_eq!(
            usable(b"a\xffb").as_deref(),
            Some("a\u{fffd}b"),
            "made well-formed"
        );
        assert!(
            usable("Acme".as_bytes()) != usable("acme".as_bytes()),
            "case-sensitive"
        );
    }

    #[test]
    fn two_spellings_of_one_text_share_a_key() {
        let composed = "Jos\u{e9} \u{d55c}";
        let decomposed = "Jose\u{301} \u{1112}\u{1161}\u{11ab}";
        assert_eq!(usable(decomposed.as_bytes()).as_deref(), Some(composed));
        // The 256-byte limit is on the NFC form: 100 decomposed syllables are 900 bytes as
        // sent (too long to try) and 300 after NFC; 80 are 720 bytes sent and 240 after.
        let jamo = |n| "\u{1112}\u{1161}\u{11ab}".repeat(n);
        assert!(usable(jamo(100).as_bytes()).is_none());
        assert_eq!(usable(jamo(80).as_bytes()).map(|t| t.len()), Some(240));
    }

    #[test]
    fn the_retry_model_is_the_second_score_and_removal_moves_only_its_keys() {
        let config = Config::parse(
            br#"{"models": [
                {"name": "azure-eastus/gpt-5", "cluster": "c", "model": "m"},
                {"name": "azure-westus/gpt-5", "cluster": "c", "model": "m"},
                {"name": "openai/gpt-5", "cluster": "c", "model": "m"}]}"#,
        )
        .unwrap();
        let all = [ModelId(0), ModelId(1), ModelId(2)];
        let without_last = [ModelId(0), ModelId(1)];
        let mut firsts = [0u32; 3];
        for key in 0..3_000u64 {
            let o = order(&config, &all, key);
            assert_eq!(o.len(), 3);
            assert_eq!(order(&config, &all, key), o, "stable");
            firsts[o[0].0] += 1;
            if o[0] != ModelId(2) {
                assert_eq!(
                    order(&config, &without_last, key)[0],
                    o[0],
                    "key {key} moved"
                );
            } else {
                assert_eq!(
                    order(&config, &without_last, key)[0],
                    o[1],
                    "its retry model takes over"
                );
            }
        }
        for f in firsts {
            assert!(f.abs_diff(1000) < 130, "{firsts:?}");
        }
    }

    #[test]
    fn only_a_conversation_endpoint_has_a_conversation_key() {
        use crate::core::endpoint::Endpoint;
        use crate::core::headers::NO_HEADERS;
        use crate::core::metadata::Metadata;
        use crate::core::routing::LocalState;
        let body = br#"{"model":"vm","input":"embed me"}"#;
        let fields = crate::core::request::inspect(body).unwrap().fields;
        let (metadata, state) = (Metadata::default(), LocalState::default());
        let key = |endpoint| {
            let request = Request {
                endpoint,
                model: "vm",
                metadata: &metadata,
                headers: &NO_HEADERS,
                state: &state,
                body,
                fields: &fields,
                tier_hint: None,
            };
            key_hash(&HashKey::Conversation, &request)
        };
        // Zuplo model load balancing, "Sticky routing": an embeddings request has no key.
        assert_eq!(key(Endpoint::Embeddings), None);
        assert_eq!(key(Endpoint::Moderations), None);
        assert!(
            key(Endpoint::Responses).is_some(),
            "a Responses input is a user turn"
        );
    }

    #[test]
    fn a_body_key_hashes_its_string_value_and_anything_else_is_no_key() {
        use crate::core::config::{SessionIdentifier, StickySource};
        use crate::core::endpoint::Endpoint;
        use crate::core::headers::NO_HEADERS;
        use crate::core::metadata::Metadata;
        use crate::core::routing::LocalState;
        let (metadata, state) = (Metadata::default(), LocalState::default());
        let by = HashKey::Identifier(SessionIdentifier {
            key: "prompt_cache_key".to_string(),
            source: StickySource::Body,
            payload: String::new(),
        });
        let key = |body: &str| {
            let fields = crate::core::request::inspect(body.as_bytes())
                .unwrap()
                .fields;
            let request = Request {
                endpoint: Endpoint::ChatCompletions,
                model: "vm",
                metadata: &metadata,
                headers: &NO_HEADERS,
                state: &state,
                body: body.as_bytes(),
                fields: &fields,
                tier_hint: None,
            };
            key_hash(&by, &request)
        };
        let one = key(r#"{"model": "vm", "prompt_cache_key": "k1", "messages": []}"#);
        assert!(one.is_some());
        assert_eq!(
            one,
            key(r#"{"prompt_cache_key": "k1", "model": "vm", "n": 2}"#)
        );
        assert_ne!(one, key(r#"{"model": "vm", "prompt_cache_key": "k2"}"#));
        for none in [
            r#"{"model": "vm"}"#,
            r#"{"model": "vm", "prompt_cache_key": 1}"#,
            r#"{"model": "vm", "prompt_cache_key": ""}"#,
        ] {
            assert_eq!(key(none), None, "{none}");
        }
    }
}
