//! Chat Completions → Messages: a message's content parts and tool calls → content blocks.

use super::{kind, refuse, take, Obj, Untranslatable};
use serde_json::{json, Value};

/// Anthropic vision: the image types it reads.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// A system or developer message's content: a string or text parts.
pub(super) fn system_content(
    i: usize,
    content: Option<Value>,
) -> Result<Vec<Value>, Untranslatable> {
    each_part(i, content, |field, mut part| match kind(&part) {
        "text" => Ok(text_block(&mut part)),
        other => Err(unsupported_part(field, other)),
    })
}

/// A user message's content: a string or text, image and file parts.
pub(super) fn user_content(i: usize, content: Option<Value>) -> Result<Vec<Value>, Untranslatable> {
    each_part(i, content, |field, mut part| match kind(&part) {
        "text" => Ok(text_block(&mut part)),
        "image_url" => image_block(field, &mut part).map(Some),
        "file" => document_block(field, &mut part).map(Some),
        "input_audio" => Err(refuse(field, "Anthropic Messages takes no audio input")),
        other => Err(unsupported_part(field, other)),
    })
}

/// An assistant message's content: a string or text and refusal parts.
pub(super) fn assistant_content(
    i: usize,
    content: Option<Value>,
) -> Result<Vec<Value>, Untranslatable> {
    each_part(i, content, |field, mut part| match kind(&part) {
        "text" => Ok(text_block(&mut part)),
        "refusal" => Ok(match take(&mut part, "refusal") {
            Some(Value::String(s)) if !s.is_empty() => Some(json!({"type": "text", "text": s})),
            _ => None,
        }),
        other => Err(unsupported_part(field, other)),
    })
}

/// A tool message's content → a tool_result's `content`: the string as is, text parts as text
/// blocks; None when empty.
pub(super) fn tool_content(
    i: usize,
    content: Option<Value>,
) -> Result<Option<Value>, Untranslatable> {
    match content {
        Some(Value::String(s)) => Ok((!s.is_empty()).then_some(Value::String(s))),
        other => {
            let blocks = each_part(i, other, |field, mut part| match kind(&part) {
                "text" => Ok(text_block(&mut part)),
                other => Err(unsupported_part(field, other)),
            })?;
            Ok((!blocks.is_empty()).then_some(Value::Array(blocks)))
        }
    }
}

/// Runs `convert` over each part of `content` (a string is one text part); empty parts give
/// no block (Anthropic Messages API: text content blocks must be non-empty).
fn each_part(
    i: usize,
    content: Option<Value>,
    convert: impl Fn(String, Obj) -> Result<Option<Value>, Untranslatable>,
) -> Result<Vec<Value>, Untranslatable> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(parts)) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, part) in parts.into_iter().enumerate() {
                let field = format!("messages[{i}].content[{j}]");
                let Value::Object(part) = part else {
                    return Err(refuse(field, "expected a content part object"));
                };
                blocks.extend(convert(field, part)?);
            }
            Ok(blocks)
        }
        Some(_) => Err(refuse(
            format!("messages[{i}].content"),
            "expected a string or an array of content parts",
        )),
    }
}

fn unsupported_part(field: String, kind: &str) -> Untranslatable {
    refuse(
        field,
        format!("a `{kind}` part has no Anthropic Messages equivalent here"),
    )
}

/// A text part → a text block (None when empty), keeping a `cache_control` the client set.
fn text_block(part: &mut Obj) -> Option<Value> {
    let text = match take(part, "text") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return None,
    };
    let mut block = Obj::new();
    block.insert("type".into(), "text".into());
    block.insert("text".into(), Value::String(text));
    keep_cache_control(part, &mut block);
    Some(Value::Object(block))
}

/// Anthropic prompt caching: `cache_control` is `{type: "ephemeral"}` with an optional `ttl`
/// of `5m` or `1h`; anything else from the client is left out.
fn keep_cache_control(part: &Obj, block: &mut Obj) {
    let Some(Value::Object(cc)) = part.get("cache_control") else {
        return;
    };
    if cc.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return;
    }
    let mut kept = json!({"type": "ephemeral"});
    if let (Some(ttl @ ("5m" | "1h")), Some(obj)) =
        (cc.get("ttl").and_then(Value::as_str), kept.as_object_mut())
    {
        obj.insert("ttl".into(), ttl.into());
    }
    block.insert("cache_control".into(), kept);
}

