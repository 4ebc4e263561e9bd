//! The optional classifier model of `complexity-based-routing` (TrueFoundry virtual models,
//! "Complexity-based routing"): a catalog chat model is asked for the tier of a request and answers
//! with one word. Its call is made by the adapter with a timeout; no answer, or an answer that is
//! not a tier, leaves the decision to the in-process heuristic.

use crate::core::config::{Model, Tier};

/// Characters of the request's text the classifier sees (the start says enough).
pub const MAX_TEXT: usize = 4_000;

const INSTRUCTIONS: &str = "Classify how hard the following request is for a language model. \
Answer with exactly one word: simple, medium or complex.";

/// The chat completion body asking `model` for the tier of `text`.
pub fn request_body(model: &Model, text: &str) -> Vec<u8> {
    let cut: String = text.chars().take(MAX_TEXT).collect();
    serde_json::json!({
        "model": model.upstream_model,
        "temperature": 0,
        "max_tokens": 3,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": cut},
        ],
    })
    .to_string()
    .into_bytes()
}

/// The tier in a chat completion answer: the first word of the first choice's message.
pub fn parse_answer(body: &[u8]) -> Option<Tier> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let content = v.pointer("/choices/0/message/content")?.as_str()?;
    let word: String = content
        .split_whitespace()
        .next()?
        .chars()
        // Tier names are ASCII: Unicode case tables would only add .wasm size.
        .filter(char::is_ascii_alphabetic)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    Tier::from_name(&word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_word_of_the_answer() {
        let answer = |text: &str| {
            serde_json::json!({"choices": [{"message": {"role": "assistant", "content": text}}]})
                .to_string()
        };
        assert_eq!(
            parse_answer(answer("Complex.").as_bytes()),
            Some(Tier::Complex)
        );
        assert_eq!(
            parse_answer(answer(" simple ").as_bytes()),
            Some(Tier::Simple)
        );
        assert_eq!(parse_answer(answer("hard").as_bytes()), None);
        assert_eq!(parse_answer(b"not json"), None);
        assert_eq!(parse_answer(br#"{"error":{"message":"x"}}"#), None);
    }

    #[test]
    fn asks_the_model_by_its_upstream_name_with_the_text_cut_short() {
        let config = crate::core::config::Config::parse(
            br#"{"models": [{"name": "judge", "cluster": "c", "model": "gpt-4o-mini"}]}"#,
        )
        .unwrap();
        let body = request_body(&config.models[0], &"x".repeat(10_000));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["model"], "gpt-4o-mini");
        assert_eq!(
            v["messages"][1]["content"].as_str().unwrap().len(),
            MAX_TEXT
        );
    }
}
