//! Anthropic Messages events → OpenAI Chat Completions chunks.

use super::{write_event, Translate, NOT_JSON, NO_MESSAGE};
use crate::core::translate::answer::{self, ChatUsage, MessagesUsage};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// One Anthropic stream event (Anthropic Messages API, "Streaming Messages", event types):
/// the fields of every type, each read where it is present.
#[derive(Deserialize)]
struct MessagesEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    index: u64,
    #[serde(borrow, default)]
    message: Option<StartMessage<'a>>,
    #[serde(borrow, default)]
    content_block: Option<StartBlock<'a>>,
    #[serde(borrow, default)]
    delta: Option<EventDelta<'a>>,
    #[serde(default)]
    usage: Option<MessagesUsage>,
    #[serde(borrow, default)]
    error: Option<ErrorIn<'a>>,
}

#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(borrow, default)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    model: Cow<'a, str>,
    #[serde(default)]
    usage: MessagesUsage,
}

#[derive(Deserialize)]
struct StartBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// A `content_block_delta`'s or a `message_delta`'s delta.
#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ErrorIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

/// A `chat.completion.chunk` (OpenAI Chat Completions, "The chat completion chunk object").
#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    /// `stream_options.include_usage`: "All other chunks will also include a usage field, but
    /// with a null value"; absent when not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<ChatUsage>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: ChunkDelta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct ChunkDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDelta<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCallDelta<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// The translation's state between events.
#[derive(Debug)]
pub struct ToChat {
    id: String,
    created: u64,
    include_usage: bool,
    model: String,
    /// Anthropic content block index → `tool_calls` index, for the `tool_use` blocks.
    tools: Vec<(u64, u32)>,
    usage: MessagesUsage,
    /// The finish reason chunk was sent.
    finished: bool,
    /// `[DONE]` or an error was sent: the rest of the stream is dropped.
    done: bool,
}

impl ToChat {
    /// See [`MessagesToChat::new`](super::MessagesToChat::new).
    pub(super) fn new(id: &str, created_s: u64, include_usage: bool) -> ToChat {
        ToChat {
            id: id.to_owned(),
            created: created_s,
            include_usage,
            model: String::new(),
            tools: Vec::new(),
            usage: MessagesUsage::default(),
            finished: false,
            done: false,
        }
    }

    fn start(&mut self, message: Option<StartMessage<'_>>, out: &mut Vec<u8>) {
        if let Some(message) = message {
            self.model = message.model.into_owned();
            self.usage.update(&message.usage);
            if self.id.is_empty() {
                self.id = answer::chat_id(&message.id);
            }
        }
        // OpenAI's first chunk carries the role and an empty content.
        let delta = ChunkDelta {
            role: Some("assistant"),
            content: Some(""),
            ..ChunkDelta::default()
        };
        self.chunk(delta, None, out);
    }

