//! `complexity-based-routing` (TrueFoundry virtual models, "Complexity-based routing"): every
//! target has a tier (`simple`, `medium`, `complex`); an in-process heuristic classifies each
//! request from its text, with no extra call or latency, and the request goes to its tier's
//! targets. A failing tier escalates to the next higher tier, never a lower one. A session can be
//! pinned to the tier of its first request (`sticky_routing`). Health demotion does not apply here
//! (TrueFoundry virtual models, "Unhealthy target detection"): order is by tier and escalation.
//!
//! The score adds points for what makes a request hard: long text, code blocks, reasoning and
//! multi-step markers, tools, and many turns; thresholds turn it into a tier.

use super::request::Request;
use super::sticky;
use crate::core::config::{ComplexityTarget, ModelId, Thresholds, Tier, VirtualModel};

/// The order of a request's targets (those it may reach): its tier's, from a random start,
/// then escalation.
pub fn route(
    vm: &VirtualModel,
    targets: &[ComplexityTarget],
    thresholds: &Thresholds,
    request: &Request<'_>,
    now_ms: u64,
    rng: &mut fastrand::Rng,
) -> Vec<ModelId> {
    let tier = tier(vm, thresholds, request, now_ms);
    let start = rng.usize(..targets.len().max(1));
    order(targets, tier, start)
}

/// The request's tier. An optional session pin holds the tier of the session's first request;
/// a request without any session identifier has no session to pin.
fn tier(vm: &VirtualModel, thresholds: &Thresholds, request: &Request<'_>, now_ms: u64) -> Tier {
    let identified = vm
        .sticky
        .as_ref()
        .filter(|rule| sticky::identified(rule, request));
    let Some(rule) = identified else {
        return classify_request(thresholds, request);
    };
    let session = sticky::session(&vm.name, rule, request, now_ms);
    let clock = sticky::clock(rule, now_ms);
    let pinned = request
        .state
        .pinned(&vm.name, session.hash, session.window, clock)
        .and_then(|v| v.strip_prefix("tier:").and_then(Tier::from_name));
    pinned.unwrap_or_else(|| {
        let tier = classify_request(thresholds, request);
        let value = format!("tier:{}", tier.name());
        request
            .state
            .pin(&vm.name, session.hash, session.window, &value, clock);
        tier
    })
}

/// The classifier model's tier, when it gave one (it spares reading the text), else the
/// heuristic's.
fn classify_request(thresholds: &Thresholds, request: &Request<'_>) -> Tier {
    request.tier_hint.unwrap_or_else(|| {
        let (text, turns) = crate::core::conversation::all_text(|n| request.field(n));
        let tools = request
            .fields
            .iter()
            .any(|(k, _)| k == "tools" || k == "functions");
        classify(score(&text, turns, tools), thresholds)
    })
}

/// Words that mark a request asking for reasoning or several steps.
const REASONING_MARKERS: [&str; 10] = [
    "step by step",
    "step-by-step",
    "prove",
    "derive",
    "analyze",
    "analyse",
    "explain why",
    "compare",
    "trade-off",
    "first,",
];

/// The heuristic score of a request's text and shape.
pub fn score(text: &str, turns: usize, has_tools: bool) -> u32 {
    let mut points = 0;
    let chars = text.chars().count();
    points += match chars {
        0..=1_999 => 0,
        2_000..=7_999 => 2,
        _ => 4,
    };
    if text.contains("```") {
        points += 2;
    }
    // The markers are ASCII: an ASCII lowercase finds them, at a fraction of Unicode's cost.
    // A long prompt's instructions sit at its start or end; its middle (documents, context)
    // is not searched, so the cost stops growing with the prompt.
    let lower = marker_window(text).to_ascii_lowercase();
    let markers = REASONING_MARKERS
        .iter()
        .filter(|m| lower.contains(*m))
        .count();
    points += markers.min(3) as u32;
    if has_tools {
        points += 2;
    }
    points += match turns {
        0..=6 => 0,
        7..=12 => 1,
        _ => 2,
    };
    points
}

/// Bytes searched for reasoning markers at each end of a long text.
pub const MARKER_WINDOW_BYTES: usize = 8 * 1024;

