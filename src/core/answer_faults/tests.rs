use super::*;

const ALL: AnswerFallbacks = AnswerFallbacks {
    content_filter: true,
    empty: true,
    error_body: true,
    context_length: false,
};

fn whole(body: &str) -> Option<AnswerFault> {
    judge_whole(body.as_bytes(), ALL)
}

#[test]
fn chat_completions_refusal_empty_and_good_answers() {
    let filtered = r#"{"object":"chat.completion","choices":[{"index":0,
        "message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}"#;
    assert_eq!(whole(filtered), Some(AnswerFault::ContentFilter));
    let empty =
        r#"{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}"#;
    assert_eq!(whole(empty), Some(AnswerFault::Empty));
    assert_eq!(whole(r#"{"choices":[]}"#), Some(AnswerFault::Empty));
    let tool = r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c"}]},"finish_reason":"tool_calls"}]}"#;
    assert_eq!(whole(tool), None, "a tool call is an answer");
    let good = r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#;
    assert_eq!(whole(good), None);
    let legacy = r#"{"object":"text_completion","choices":[{"text":"","finish_reason":"stop"}]}"#;
    assert_eq!(whole(legacy), Some(AnswerFault::Empty));
}

#[test]
fn anthropic_refusal_empty_and_good_answers() {
    let refusal = r#"{"type":"message","role":"assistant","content":[],"stop_reason":"refusal"}"#;
    assert_eq!(whole(refusal), Some(AnswerFault::ContentFilter));
    let blank =
        r#"{"type":"message","content":[{"type":"text","text":""}],"stop_reason":"end_turn"}"#;
    assert_eq!(whole(blank), Some(AnswerFault::Empty));
    let thinking = r#"{"type":"message","content":[{"type":"thinking","thinking":"hm"}],"stop_reason":"end_turn"}"#;
    assert_eq!(
        whole(thinking),
        Some(AnswerFault::Empty),
        "thinking alone answers nothing"
    );
    let tool =
        r#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}"#;
    assert_eq!(whole(tool), None);
    let good =
        r#"{"type":"message","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}"#;
    assert_eq!(whole(good), None);
}

#[test]
fn responses_refusal_empty_and_a_queued_background_response() {
    let filtered = r#"{"object":"response","status":"incomplete","error":null,
        "incomplete_details":{"reason":"content_filter"},"output":[]}"#;
    assert_eq!(whole(filtered), Some(AnswerFault::ContentFilter));
    let cut = r#"{"object":"response","status":"incomplete","error":null,
        "incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#;
    assert_eq!(
        whole(cut),
        None,
        "a token limit is not a refusal, nor judged empty"
    );
    let empty = r#"{"object":"response","status":"completed","error":null,"output":[
        {"type":"reasoning","summary":[]},
        {"type":"message","content":[{"type":"output_text","text":""}]}]}"#;
    assert_eq!(whole(empty), Some(AnswerFault::Empty));
    let queued = r#"{"object":"response","status":"queued","error":null,"output":[]}"#;
    assert_eq!(whole(queued), None);
    let good = r#"{"object":"response","status":"completed","error":null,"output":[
        {"type":"message","content":[{"type":"output_text","text":"hi"}]}]}"#;
    assert_eq!(whole(good), None, "error: null is no error object");
    let call = r#"{"object":"response","status":"completed","output":[{"type":"function_call"}]}"#;
    assert_eq!(whole(call), None);
}

#[test]
fn error_objects_in_a_200_in_each_shape() {
    let openai = r#"{"error":{"message":"overloaded","type":"server_error","code":null}}"#;
    assert_eq!(whole(openai), Some(AnswerFault::ErrorBody));
    let anthropic = r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#;
    assert_eq!(whole(anthropic), Some(AnswerFault::ErrorBody));
    let failed =
        r#"{"object":"response","status":"failed","error":{"code":"server_error"},"output":[]}"#;
    assert_eq!(whole(failed), Some(AnswerFault::ErrorBody));
}

#[test]
fn only_the_faults_asked_for_and_only_llm_answers_are_judged() {
    let on = AnswerFallbacks {
        empty: true,
        ..AnswerFallbacks::default()
    };
    let refusal = br#"{"type":"message","content":[],"stop_reason":"refusal"}"#;
    assert_eq!(judge_whole(refusal, on), Some(AnswerFault::Empty));
    let error = br#"{"error":{"message":"x"}}"#;
    assert_eq!(judge_whole(error, on), None);
    assert_eq!(whole(r#"{"object":"list","data":[]}"#), None, "embeddings");
    assert_eq!(whole("not json"), None);
    assert_eq!(whole("[1]"), None);
    assert_eq!(judged(AnswerFallbacks::default()), None);
    let context_only = AnswerFallbacks {
        context_length: true,
        ..AnswerFallbacks::default()
    };
    assert_eq!(judged(context_only), None);
}

#[test]
fn streams_before_their_first_content() {
    let chat_refusal = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
        data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n\
        data: [DONE]\n\n";
    let chat = Dialect::ChatCompletions;
    assert_eq!(
        judge_stream(chat, chat_refusal, ALL),
        Some(AnswerFault::ContentFilter)
    );
    let chat_empty =
        b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    assert_eq!(
        judge_stream(chat, chat_empty, ALL),
        Some(AnswerFault::Empty)
    );
    let chat_good = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
    assert_eq!(judge_stream(chat, chat_good, ALL), None);
    let unfinished = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    assert_eq!(judge_stream(chat, unfinished, ALL), None, "not ended yet");
    let anthropic = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    assert_eq!(
        judge_stream(Dialect::Messages, anthropic, ALL),
        Some(AnswerFault::ContentFilter)
    );
    let on = AnswerFallbacks {
        content_filter: true,
        ..AnswerFallbacks::default()
    };
    assert_eq!(
        judge_stream(chat, chat_empty, on),
        None,
        "empty not asked for"
    );
}