    fn block_start(&mut self, index: u64, block: Option<StartBlock<'_>>, out: &mut Vec<u8>) {
        let Some(block) = block else { return };
        match block.kind.as_ref() {
            "text" => {
                if let Some(text) = block.text.as_deref().filter(|t| !t.is_empty()) {
                    self.text(text, out);
                }
            }
            // The client's own tools only: a `server_tool_use` runs at Anthropic.
            "tool_use" => {
                let tool = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
                self.tools.push((index, tool));
                let call = ToolCallDelta {
                    index: tool,
                    id: Some(block.id.as_deref().unwrap_or_default()),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(block.name.as_deref().unwrap_or_default()),
                        arguments: "",
                    },
                };
                self.tool_chunk(call, out);
            }
            // Thinking and server tool blocks have no Chat Completions form: dropped.
            _ => {}
        }
    }

    fn block_delta(&mut self, index: u64, delta: Option<EventDelta<'_>>, out: &mut Vec<u8>) {
        let Some(delta) = delta else { return };
        match delta.kind.as_deref() {
            Some("text_delta") => {
                if let Some(text) = delta.text.as_deref().filter(|t| !t.is_empty()) {
                    self.text(text, out);
                }
            }
            Some("input_json_delta") => {
                let tool = self.tools.iter().find(|(block, _)| *block == index);
                let partial = delta.partial_json.as_deref().unwrap_or_default();
                if let (Some(&(_, tool)), false) = (tool, partial.is_empty()) {
                    let call = ToolCallDelta {
                        index: tool,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: partial,
                        },
                    };
                    self.tool_chunk(call, out);
                }
            }
            // thinking_delta, signature_delta, citations_delta: no Chat Completions form.
            _ => {}
        }
    }

    fn message_delta(
        &mut self,
        delta: Option<EventDelta<'_>>,
        usage: Option<MessagesUsage>,
        out: &mut Vec<u8>,
    ) {
        if let Some(usage) = usage {
            // Anthropic: the counts in `message_delta` are cumulative.
            self.usage.update(&usage);
        }
        let stop = delta.and_then(|d| d.stop_reason);
        if let (Some(stop), false) = (stop, self.finished) {
            self.finish_chunk(answer::finish_reason(&stop), out);
        }
    }

    fn stop(&mut self, out: &mut Vec<u8>) {
        if !self.finished {
            self.finish_chunk("stop", out);
        }
        if self.include_usage {
            // OpenAI, `stream_options.include_usage`: one more chunk before `[DONE]`, its
            // `choices` empty.
            let chunk = Chunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: &[],
                usage: Some(Some(self.usage.to_chat())),
            };
            write_event(out, b"data: ", &chunk);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        self.done = true;
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        let delta = ChunkDelta {
            content: Some(text),
            ..ChunkDelta::default()
        };
        self.chunk(delta, None, out);
    }

    fn tool_chunk(&mut self, call: ToolCallDelta<'_>, out: &mut Vec<u8>) {
        let delta = ChunkDelta {
            tool_calls: Some([call]),
            ..ChunkDelta::default()
        };
        self.chunk(delta, None, out);
    }

    fn finish_chunk(&mut self, reason: &'static str, out: &mut Vec<u8>) {
        self.finished = true;
        self.chunk(ChunkDelta::default(), Some(reason), out);
    }

    fn chunk(&self, delta: ChunkDelta<'_>, finish: Option<&'static str>, out: &mut Vec<u8>) {
        let choice = ChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        };
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: std::slice::from_ref(&choice),
            usage: self.include_usage.then_some(None),
        };
        write_event(out, b"data: ", &chunk);
    }

    /// An error in OpenAI's shape, as OpenAI sends one mid-stream (a `data:` line whose JSON
    /// has `error`), and no `[DONE]`.
    fn error(&mut self, message: &str, kind: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&answer::openai_error(message, kind));
        out.extend_from_slice(b"\n\n");
        self.done = true;
    }
}

impl Translate for ToChat {
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>) {
        // An empty `data:` (a keep-alive some servers send) carries nothing.
        if self.done || data.trim_ascii().is_empty() {
            return;
        }
        let Ok(event) = serde_json::from_slice::<MessagesEvent<'_>>(data) else {
            return self.fail(NOT_JSON, out);
        };
        // The JSON's `type` names the event as its `event:` line does; trusted first.
        let kind = match &event.kind {
            Some(kind) => kind.as_ref(),
            None => std::str::from_utf8(name).unwrap_or_default(),
        };
        match kind {
            "message_start" => self.start(event.message, out),
            "content_block_start" => self.block_start(event.index, event.content_block, out),
            "content_block_delta" => self.block_delta(event.index, event.delta, out),
            "message_delta" => self.message_delta(event.delta, event.usage, out),
            "message_stop" => self.stop(out),
            "error" => {
                let error = event.error;
                let kind = error.as_ref().and_then(|e| e.kind.as_deref());
                let message = error.as_ref().and_then(|e| e.message.as_deref());
                self.error(
                    message.unwrap_or(NO_MESSAGE),
                    kind.unwrap_or("api_error"),
                    out,
                );
            }
            // `ping`, `content_block_stop`, and event types added later (Anthropic Messages API,
            // "Streaming Messages", "Other events": handle unknown event types gracefully).
            _ => {}
        }
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        self.error(message, "api_error", out);
    }

    fn done(&self) -> bool {
        self.done
    }
}
