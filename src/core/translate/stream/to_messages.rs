//! OpenAI Chat Completions chunks → Anthropic Messages events.

use super::{write_event, Translate, NOT_JSON, NO_MESSAGE};
use crate::core::translate::answer::{self, ChatUsageIn, MessagesUsageOut};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A `chat.completion.chunk` as read.
#[derive(Deserialize)]
struct ChatChunk<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<Vec<ChoiceIn<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsageIn>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    delta: Option<DeltaIn<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaIn<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolDeltaIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolDeltaIn<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionDeltaIn<'a>>,
}

#[derive(Deserialize)]
struct FunctionDeltaIn<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

/// The Messages events written (Anthropic Messages API, "Streaming Messages").
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: StartOut<'a>,
    },
    ContentBlockStart {
        index: u32,
        content_block: BlockStartOut<'a>,
    },
    ContentBlockDelta {
        index: u32,
        delta: DeltaOut<'a>,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: StopOut,
        usage: MessagesUsageOut,
    },
    MessageStop,
}

impl Event<'_> {
    /// The `event:` name, which Anthropic sends as the JSON's `type`.
    fn name(&self) -> &'static [u8] {
        match self {
            Event::MessageStart { .. } => b"message_start",
            Event::ContentBlockStart { .. } => b"content_block_start",
            Event::ContentBlockDelta { .. } => b"content_block_delta",
            Event::ContentBlockStop { .. } => b"content_block_stop",
            Event::MessageDelta { .. } => b"message_delta",
            Event::MessageStop => b"message_stop",
        }
    }
}

#[derive(Serialize)]
struct StartOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    content: [(); 0],
    model: &'a str,
    stop_reason: Option<()>,
    stop_sequence: Option<()>,
    usage: MessagesUsageOut,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStartOut<'a> {
    Text {
        text: &'static str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaOut<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct StopOut {
    stop_reason: &'static str,
    stop_sequence: Option<()>,
}

/// The content block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Text(u32),
    Tool(u32),
}

/// The translation's state between events.
#[derive(Debug)]
pub struct ToMessages {
    id: String,
    model: String,
    started: bool,
    open: Open,
    next_block: u32,
    /// OpenAI `tool_calls` index → content block index.
    tools: Vec<(u32, u32)>,
    stop: Option<&'static str>,
    usage: Option<MessagesUsageOut>,
    /// `message_delta` was sent.
    delta_sent: bool,
    /// `message_stop` or an error was sent: the rest of the stream is dropped.
    done: bool,
}

const NO_USAGE: MessagesUsageOut = MessagesUsageOut {
    input_tokens: 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    output_tokens: 0,
};

impl ToMessages {
    /// See [`ChatToMessages::new`](super::ChatToMessages::new).
    pub(super) fn new(id: &str) -> ToMessages {
        ToMessages {
            id: id.to_owned(),
            model: String::new(),
            started: false,
            open: Open::None,
            next_block: 0,
            tools: Vec::new(),
            stop: None,
            usage: None,
            delta_sent: false,
            done: false,
        }
    }

    /// The id and model, from the first chunk that has them (Azure's first chunk has neither).
    fn learn(&mut self, chunk: &ChatChunk<'_>) {
        if let Some(model) = chunk.model.as_deref().filter(|m| !m.is_empty()) {
            if self.model.is_empty() {
                self.model = model.to_owned();
            }
        }
        if let Some(id) = chunk.id.as_deref().filter(|i| !i.is_empty()) {
            if self.id.is_empty() {
                self.id = answer::message_id(id);
            }
        }
    }

    fn ensure_started(&mut self, usage: Option<ChatUsageIn>, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        // Anthropic's `message_start` carries the input tokens; OpenAI reports usage last, so
        // they are 0 here and come in `message_delta`.
        let usage = usage.map_or(NO_USAGE, ChatUsageIn::to_messages);
        let message = StartOut {
            id: &self.id,
            kind: "message",
            role: "assistant",
            content: [],
            model: &self.model,
            stop_reason: None,
            stop_sequence: None,
            usage: MessagesUsageOut {
                output_tokens: 0,
                ..usage
            },
        };
        emit(out, &Event::MessageStart { message });
    }

    fn choice(&mut self, choice: &ChoiceIn<'_>, out: &mut Vec<u8>) {
        if let Some(delta) = &choice.delta {
            for text in [&delta.content, &delta.refusal].into_iter().flatten() {
                if !text.is_empty() {
                    self.text(text, out);
                }
            }
            for call in delta.tool_calls.iter().flatten() {
                self.tool_call(call, out);
            }
        }
        if let Some(reason) = &choice.finish_reason {
            self.close(out);
            self.stop = Some(answer::stop_reason(reason));
        }
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        let index = match self.open {
            Open::Text(index) => index,
            _ => {
                self.close(out);
                let index = self.open_block(Open::Text);
                let content_block = BlockStartOut::Text { text: "" };
                emit(
                    out,
                    &Event::ContentBlockStart {
                        index,
                        content_block,
                    },
                );
                index
            }
        };
        let delta = DeltaOut::TextDelta { text };
        emit(out, &Event::ContentBlockDelta { index, delta });
    }