/// The text to search for markers: all of it, or its first and last [`MARKER_WINDOW_BYTES`].
fn marker_window(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= 2 * MARKER_WINDOW_BYTES {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut head = MARKER_WINDOW_BYTES;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - MARKER_WINDOW_BYTES;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let (start, end) = (text.get(..head), text.get(tail..));
    // A newline keeps a marker from being made of the head's end and the tail's start.
    std::borrow::Cow::Owned(format!("{}\n{}", start.unwrap_or(""), end.unwrap_or("")))
}

/// The tier a score falls in.
pub fn classify(score: u32, thresholds: &Thresholds) -> Tier {
    if score >= thresholds.complex {
        Tier::Complex
    } else if score >= thresholds.medium {
        Tier::Medium
    } else {
        Tier::Simple
    }
}

/// The tier's targets (rotated by `start`, so they share the load), then each higher tier's.
/// A tier without targets hands its requests to the next higher one, or, at the top, the
/// nearest lower one.
pub fn order(targets: &[ComplexityTarget], tier: Tier, start: usize) -> Vec<ModelId> {
    let present = |t: Tier| targets.iter().any(|x| x.tier == t);
    let tier = Tier::ALL
        .iter()
        .copied()
        .filter(|t| *t >= tier)
        .find(|t| present(*t))
        .or_else(|| Tier::ALL.iter().rev().copied().find(|t| present(*t)))
        .unwrap_or(tier);
    let mut out = Vec::with_capacity(targets.len());
    for t in Tier::ALL.iter().copied().filter(|t| *t >= tier) {
        let group: Vec<ModelId> = targets
            .iter()
            .filter(|x| x.tier == t)
            .map(|x| x.model)
            .collect();
        let n = group.len();
        let offset = if t == tier { start } else { 0 };
        out.extend((0..n).filter_map(|i| group.get((offset.wrapping_add(i)) % n.max(1)).copied()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        medium: 2,
        complex: 5,
    };

    #[test]
    fn short_plain_questions_are_simple_and_hard_ones_complex() {
        assert_eq!(
            classify(score("What is the capital of France?", 1, false), &T),
            Tier::Simple
        );
        let code = "Why does this fail?\n```rust\nfn main() {}\n```";
        assert_eq!(classify(score(code, 1, false), &T), Tier::Medium);
        let hard = format!(
            "Prove step by step and compare the trade-off.\n```py\nx=1\n```\n{}",
            "context ".repeat(1_200)
        );
        assert_eq!(classify(score(&hard, 14, true), &T), Tier::Complex);
        assert_eq!(score("", 0, false), 0);
    }

    #[test]
    fn markers_count_at_the_ends_of_a_long_prompt_not_in_its_middle() {
        let filler = "lorem ipsum é ".repeat(2_000);
        let at_start = format!("Compare these. {filler}");
        let at_end = format!("{filler} Now prove it.");
        let in_middle = format!("{filler} Derive it. {filler}");
        let plain = score(&format!("{filler}{filler}"), 1, false);
        assert_eq!(score(&at_start, 1, false), score(&filler, 1, false) + 1);
        assert_eq!(score(&at_end, 1, false), score(&filler, 1, false) + 1);
        assert_eq!(
            score(&in_middle, 1, false),
            plain,
            "the middle is not searched"
        );
        assert_eq!(score("Explain why, step by step.", 1, false), 2);
    }

    #[test]
    fn thresholds_are_configurable() {
        let strict = Thresholds {
            medium: 1,
            complex: 2,
        };
        assert_eq!(
            classify(score("Explain why the sky is blue", 1, false), &strict),
            Tier::Medium
        );
        assert_eq!(
            classify(score("Explain why the sky is blue", 1, false), &T),
            Tier::Simple
        );
    }

    fn targets() -> Vec<ComplexityTarget> {
        vec![
            ComplexityTarget {
                model: ModelId(0),
                tier: Tier::Simple,
            },
            ComplexityTarget {
                model: ModelId(1),
                tier: Tier::Medium,
            },
            ComplexityTarget {
                model: ModelId(2),
                tier: Tier::Medium,
            },
            ComplexityTarget {
                model: ModelId(3),
                tier: Tier::Complex,
            },
        ]
    }

    #[test]
    fn a_failing_tier_escalates_upward_only() {
        assert_eq!(
            order(&targets(), Tier::Simple, 0),
            [0, 1, 2, 3].map(ModelId)
        );
        assert_eq!(order(&targets(), Tier::Medium, 1), [2, 1, 3].map(ModelId));
        assert_eq!(order(&targets(), Tier::Complex, 0), vec![ModelId(3)]);
    }

    #[test]
    fn a_tier_without_targets_goes_up_or_at_the_top_down() {
        let no_medium: Vec<_> = targets()
            .into_iter()
            .filter(|t| t.tier != Tier::Medium)
            .collect();
        assert_eq!(order(&no_medium, Tier::Medium, 0), vec![ModelId(3)]);
        let no_complex: Vec<_> = targets()
            .into_iter()
            .filter(|t| t.tier != Tier::Complex)
            .collect();
        assert_eq!(order(&no_complex, Tier::Complex, 0), [1, 2].map(ModelId));
    }
}
