//! `conditional-routing` (agentgateway virtual models, "Conditional routing"): the first target
//! whose `when` expression holds for the request wins; the others that hold follow, in config
//! order, as its fallbacks. None holding is the caller's 400.

use super::request::Request;
use crate::core::config::{ConditionalTarget, ModelId};
use crate::core::when::Facts;

impl Facts for Request<'_> {
    fn header(&self, lower_case_name: &str) -> Option<&str> {
        self.headers.get_str(lower_case_name)
    }

    fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key)
    }

    fn model(&self) -> &str {
        self.model
    }

    fn path(&self) -> &str {
        let path = self.header(":path").unwrap_or_default();
        path.split_once('?').map_or(path, |(p, _)| p)
    }

    fn method(&self) -> &str {
        self.header(":method").unwrap_or_default()
    }
}

/// The targets whose condition holds, in config order.
pub fn order(targets: &[ConditionalTarget], request: &Request<'_>) -> Vec<ModelId> {
    targets
        .iter()
        .filter(|t| t.when.eval(request))
        .map(|t| t.model)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::endpoint::Endpoint;
    use crate::core::headers::Headers;
    use crate::core::headers::NO_HEADERS;
    use crate::core::metadata::Metadata;
    use crate::core::when::Condition;

    fn targets(whens: &[&str]) -> Vec<ConditionalTarget> {
        whens
            .iter()
            .enumerate()
            .map(|(i, w)| ConditionalTarget {
                model: ModelId(i),
                when: Condition::parse(w).unwrap(),
            })
            .collect()
    }

    #[test]
    fn first_true_target_wins_and_the_other_true_ones_follow() {
        let t = targets(&[
            r#"request.headers["x-tier"] == "free""#,
            r#"request.headers["x-tier"] == "pro""#,
            r#"metadata.region in ["eu", "uk"] && request.path == "/v1/chat/completions""#,
            "true",
        ]);
        let headers = Headers::from_pairs([
            (":path", "/v1/chat/completions?x=1"),
            (":method", "POST"),
            ("x-tier", "pro"),
        ]);
        let metadata = Metadata::resolve(Some(br#"{"region":"uk"}"#), &[]).unwrap();
        let state = crate::core::routing::LocalState::default();
        let request = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "vm",
            metadata: &metadata,
            headers: &headers,
            state: &state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        assert_eq!(order(&t, &request), [1, 2, 3].map(ModelId));
        let none = Metadata::default();
        let bare = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "vm",
            metadata: &none,
            headers: &NO_HEADERS,
            state: &state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        assert_eq!(
            order(&t, &bare),
            vec![ModelId(3)],
            "missing header and metadata are null"
        );
    }
}