/// An `image_url` part → an image block: a base64 `data:` URL → a base64 source, an `https` URL
/// → a url source (Anthropic vision, "image sources").
fn image_block(field: String, part: &mut Obj) -> Result<Value, Untranslatable> {
    let url = match take(part, "image_url") {
        Some(Value::Object(mut o)) => take(&mut o, "url"),
        // Some clients send the URL itself.
        other => other,
    };
    let Some(Value::String(mut url)) = url else {
        return Err(refuse(field + ".image_url.url", "expected a string"));
    };
    let source = if url.starts_with("data:") {
        let (media_type, data) = base64_data(&field, &mut url)?;
        let media_type = if media_type == "image/jpg" {
            "image/jpeg".into()
        } else {
            media_type
        };
        if !IMAGE_TYPES.contains(&media_type.as_str()) {
            let reason =
                format!("Anthropic reads jpeg, png, gif and webp images, not {media_type}");
            return Err(refuse(field + ".image_url.url", reason));
        }
        json!({"type": "base64", "media_type": media_type, "data": data})
    } else if url.starts_with("https://") {
        json!({"type": "url", "url": url})
    } else {
        let reason = "expected a base64 data: URL or an https URL";
        return Err(refuse(field + ".image_url.url", reason));
    };
    let mut block = Obj::new();
    block.insert("type".into(), "image".into());
    block.insert("source".into(), source);
    keep_cache_control(part, &mut block);
    Ok(Value::Object(block))
}

/// A `file` part with PDF data → a document block (Anthropic PDF support, base64 source).
/// An OpenAI file id means nothing to Anthropic.
fn document_block(field: String, part: &mut Obj) -> Result<Value, Untranslatable> {
    let Some(Value::Object(mut file)) = take(part, "file") else {
        return Err(refuse(field + ".file", "expected an object"));
    };
    let Some(Value::String(mut data)) = take(&mut file, "file_data") else {
        return Err(refuse(
            field + ".file",
            "only file_data (a PDF) can be sent to Anthropic",
        ));
    };
    let named_pdf = file
        .get("filename")
        .and_then(Value::as_str)
        .is_some_and(|n| n.to_ascii_lowercase().ends_with(".pdf"));
    let data = if data.starts_with("data:") {
        let (media_type, data) = base64_data(&field, &mut data)?;
        if media_type != "application/pdf" {
            return Err(refuse(field + ".file", "Anthropic reads PDF files only"));
        }
        data
    } else if named_pdf {
        data
    } else {
        return Err(refuse(field + ".file", "Anthropic reads PDF files only"));
    };
    let source = json!({"type": "base64", "media_type": "application/pdf", "data": data});
    Ok(json!({"type": "document", "source": source}))
}

/// Splits a `data:<media type>;base64,<data>` URL in place (the data can be megabytes: it is
/// moved, not copied) into its media type and data.
fn base64_data(field: &str, url: &mut String) -> Result<(String, String), Untranslatable> {
    let comma = url.find(',');
    let header = comma.and_then(|c| url.get("data:".len()..c));
    let Some((comma, media_type)) = comma.zip(header.and_then(|h| h.strip_suffix(";base64")))
    else {
        return Err(refuse(field, "expected a base64 data: URL"));
    };
    let media_type = media_type.to_ascii_lowercase();
    url.drain(..=comma);
    Ok((media_type, std::mem::take(url)))
}

/// An assistant message's `tool_calls` → (id, tool_use block) pairs.
pub(super) fn tool_uses(
    i: usize,
    calls: Option<Value>,
) -> Result<Vec<(String, Value)>, Untranslatable> {
    let calls = match calls {
        None => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(_) => {
            return Err(refuse(
                format!("messages[{i}].tool_calls"),
                "expected an array",
            ))
        }
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.into_iter().enumerate() {
        let field = format!("messages[{i}].tool_calls[{j}]");
        let Value::Object(mut call) = call else {
            return Err(refuse(field, "expected an object"));
        };
        if !matches!(kind(&call), "function" | "") {
            return Err(refuse(
                field,
                "only function tool calls have an Anthropic equivalent",
            ));
        }
        let id = call.get("id").and_then(Value::as_str).and_then(tool_id);
        let id = id.ok_or_else(|| refuse(format!("{field}.id"), "expected a tool call id"))?;
        let Some(Value::Object(mut function)) = take(&mut call, "function") else {
            return Err(refuse(format!("{field}.function"), "expected an object"));
        };
        let Some(Value::String(name)) = take(&mut function, "name") else {
            return Err(refuse(
                format!("{field}.function.name"),
                "expected a string",
            ));
        };
        let input = arguments(&field, take(&mut function, "arguments"))?;
        let block = json!({"type": "tool_use", "id": id, "name": name, "input": input});
        out.push((id, block));
    }
    Ok(out)
}

/// A tool call's `arguments` (a JSON string) → `input` (Anthropic tool use: an object). An
/// empty string is taken as no arguments.
fn arguments(field: &str, arguments: Option<Value>) -> Result<Value, Untranslatable> {
    let field = format!("{field}.function.arguments");
    let text = match arguments {
        None => return Ok(json!({})),
        Some(Value::String(s)) => s,
        Some(_) => return Err(refuse(field, "expected a JSON string")),
    };
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(input @ Value::Object(_)) => Ok(input),
        Ok(_) => Err(refuse(field, "expected a JSON object")),
        Err(e) => Err(refuse(field, format!("not valid JSON: {e}"))),
    }
}