    /// A tool call's first fragment (an index not seen yet) starts a `tool_use` block; its
    /// argument fragments are `input_json_delta`s of that block.
    fn tool_call(&mut self, call: &ToolDeltaIn<'_>, out: &mut Vec<u8>) {
        let function = call.function.as_ref();
        let index = match self.tools.iter().find(|(tool, _)| *tool == call.index) {
            Some(&(_, block)) => block,
            None => {
                self.close(out);
                let block = self.open_block(Open::Tool);
                self.tools.push((call.index, block));
                let minted;
                let id = match call.id.as_deref() {
                    Some(id) => id,
                    None => {
                        minted = format!("toolu_{}_{}", self.id, call.index);
                        &minted
                    }
                };
                let name = function.and_then(|f| f.name.as_deref()).unwrap_or_default();
                let content_block = BlockStartOut::ToolUse {
                    id,
                    name,
                    input: Empty {},
                };
                emit(
                    out,
                    &Event::ContentBlockStart {
                        index: block,
                        content_block,
                    },
                );
                block
            }
        };
        let arguments = function.and_then(|f| f.arguments.as_deref());
        if let Some(partial_json) = arguments.filter(|a| !a.is_empty()) {
            let delta = DeltaOut::InputJsonDelta { partial_json };
            emit(out, &Event::ContentBlockDelta { index, delta });
        }
    }

    fn open_block(&mut self, open: fn(u32) -> Open) -> u32 {
        let index = self.next_block;
        self.next_block = self.next_block.saturating_add(1);
        self.open = open(index);
        index
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::Text(index) | Open::Tool(index) => {
                emit(out, &Event::ContentBlockStop { index });
            }
            Open::None => {}
        }
    }

    fn message_delta(&mut self, out: &mut Vec<u8>) {
        self.delta_sent = true;
        let delta = StopOut {
            stop_reason: self.stop.unwrap_or("end_turn"),
            stop_sequence: None,
        };
        // Cumulative counts, the input's too, as Anthropic's `message_delta` gives them.
        let usage = self.usage.unwrap_or(NO_USAGE);
        emit(out, &Event::MessageDelta { delta, usage });
    }

    /// `[DONE]`: what was not sent yet, then `message_stop`.
    fn end(&mut self, out: &mut Vec<u8>) {
        self.ensure_started(None, out);
        self.close(out);
        if !self.delta_sent {
            self.message_delta(out);
        }
        emit(out, &Event::MessageStop);
        self.done = true;
    }

    /// OpenAI's mid-stream error (`{"error": {…}}`) → Anthropic's `event: error`.
    fn error(&mut self, error: Option<&serde_json::Value>, out: &mut Vec<u8>) {
        let field = |key: &str| error.and_then(|e| e.get(key)).and_then(|v| v.as_str());
        let message = field("message")
            .or_else(|| error.and_then(|e| e.as_str()))
            .unwrap_or(NO_MESSAGE);
        // After the 200, no status tells the failure: the type or code does.
        let kind = answer::anthropic_error_type(200, field("type"), field("code"));
        self.error_event(kind, message, out);
    }

    fn error_event(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"event: error\ndata: ");
        out.extend_from_slice(&answer::anthropic_error(kind, message));
        out.extend_from_slice(b"\n\n");
        self.done = true;
    }
}

impl Translate for ToMessages {
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>) {
        let data = data.trim_ascii();
        if self.done || data.is_empty() {
            return;
        }
        if data == b"[DONE]" {
            return self.end(out);
        }
        let Ok(chunk) = serde_json::from_slice::<ChatChunk<'_>>(data) else {
            return self.fail(NOT_JSON, out);
        };
        if chunk.error.is_some() || name == b"error" {
            return self.error(chunk.error.as_ref(), out);
        }
        self.learn(&chunk);
        let choice = chunk.choices.iter().flatten().find(|c| c.index == 0);
        if choice.is_some() || chunk.usage.is_some() {
            self.ensure_started(chunk.usage, out);
        }
        if let Some(choice) = choice {
            self.choice(choice, out);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.to_messages());
        }
        // Both the finish reason and the usage chunk make `message_delta`; OpenAI sends the
        // usage chunk after the finish reason's when `include_usage`.
        if let (Some(_), Some(_), false) = (self.stop, self.usage, self.delta_sent) {
            self.message_delta(out);
        }
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        self.error_event("api_error", message, out);
    }

    fn done(&self) -> bool {
        self.done
    }
}

fn emit(out: &mut Vec<u8>, event: &Event<'_>) {
    let at = out.len();
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.name());
    out.push(b'\n');
    let len = out.len();
    write_event(out, b"data: ", event);
    if out.len() == len {
        out.truncate(at);
    }
}
