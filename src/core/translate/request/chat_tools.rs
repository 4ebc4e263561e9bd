//! Chat Completions → Messages: `tools`, `tool_choice` and `parallel_tool_calls`.

use super::chat_turns::Conversation;
use super::{kind, refuse, take, Untranslatable};
use serde_json::{json, Value};

/// `tools` (function tools) → Anthropic tools: `parameters` → `input_schema`.
pub(super) fn tools(tools: Option<Value>) -> Result<Vec<Value>, Untranslatable> {
    let tools = match tools {
        None => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(refuse("tools", "expected an array")),
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.into_iter().enumerate() {
        let field = format!("tools[{i}]");
        let Value::Object(mut tool) = tool else {
            return Err(refuse(field, "expected an object"));
        };
        if kind(&tool) != "function" {
            return Err(refuse(
                field,
                "only function tools have an Anthropic equivalent",
            ));
        }
        let Some(Value::Object(mut function)) = take(&mut tool, "function") else {
            return Err(refuse(field + ".function", "expected an object"));
        };
        let Some(Value::String(name)) = take(&mut function, "name") else {
            return Err(refuse(field + ".function.name", "expected a string"));
        };
        let mut schema = match take(&mut function, "parameters") {
            None => json!({}),
            Some(schema @ Value::Object(_)) => schema,
            Some(_) => return Err(refuse(field + ".function.parameters", "expected an object")),
        };
        // Anthropic tool use: `input_schema` is required and describes an object; OpenAI takes
        // a tool with no parameters, and `{}`.
        if let Some(obj) = schema.as_object_mut() {
            obj.entry("type").or_insert_with(|| "object".into());
        }
        let mut out_tool = json!({"name": name, "input_schema": schema});
        if let (Some(Value::String(d)), Some(obj)) =
            (take(&mut function, "description"), out_tool.as_object_mut())
        {
            obj.insert("description".into(), Value::String(d));
        }
        out.push(out_tool);
    }
    Ok(out)
}

/// `tool_choice` and `parallel_tool_calls: false` → Anthropic's `tool_choice` (none without
/// tools: OpenAI takes a `tool_choice` only with tools, and there is nothing to choose).
pub(super) fn tool_choice(
    choice: Option<Value>,
    parallel: Option<&Value>,
    tools: &[Value],
) -> Result<Option<Value>, Untranslatable> {
    let serial = match parallel {
        None | Some(Value::Bool(true)) => false,
        Some(Value::Bool(false)) => true,
        Some(_) => return Err(refuse("parallel_tool_calls", "expected a boolean")),
    };
    let mut out = match choice {
        None => json!({"type": "auto"}),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            _ => return Err(refuse("tool_choice", "expected auto, none or required")),
        },
        Some(Value::Object(mut o)) if kind(&o) == "function" => {
            let name =
                take(&mut o, "function").and_then(|mut f| f.get_mut("name").map(Value::take));
            let Some(name @ Value::String(_)) = name else {
                return Err(refuse("tool_choice.function.name", "expected a string"));
            };
            json!({"type": "tool", "name": name})
        }
        Some(_) => {
            let reason =
                "only auto, none, required and a named function have an Anthropic equivalent";
            return Err(refuse("tool_choice", reason));
        }
    };
    if tools.is_empty() {
        return Ok(None);
    }
    // Anthropic tool use: `disable_parallel_tool_use` goes on auto, any and tool; none has it not.
    let is_none = out.get("type").and_then(Value::as_str) == Some("none");
    if let (true, false, Some(obj)) = (serial, is_none, out.as_object_mut()) {
        obj.insert("disable_parallel_tool_use".into(), true.into());
    }
    // Plain auto is Anthropic's default when tools are given: nothing to send.
    Ok((out != json!({"type": "auto"})).then_some(out))
}

/// Tools for a history that holds tool calls when the client offers none now: each name called,
/// with an open schema.
pub(super) fn placeholders(conv: &Conversation) -> Vec<Value> {
    let mut names: Vec<&str> = Vec::new();
    let blocks = conv.turns.iter().flat_map(|t| &t.content);
    for name in blocks.filter_map(|b| b.get("name").and_then(Value::as_str)) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let schema = json!({"type": "object"});
    let description = "Called earlier in this conversation; not offered now.";
    names
        .into_iter()
        .map(|n| json!({"name": n, "description": description, "input_schema": schema}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Vec<Value> {
        tools(Some(json!([{"type": "function", "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {"type": "object",
                "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["location"]},
            "strict": true}}])))
        .unwrap()
    }

    #[test]
    fn a_function_tool_gets_its_parameters_as_input_schema_and_loses_strict() {
        let out = weather();
        assert_eq!(out[0]["name"], "get_current_weather");
        assert_eq!(out[0]["input_schema"]["required"], json!(["location"]));
        assert!(out[0].get("strict").is_none() && out[0].get("parameters").is_none());
        let bare = tools(Some(
            json!([{"type": "function", "function": {"name": "now"}}]),
        ))
        .unwrap();
        assert_eq!(
            bare[0],
            json!({"name": "now", "input_schema": {"type": "object"}})
        );
    }

    #[test]
    fn a_custom_tool_is_refused() {
        let err = tools(Some(
            json!([{"type": "custom", "custom": {"name": "grammar"}}]),
        ))
        .unwrap_err();
        assert_eq!(err.field, "tools[0]");
    }

    #[test]
    fn each_tool_choice_has_its_anthropic_form() {
        let t = weather();
        let choice = |c: Value| tool_choice(Some(c), None, &t).unwrap();
        assert_eq!(choice(json!("auto")), None);
        assert_eq!(choice(json!("none")), Some(json!({"type": "none"})));
        assert_eq!(choice(json!("required")), Some(json!({"type": "any"})));
        assert_eq!(
            choice(json!({"type": "function", "function": {"name": "get_current_weather"}})),
            Some(json!({"type": "tool", "name": "get_current_weather"}))
        );
        let allowed =
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}});
        assert_eq!(
            tool_choice(Some(allowed), None, &t).unwrap_err().field,
            "tool_choice"
        );
    }

    #[test]
    fn parallel_tool_calls_false_disables_parallel_tool_use() {
        let t = weather();
        let serial = Some(&Value::Bool(false));
        assert_eq!(
            tool_choice(None, serial, &t).unwrap(),
            Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
        );
        assert_eq!(
            tool_choice(Some(json!("required")), serial, &t).unwrap(),
            Some(json!({"type": "any", "disable_parallel_tool_use": true}))
        );
        assert_eq!(
            tool_choice(Some(json!("none")), serial, &t).unwrap(),
            Some(json!({"type": "none"}))
        );
        assert_eq!(
            tool_choice(Some(json!("required")), serial, &[]).unwrap(),
            None
        );
    }
}
