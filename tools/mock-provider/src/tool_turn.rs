//! What a chat answers when the conversation uses tools: a request with tools
//! whose last turn is the user's gets a call of a tool (so a client's two-step
//! tool loop can run against the mock); a last turn carrying tool results gets
//! text quoting them, so a test sees the result arrived. Pure functions of the
//! request body, for Chat Completions and Messages alike.

use serde_json::{Map, Value};

/// The answer a chat request gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// The ordinary generated text.
    Text,
    /// A call of tool `name` with these arguments (a JSON object).
    Call { name: String, arguments: Value },
    /// Text quoting the tool results of the last turn.
    Quote(String),
}

impl Turn {
    fn quote(results: &[String]) -> Self {
        Self::Quote(format!("The tool said: {}", results.join("; ")))
    }
}

/// Chat Completions: trailing `tool` messages are quoted; a last `user`
/// message with function tools (and `tool_choice` not `none`) gets a call.
pub fn openai(body: &Value) -> Turn {
    let messages = body.get("messages").and_then(Value::as_array);
    let messages = messages.map_or(&[][..], Vec::as_slice);
    let results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| role(m) == "tool")
        .map(|m| text_of(m.get("content")))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if !results.is_empty() {
        return Turn::quote(&results);
    }
    if messages.last().map(role) != Some("user") {
        return Turn::Text;
    }
    let tools: Vec<&Map<String, Value>> = list(body, "tools")
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .filter_map(|t| t.get("function").and_then(Value::as_object))
        .collect();
    // OpenAI tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}.
    let choice = body.get("tool_choice");
    if choice.and_then(Value::as_str) == Some("none") {
        return Turn::Text;
    }
    let named = choice.and_then(|c| c.pointer("/function/name"));
    call(&tools, named.and_then(Value::as_str), "parameters")
}

/// Messages: `tool_result` blocks of a last user turn are quoted; a last
/// user turn without them, with custom tools (and `tool_choice` not `none`), gets a call.
pub fn anthropic(body: &Value) -> Turn {
    let last = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last());
    let Some(last) = last.filter(|m| m.get("role").and_then(Value::as_str) == Some("user")) else {
        return Turn::Text;
    };
    let blocks = last.get("content").and_then(Value::as_array);
    let results: Vec<String> = blocks
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| text_of(b.get("content")))
        .collect();
    if !results.is_empty() {
        return Turn::quote(&results);
    }
    let tools: Vec<&Map<String, Value>> = list(body, "tools")
        .filter(|t| t.contains_key("input_schema"))
        .collect();
    // Anthropic tool_choice: {"type": "auto" | "any" | "tool" (with "name") | "none"}.
    let choice = body.get("tool_choice");
    if choice.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("none") {
        return Turn::Text;
    }
    let named = choice.and_then(|c| c.get("name")).and_then(Value::as_str);
    call(&tools, named, "input_schema")
}

/// The objects of the array `field` of `body`.
fn list<'a>(body: &'a Value, field: &str) -> impl Iterator<Item = &'a Map<String, Value>> {
    body.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

/// A call of the tool named `named` if there is one, else of the first tool.
fn call(tools: &[&Map<String, Value>], named: Option<&str>, schema: &str) -> Turn {
    let name_of = |t: &Map<String, Value>| t.get("name").and_then(Value::as_str).map(str::to_owned);
    let tool = named
        .and_then(|n| tools.iter().find(|t| name_of(t).as_deref() == Some(n)))
        .or_else(|| tools.first());
    match tool.and_then(|t| name_of(t).map(|name| (name, t))) {
        Some((name, tool)) => Turn::Call {
            name,
            arguments: arguments(tool.get(schema)),
        },
        None => Turn::Text,
    }
}

/// Arguments satisfying a JSON schema's required properties: strings are
/// `"x"`, numbers 1, booleans true, arrays and objects empty, an enum its
/// first value. `{}` without a schema or required properties.
pub fn arguments(schema: Option<&Value>) -> Value {
    let properties = schema.and_then(|s| s.get("properties"));
    let required = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array);
    let mut args = Map::new();
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        let property = properties.and_then(|p| p.get(name));
        args.insert(name.to_owned(), sample(property));
    }
    Value::Object(args)
}

