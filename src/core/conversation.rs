//! The conversation key of `hash-based-routing` by conversation (Zuplo model load balancing,
//! "Sticky by conversation"): the system prompt and the first user message with text. Only text
//! counts (images and files do not); a client that resends the whole conversation on every turn
//! sends the same key on every turn. Only the fields needed are parsed, and only for models that
//! route by conversation. The text is hashed by the caller and never kept.

use serde::Deserialize;
use serde_json::value::RawValue;

/// A message's content: a string, or parts of which only text parts count.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
    Other(serde::de::IgnoredAny),
}

/// A content part: its `text`, or an Anthropic `document` block's plain text (Zuplo model load
/// balancing, "Sticky by conversation": "Only text counts, including plain-text documents").
#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    source: Option<Source>,
}

/// A document's `source`: `{"type": "text", "data": "..."}`, or `{"type": "content",
/// "content": ...}` holding text blocks (or a string); a base64 or URL source has no text.
#[derive(Deserialize)]
struct Source {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    content: Option<Content>,
}

impl Part {
    /// The part's text, if it has any.
    fn text(&self) -> Option<String> {
        if let Some(text) = &self.text {
            return Some(text.clone());
        }
        let source = self.source.as_ref()?;
        match source.kind.as_str() {
            "text" => source.data.clone(),
            "content" => Some(text_of(&source.content)).filter(|t| !t.is_empty()),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

fn text_of(content: &Option<Content>) -> String {
    match content {
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(Part::text)
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Content::Other(_)) | None => String::new(),
    }
}

/// Chat `messages` or Responses `input`: a string is itself one user message. Read by the
/// first byte rather than as the untagged `Content`, which would buffer the whole array and
/// then be parsed again.
fn messages(raw: &RawValue) -> Option<Vec<Message>> {
    let json = raw.get();
    if json.starts_with('"') {
        let text: String = serde_json::from_str(json).ok()?;
        return Some(vec![Message {
            role: "user".to_string(),
            content: Some(Content::Text(text)),
        }]);
    }
    serde_json::from_str(json).ok()
}

/// The key text of a request body's conversation, or `None` when it has no user message with
/// text. `field` looks up a top-level field's raw JSON (`messages`, `system`, `input`,
/// `instructions`).
pub fn key<'a>(field: impl Fn(&str) -> Option<&'a RawValue>) -> Option<String> {
    let mut system = String::new();
    // Anthropic `system` and Responses `instructions`: a string or text blocks.
    for name in ["system", "instructions"] {
        if let Some(raw) = field(name) {
            if let Ok(content) = serde_json::from_str::<Content>(raw.get()) {
                system.push_str(&text_of(&Some(content)));
            }
        }
    }
    // Chat `messages` or Responses `input` (a string is itself the first user message).
    let messages = messages(field("messages").or_else(|| field("input"))?)?;
    for m in &messages {
        let text = text_of(&m.content);
        match m.role.as_str() {
            "system" | "developer" => system.push_str(&text),
            "user" if !text.is_empty() => return Some(format!("{system}\u{1f}{text}")),
            _ => {}
        }
    }
    None
}

/// The text a request carries, for the complexity classifier: every message's text (chat
/// `messages`, Responses `input`, completions `prompt`, Anthropic `system`, `instructions`)
/// and the number of turns.
pub fn all_text<'a>(field: impl Fn(&str) -> Option<&'a RawValue>) -> (String, usize) {
    let mut text = String::new();
    let mut turns = 0;
    for name in ["system", "instructions", "prompt"] {
        if let Some(content) =
            field(name).and_then(|raw| serde_json::from_str::<Content>(raw.get()).ok())
        {
            text.push_str(&text_of(&Some(content)));
            text.push('\n');
        }
    }
    if let Some(messages) = field("messages")
        .or_else(|| field("input"))
        .and_then(messages)
    {
        turns = messages.len();
        for m in &messages {
            text.push_str(&text_of(&m.content));
            text.push('\n');
        }
    }
    (text, turns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(body: &str) -> Option<String> {
        let v: std::collections::HashMap<String, Box<RawValue>> =
            serde_json::from_str(body).unwrap();
        key(|name| v.get(name).map(|b| b.as_ref()))
    }

    #[test]
    fn system_prompt_and_first_user_text_make_the_key() {
        let turn1 = r#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}"#;
        let turn2 = r#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
            {"role":"assistant","content":"Hello"},{"role":"user","content":"More"}]}"#;
        assert_eq!(key_of(turn1), Some("Be brief.\u{1f}Hi".to_string()));
        assert_eq!(
            key_of(turn1),
            key_of(turn2),
            "every turn of a conversation has the same key"
        );
    }

    #[test]
    fn images_do_not_count_and_an_image_alone_has_no_key() {
        let with_image = r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"What is this?"}]}]}"#;
        let other_image = r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"y"}},{"type":"text","text":"What is this?"}]}]}"#;
        assert_eq!(key_of(with_image), key_of(other_image));
        let only_image = r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#;
        assert_eq!(key_of(only_image), None);
        assert_eq!(
            key_of(r#"{"input":"embed me"}"#),
            Some("\u{1f}embed me".to_string())
        );
    }

    #[test]
    fn all_text_gathers_every_message_and_counts_turns() {
        let v: std::collections::HashMap<String, Box<RawValue>> = serde_json::from_str(
            r#"{"system":"S","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}]}]}"#,
        )
        .unwrap();
        let (text, turns) = all_text(|n| v.get(n).map(|b| b.as_ref()));
        assert_eq!((text.as_str(), turns), ("S\na\nb\n", 2));
    }

    #[test]
    fn anthropic_system_and_responses_instructions_count_as_the_system_prompt() {
        let messages = r#"{"system":"Be kind.","messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}"#;
        assert_eq!(key_of(messages), Some("Be kind.\u{1f}Hi".to_string()));
        let responses = r#"{"instructions":"Be kind.","input":[{"role":"developer","content":"Short."},{"role":"user","content":[{"type":"input_text","text":"Hi"}]}]}"#;
        assert_eq!(
            key_of(responses),
            Some("Be kind.Short.\u{1f}Hi".to_string())
        );
        assert_eq!(key_of(r#"{"messages":[]}"#), None);
        assert_eq!(key_of(r#"{"x":1}"#), None);
    }

    #[test]
    fn plain_text_documents_count_as_text_and_other_documents_do_not() {
        let doc = |source: &str| {
            format!(
                r#"{{"messages":[{{"role":"user","content":[{{"type":"document","source":{source}}}]}}]}}"#
            )
        };
        let text = doc(r#"{"type":"text","media_type":"text/plain","data":"The grass is green."}"#);
        assert_eq!(key_of(&text), Some("\u{1f}The grass is green.".to_string()));
        let blocks = doc(r#"{"type":"content","content":[{"type":"text","text":"Part one."}]}"#);
        assert_eq!(key_of(&blocks), Some("\u{1f}Part one.".to_string()));
        let pdf = doc(r#"{"type":"base64","media_type":"application/pdf","data":"JVBERi0x"}"#);
        assert_eq!(key_of(&pdf), None, "a PDF is no text");
        assert_eq!(
            key_of(&doc(r#"{"type":"url","url":"https://example.com/a.pdf"}"#)),
            None
        );
    }
}