/// A tool call id as Anthropic takes it (`^[a-zA-Z0-9_-]+$`): other characters become `_`,
/// the same way on the call and on its answer. None when empty.
pub(super) fn tool_id(raw: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if raw.is_empty() {
        None
    } else if raw.chars().all(ok) {
        Some(raw.to_owned())
    } else {
        Some(raw.chars().map(|c| if ok(c) { c } else { '_' }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(parts: Value) -> Result<Vec<Value>, Untranslatable> {
        user_content(0, Some(parts))
    }

    #[test]
    fn a_data_url_image_becomes_a_base64_source() {
        let out = user(json!([
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}}
        ]))
        .unwrap();
        assert_eq!(
            out[1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
        );
    }

    #[test]
    fn an_https_image_becomes_a_url_source_and_http_is_refused() {
        let url = "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg";
        let out = user(json!([{"type": "image_url", "image_url": {"url": url}}])).unwrap();
        assert_eq!(out[0]["source"], json!({"type": "url", "url": url}));
        let err = user(json!([{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]))
            .unwrap_err();
        assert_eq!(err.field, "messages[0].content[0].image_url.url");
    }

    #[test]
    fn an_image_type_anthropic_cannot_read_is_refused() {
        let err = user(
            json!([{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}]),
        )
        .unwrap_err();
        assert!(err.reason.contains("image/tiff"), "{err:?}");
        let err = user(json!([{"type": "image_url", "image_url": {"url": "data:image/png,raw"}}]))
            .unwrap_err();
        assert_eq!(err.reason, "expected a base64 data: URL");
    }

    #[test]
    fn audio_input_is_refused_naming_the_part() {
        let err = user(json!([
            {"type": "text", "text": "What is in this recording?"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
        ]))
        .unwrap_err();
        assert_eq!(err.field, "messages[0].content[1]");
    }

    #[test]
    fn a_pdf_file_part_becomes_a_document_and_a_file_id_is_refused() {
        let out = user(json!([{"type": "file", "file": {"filename": "draconomicon.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}}]))
            .unwrap();
        assert_eq!(
            out[0],
            json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}})
        );
        let err =
            user(json!([{"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}}]))
                .unwrap_err();
        assert_eq!(err.field, "messages[0].content[0].file");
    }

    #[test]
    fn a_client_cache_control_is_kept_on_its_block() {
        let out = user(json!([{"type": "text", "text": "long doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]))
            .unwrap();
        assert_eq!(
            out[0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
    }

    #[test]
    fn tool_call_arguments_are_parsed_to_input() {
        let calls = json!([{"id": "call_abc123", "type": "function",
            "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Boston, MA\"}"}}]);
        let out = tool_uses(3, Some(calls)).unwrap();
        assert_eq!(
            out[0].1,
            json!({"type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
                   "input": {"location": "Boston, MA"}})
        );
    }

    #[test]
    fn unparseable_or_non_object_arguments_are_refused() {
        for args in ["{\"location\": ", "[1, 2]"] {
            let calls = json!([{"id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": args}}]);
            let err = tool_uses(3, Some(calls)).unwrap_err();
            assert_eq!(err.field, "messages[3].tool_calls[0].function.arguments");
        }
        let calls = json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]);
        assert_eq!(tool_uses(0, Some(calls)).unwrap()[0].1["input"], json!({}));
    }

    #[test]
    fn a_tool_id_anthropic_would_refuse_is_rewritten_the_same_way_each_time() {
        assert_eq!(tool_id("call_abc-1").as_deref(), Some("call_abc-1"));
        assert_eq!(
            tool_id("functions.get_weather:0").as_deref(),
            Some("functions_get_weather_0")
        );
        assert_eq!(tool_id(""), None);
    }
}
