//! `anthropic_cache: "auto"`: `cache_control` breakpoints on a translated request, so it keeps
//! the prompt caching an OpenAI target gives without asking.

use super::chat_turns::{Conversation, Role};
use super::{refuse, Untranslatable};
use serde_json::{json, Value};

/// Anthropic prompt caching: at most four blocks with `cache_control` in a request.
const MAX_BREAKPOINTS: usize = 4;

/// Adds `{type: ephemeral}` breakpoints, the client's own kept and counted: first on the last
/// user turn's last block (it caches the whole prefix before it), then on the last system block,
/// then on the last tool (Anthropic prompt caching: the prefix runs tools, system, messages), as
/// long as four are not reached.
pub(super) fn add_breakpoints(
    conv: &mut Conversation,
    tools: &mut [Value],
) -> Result<(), Untranslatable> {
    let mut room = MAX_BREAKPOINTS - check_count(conv, tools)?;
    let last_user = conv
        .turns
        .iter_mut()
        .rev()
        .find(|t| t.role == Role::User)
        .and_then(|t| t.content.last_mut());
    let candidates = [last_user, conv.system.last_mut(), tools.last_mut()];
    for block in candidates.into_iter().flatten() {
        if room == 0 {
            break;
        }
        if let Some(obj) = block
            .as_object_mut()
            .filter(|o| !o.contains_key("cache_control"))
        {
            obj.insert("cache_control".into(), json!({"type": "ephemeral"}));
            room -= 1;
        }
    }
    Ok(())
}

/// How many breakpoints the client set; more than four is refused, as Anthropic would.
pub(super) fn check_count(conv: &Conversation, tools: &[Value]) -> Result<usize, Untranslatable> {
    let nested = |b: &Value| {
        b.get("content")
            .and_then(Value::as_array)
            .map_or(0, |c| c.iter().filter(|x| marked(x)).count())
    };
    let blocks = conv.turns.iter().flat_map(|t| &t.content);
    let count = conv.system.iter().filter(|b| marked(b)).count()
        + tools.iter().filter(|b| marked(b)).count()
        + blocks
            .map(|b| usize::from(marked(b)) + nested(b))
            .sum::<usize>();
    if count > MAX_BREAKPOINTS {
        let reason = format!("{count} blocks carry cache_control; Anthropic takes at most 4");
        return Err(refuse("messages", reason));
    }
    Ok(count)
}

fn marked(block: &Value) -> bool {
    block.get("cache_control").is_some()
}

#[cfg(test)]
mod tests {
    use super::super::chat_turns::convert;
    use super::*;

    fn conversation() -> Conversation {
        convert(Some(json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
        ])))
        .unwrap()
    }

    #[test]
    fn breakpoints_go_on_the_last_user_turn_the_system_and_the_last_tool() {
        let mut conv = conversation();
        let mut tools = vec![json!({"name": "a"}), json!({"name": "b"})];
        add_breakpoints(&mut conv, &mut tools).unwrap();
        let ephemeral = json!({"type": "ephemeral"});
        assert_eq!(conv.turns[2].content[0]["cache_control"], ephemeral);
        assert!(conv.turns[0].content[0].get("cache_control").is_none());
        assert_eq!(conv.system[0]["cache_control"], ephemeral);
        assert_eq!(tools[1]["cache_control"], ephemeral);
        assert!(tools[0].get("cache_control").is_none());
    }

    #[test]
    fn the_clients_own_breakpoints_count_toward_four() {
        let mut conv = conversation();
        let cc = json!({"type": "ephemeral"});
        let mut tools = vec![json!({"name": "a"})];
        for turn in &mut conv.turns[..2] {
            turn.content[0]["cache_control"] = cc.clone();
        }
        conv.system
            .push(json!({"type": "text", "text": "x", "cache_control": cc}));
        add_breakpoints(&mut conv, &mut tools).unwrap();
        // Three were the client's: one left, for the last user turn.
        assert_eq!(
            conv.turns[2].content[0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(tools[0].get("cache_control").is_none());
        assert_eq!(check_count(&conv, &tools).unwrap(), 4);
    }

    #[test]
    fn more_than_four_client_breakpoints_are_refused() {
        let mut conv = conversation();
        let cc = json!({"type": "ephemeral"});
        for turn in &mut conv.turns {
            turn.content[0]["cache_control"] = cc.clone();
        }
        let mut tools = vec![
            json!({"name": "a", "cache_control": cc}),
            json!({"name": "b", "cache_control": cc}),
        ];
        let err = add_breakpoints(&mut conv, &mut tools).unwrap_err();
        assert_eq!(err.field, "messages");
    }
}
