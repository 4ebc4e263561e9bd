//! Chat Completions → Messages: the request's top-level fields.

use super::chat_turns::Conversation;
use super::{cache, chat_tools, chat_turns, present, refuse, take, Obj, Target, Untranslatable};
use serde_json::{json, Value};

/// Anthropic Messages API, `max_tokens`: required. Zuplo's rule when the client sends none and
/// the catalog names no `max_output_tokens`.
const DEFAULT_MAX_TOKENS: u64 = 1024;

/// Anthropic extended thinking: `budget_tokens` must be at least 1,024.
const MIN_BUDGET: u64 = 1024;

/// The whole translation of a Chat Completions request (parsed) for `target`.
pub(super) fn translate(mut req: Obj, target: &Target) -> Result<Obj, Untranslatable> {
    refuse_unsupported(&req)?;
    let mut conv = chat_turns::convert(take(&mut req, "messages"))?;
    let mut tools = chat_tools::tools(take(&mut req, "tools"))?;
    let parallel = take(&mut req, "parallel_tool_calls");
    let choice = take(&mut req, "tool_choice");
    let mut choice = chat_tools::tool_choice(choice, parallel.as_ref(), &tools)?;
    if tools.is_empty() && conv.has_tool_blocks() {
        // Anthropic tool use, 400 "Requests which include tool_use or tool_result blocks must
        // define tools": the client offers none now, so the history's are listed, none callable.
        tools = chat_tools::placeholders(&conv);
        choice = Some(json!({"type": "none"}));
    }
    let mut out = Obj::new();
    out.insert("model".into(), target.model.into());
    sampling(&req, &mut out)?;
    let max_tokens = max_tokens(&req, target)?;
    let budget = thinking_budget(present(&req, "reasoning_effort"))?;
    let forced = choice
        .as_ref()
        .is_some_and(|c| matches!(c.get("type").and_then(Value::as_str), Some("any" | "tool")));
    let budget = budget.filter(|_| !forced && !conv.last_assistant_calls_tools());
    apply_thinking(&mut out, max_tokens, budget, cap(target));
    if let Some(stop) = stop_sequences(present(&req, "stop"))? {
        out.insert("stop_sequences".into(), stop);
    }
    if let Some(user) = user_id(&req)? {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    match present(&req, "stream") {
        None => {}
        Some(Value::Bool(b)) => {
            out.insert("stream".into(), Value::Bool(*b));
        }
        Some(_) => return Err(refuse("stream", "expected a boolean")),
    }
    if target.anthropic_cache {
        cache::add_breakpoints(&mut conv, &mut tools)?;
    } else {
        cache::check_count(&conv, &tools)?;
    }
    conv.write(&mut out);
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    Ok(out)
}

/// Fields whose meaning Anthropic cannot honour: a 400 naming them rather than an answer that
/// silently differs from what was asked.
fn refuse_unsupported(req: &Obj) -> Result<(), Untranslatable> {
    if let Some(n) = present(req, "n") {
        match n.as_u64() {
            Some(0 | 1) => {}
            Some(_) => return Err(refuse("n", "Anthropic Messages returns one choice only")),
            None => return Err(refuse("n", "expected an integer")),
        }
    }
    if present(req, "logprobs").is_some_and(|v| v != &Value::Bool(false)) {
        return Err(refuse(
            "logprobs",
            "Anthropic Messages returns no log probabilities",
        ));
    }
    if present(req, "top_logprobs").is_some_and(|v| v.as_u64() != Some(0)) {
        return Err(refuse(
            "top_logprobs",
            "Anthropic Messages returns no log probabilities",
        ));
    }
    if present(req, "audio").is_some() {
        return Err(refuse("audio", "Anthropic Messages has no audio output"));
    }
    let audio_out = present(req, "modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x.as_str() != Some("text")));
    if audio_out {
        return Err(refuse(
            "modalities",
            "Anthropic Messages answers with text only",
        ));
    }
    if let Some(format) = present(req, "response_format") {
        if format.get("type").and_then(Value::as_str) != Some("text") {
            return Err(refuse(
                "response_format",
                "Anthropic Messages has no JSON mode or schema to honour it with",
            ));
        }
    }
    for field in ["functions", "function_call"] {
        if present(req, field).is_some() {
            return Err(refuse(field, "deprecated: use `tools` and `tool_choice`"));
        }
    }
    Ok(())
}

/// `temperature`, else `top_p`.
fn sampling(req: &Obj, out: &mut Obj) -> Result<(), Untranslatable> {
    if let Some(t) = present(req, "temperature") {
        let value = t
            .as_f64()
            .ok_or_else(|| refuse("temperature", "expected a number"))?;
        // Anthropic Messages API, `temperature`: 0.0 to 1.0 (OpenAI's goes to 2).
        let clamped = if (0.0..=1.0).contains(&value) {
            t.clone()
        } else {
            json!(value.clamp(0.0, 1.0))
        };
        out.insert("temperature".into(), clamped);
    }
    // Recent Claude models (Sonnet 4.5 on) refuse `temperature` and `top_p` together, and
    // OpenAI advises altering one, not both: `temperature` wins.
    if let Some(p) = present(req, "top_p").filter(|_| !out.contains_key("temperature")) {
        if !p.is_number() {
            return Err(refuse("top_p", "expected a number"));
        }
        out.insert("top_p".into(), p.clone());
    }
    Ok(())
}

/// The catalog's `max_output_tokens`, when it names one.
fn cap(target: &Target) -> Option<u64> {
    target.max_output_tokens.filter(|c| *c > 0).map(u64::from)
}

/// Anthropic Messages API, `max_tokens`: required; `max_completion_tokens` is OpenAI's current
/// name, `max_tokens` its deprecated one. Above the model's limit Anthropic answers 400, so the
/// catalog's `max_output_tokens` caps the client's value.
fn max_tokens(req: &Obj, target: &Target) -> Result<u64, Untranslatable> {
    let field = if present(req, "max_completion_tokens").is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let asked = match present(req, field) {
        None => return Ok(cap(target).unwrap_or(DEFAULT_MAX_TOKENS)),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or_else(|| refuse(field, "expected a positive integer"))?,
    };
    Ok(cap(target).map_or(asked, |c| asked.min(c)))
}

/// `reasoning_effort` → Anthropic's `thinking.budget_tokens`:
///
/// | `reasoning_effort` | `budget_tokens` |
/// |---|---|
/// | `none` | no thinking |
/// | `minimal`, `low` | 1,024 (Anthropic's minimum) |
/// | `medium` | 4,096 |
/// | `high` | 16,384 |
/// | `xhigh` | 32,768 |
///
/// `max_tokens` counts thinking and must exceed the budget: when it does not, it becomes the
/// budget plus the client's `max_tokens`, so the answer keeps the room asked for; the catalog's
/// `max_output_tokens` caps that, and the budget shrinks to fit (thinking is left off below
/// 1,024). Thinking is also left off when `tool_choice` forces a tool and when the last
/// assistant turn called tools (Anthropic extended thinking: forced tool use is not
/// supported, and the last assistant turn's thinking block, which Chat Completions cannot
/// carry, must precede its `tool_use`). With thinking on, `temperature` is dropped and `top_p`
/// raised to 0.95 (Anthropic extended thinking: temperature cannot be changed, `top_p` only
/// from 0.95 to 1).
pub(super) fn thinking_budget(effort: Option<&Value>) -> Result<Option<u64>, Untranslatable> {
    let Some(effort) = effort else {
        return Ok(None);
    };
    match effort.as_str() {
        Some("none") => Ok(None),
        Some("minimal" | "low") => Ok(Some(MIN_BUDGET)),
        Some("medium") => Ok(Some(4096)),
        Some("high") => Ok(Some(16384)),
        Some("xhigh") => Ok(Some(32768)),
        _ => Err(refuse(
            "reasoning_effort",
            "expected none, minimal, low, medium, high or xhigh",
        )),
    }
}

/// Writes `max_tokens`, and `thinking` when a budget fits (see [`thinking_budget`]).
fn apply_thinking(out: &mut Obj, asked: u64, budget: Option<u64>, cap: Option<u64>) {
    let fitted = budget.and_then(|b| fit_budget(asked, b, cap));
    let Some((max_tokens, budget)) = fitted else {
        out.insert("max_tokens".into(), asked.into());
        return;
    };
    out.insert("max_tokens".into(), max_tokens.into());
    out.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": budget}),
    );
    out.remove("temperature");
    if let Some(p) = out.get("top_p").and_then(Value::as_f64) {
        if p < 0.95 {
            out.insert("top_p".into(), json!(0.95));
        }
    }
}

/// `(max_tokens, budget_tokens)` with the budget below `max_tokens`, or None when under the cap
/// no budget of at least 1,024 fits.
fn fit_budget(asked: u64, budget: u64, cap: Option<u64>) -> Option<(u64, u64)> {
    let wanted = if asked > budget {
        asked
    } else {
        budget.saturating_add(asked)
    };
    let max = cap.map_or(wanted, |c| wanted.min(c));
    let budget = if max == wanted {
        budget
    } else {
        // Capped: the answer keeps the room it asked for if it can, else half.
        budget.min(max.saturating_sub(asked).max(max / 2))
    };
    let budget = budget.min(max.saturating_sub(1));
    (budget >= MIN_BUDGET).then_some((max, budget))
}

/// `stop` (a string or up to four) → `stop_sequences`.
fn stop_sequences(stop: Option<&Value>) -> Result<Option<Value>, Untranslatable> {
    let list: Vec<(String, &Value)> = match stop {
        None => return Ok(None),
        Some(s @ Value::String(_)) => vec![("stop".into(), s)],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("stop[{i}]"), s))
            .collect(),
        Some(_) => return Err(refuse("stop", "expected a string or an array of strings")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (field, s) in list {
        let Some(text) = s.as_str() else {
            return Err(refuse(field, "expected a string"));
        };
        // Anthropic Messages API, `stop_sequences`: each must contain non-whitespace (400).
        if text.trim().is_empty() {
            return Err(refuse(
                field,
                "Anthropic Messages refuses a stop sequence of whitespace only",
            ));
        }
        out.push(Value::String(text.to_owned()));
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

/// `safety_identifier` (OpenAI's current name), else `user` → `metadata.user_id`.
fn user_id(req: &Obj) -> Result<Option<String>, Untranslatable> {
    for field in ["safety_identifier", "user"] {
        match present(req, field) {
            None => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) => return Ok(Some(s.clone())),
            Some(_) => return Err(refuse(field, "expected a string")),
        }
    }
    Ok(None)
}

impl Conversation {
    /// Writes `system` and `messages`.
    fn write(self, out: &mut Obj) {
        let (system, messages) = self.into_parts();
        if let Some(system) = system {
            out.insert("system".into(), system);
        }
        out.insert("messages".into(), Value::Array(messages));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_above_max_tokens_raises_max_tokens_by_the_budget() {
        assert_eq!(fit_budget(1024, 4096, None), Some((5120, 4096)));
        assert_eq!(fit_budget(8000, 4096, None), Some((8000, 4096)));
    }

    #[test]
    fn the_catalog_cap_shrinks_the_budget_and_can_leave_thinking_off() {
        // 16,384 + 1,024 capped at 8,192: the answer keeps its 1,024.
        assert_eq!(fit_budget(1024, 16384, Some(8192)), Some((8192, 7168)));
        // Asked for the whole cap: half goes to thinking.
        assert_eq!(fit_budget(8192, 16384, Some(8192)), Some((8192, 4096)));
        // Under 1,024 of budget: no thinking.
        assert_eq!(fit_budget(1024, 1024, Some(1500)), None);
        // Asked for more than the budget: thinking fits inside it, as OpenAI counts reasoning
        // in max_completion_tokens.
        assert_eq!(fit_budget(1500, 1024, Some(1500)), Some((1500, 1024)));
    }

    #[test]
    fn every_effort_has_a_budget_and_an_unknown_one_is_refused() {
        let budget = |s: &str| thinking_budget(Some(&json!(s)));
        assert_eq!(budget("none"), Ok(None));
        assert_eq!(budget("minimal"), Ok(Some(1024)));
        assert_eq!(budget("low"), Ok(Some(1024)));
        assert_eq!(budget("medium"), Ok(Some(4096)));
        assert_eq!(budget("high"), Ok(Some(16384)));
        assert_eq!(budget("xhigh"), Ok(Some(32768)));
        assert_eq!(budget("max").unwrap_err().field, "reasoning_effort");
    }

    #[test]
    fn stop_takes_a_string_or_a_list_and_refuses_whitespace_only() {
        assert_eq!(
            stop_sequences(Some(&json!("END"))).unwrap(),
            Some(json!(["END"]))
        );
        assert_eq!(
            stop_sequences(Some(&json!(["a", "b\n"]))).unwrap(),
            Some(json!(["a", "b\n"]))
        );
        assert_eq!(stop_sequences(Some(&json!([]))).unwrap(), None);
        let err = stop_sequences(Some(&json!(["END", "\n"]))).unwrap_err();
        assert_eq!(err.field, "stop[1]");
    }
}