fn sample(property: Option<&Value>) -> Value {
    let first_enum = property
        .and_then(|p| p.get("enum"))
        .and_then(Value::as_array)
        .and_then(|e| e.first());
    if let Some(value) = first_enum {
        return value.clone();
    }
    // A type list such as ["string", "null"] takes its first type.
    let kind = property.and_then(|p| p.get("type")).and_then(|t| match t {
        Value::Array(types) => types.first().and_then(Value::as_str),
        other => other.as_str(),
    });
    match kind {
        Some("integer" | "number") => Value::from(1),
        Some("boolean") => Value::Bool(true),
        Some("array") => Value::Array(Vec::new()),
        Some("object") => Value::Object(Map::new()),
        Some("null") => Value::Null,
        _ => Value::from("x"),
    }
}

/// The text of a tool result's content: a string, or its text parts joined.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// `text` in pieces of at most `size` characters (at least one piece), as
/// argument fragments stream.
pub fn fragments(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// A message's `role` ("" without one).
fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// OpenAI's function calling guide's weather tool.
    fn weather_tool() -> Value {
        json!({"type": "function", "function": {
            "name": "get_weather",
            "description": "Get current temperature for a given location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"},
                    "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer"},
                    "verbose": {"type": "boolean"},
                },
                "required": ["location", "units", "days", "verbose"],
                "additionalProperties": false,
            },
            "strict": true,
        }})
    }

    #[test]
    fn openai_user_turn_with_tools_gets_a_call() {
        let body = json!({
            "model": "gpt-4.1",
            "messages": [{"role": "user", "content": "What is the weather like in Paris today?"}],
            "tools": [weather_tool()],
        });
        assert_eq!(
            openai(&body),
            Turn::Call {
                name: "get_weather".into(),
                arguments: json!({"location": "x", "units": "celsius", "days": 1, "verbose": true}),
            }
        );
        let mut none = body.clone();
        none["tool_choice"] = json!("none");
        assert_eq!(openai(&none), Turn::Text);
        let mut no_tools = body.clone();
        no_tools.as_object_mut().unwrap().remove("tools");
        assert_eq!(openai(&no_tools), Turn::Text);
    }

    #[test]
    fn openai_named_tool_choice_picks_that_tool() {
        let other = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}});
        let body = json!({
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [weather_tool(), other],
            "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        });
        assert_eq!(
            openai(&body),
            Turn::Call {
                name: "lookup".into(),
                arguments: json!({})
            }
        );
    }

    #[test]
    fn openai_trailing_tool_messages_are_quoted() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Bogotá?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "14°C"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "18°C"}]},
            ],
            "tools": [weather_tool()],
        });
        assert_eq!(
            openai(&body),
            Turn::Quote("The tool said: 14°C; 18°C".into())
        );
        let assistant_last = json!({"messages": [{"role": "assistant", "content": "hi"}], "tools": [weather_tool()]});
        assert_eq!(openai(&assistant_last), Turn::Text);
    }

    #[test]
    fn anthropic_turns() {
        // Anthropic's tool use guide's get_weather tool.
        let tool = json!({
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "unit": {"type": ["string", "null"]}},
                "required": ["location", "unit"],
            },
        });
        let ask = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": [tool],
            "messages": [{"role": "user", "content": "What's the weather like in San Francisco?"}],
        });
        assert_eq!(
            anthropic(&ask),
            Turn::Call {
                name: "get_weather".into(),
                arguments: json!({"location": "x", "unit": "x"})
            }
        );
        let mut none = ask.clone();
        none["tool_choice"] = json!({"type": "none"});
        assert_eq!(anthropic(&none), Turn::Text);
        let mut answered = ask.clone();
        answered["messages"] = json!([
            {"role": "user", "content": "What's the weather like in San Francisco?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "San Francisco, CA"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees"}]},
        ]);
        assert_eq!(
            anthropic(&answered),
            Turn::Quote("The tool said: 15 degrees".into())
        );
        assert_eq!(anthropic(&json!({"messages": "nonsense"})), Turn::Text);
    }

    #[test]
    fn fragments_split_on_characters() {
        assert_eq!(fragments("{\"a\":\"é\"}", 4), ["{\"a\"", ":\"é\"", "}"]);
        assert_eq!(fragments("", 4), [""]);
        assert_eq!(fragments("ab", 0), ["a", "b"]);
    }
}
