//! Sticky sessions for `weight-based-routing` (TrueFoundry virtual models, "Sticky routing"):
//! every request of a session (its identifiers joined, a missing one contributing "", so
//! requests missing every identifier share one session unless `missing_identifier: "none"`
//! makes them unsticky) goes to the
//! same target for a `ttl_seconds` window, with no shared state: a weighted rendezvous hash of
//! the session, the target and the window index, so every Envoy instance agrees. After a
//! fallback succeeds, the session stays on the target that worked for the rest of the window
//! (a pin the adapter keeps in shared data). Inside a session the fallback order is the other
//! targets in config order, not by weight. Session keys are hashed at once and never stored.
//!
//! A session's target (its "home") is its pin, else the rendezvous winner over every target
//! with weight, health aside. When health sends the request elsewhere (the home unhealthy or
//! evicted) or a fallback answers, the target that answered becomes the session's pin: the
//! session moves once and stays there for the rest of the window (or until idle,
//! `idle_ttl_seconds`), even after its old target recovers, so its prompt cache (warm on the
//! new target by then) is not thrown away by a move back. TrueFoundry virtual models, "Sticky
//! routing", keeps a session where a fallback worked; the same rule covers a health move.

use super::health_input::rank;
use super::pins::PinClock;
use super::rendezvous::{hash64, rendezvous_score};
use super::request::Request;
use crate::core::config::{Config, ModelId, Named, StickyRouting, WeightedTarget};
use crate::core::health::record::Standing;

/// A session and the TTL window the request falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Hash of the virtual model and the session key.
    pub hash: u64,
    /// `now / ttl`.
    pub window: u64,
    /// The session's target: its pin, else its rendezvous winner health aside (`None` until
    /// ordered, and for a complexity session, whose pin is a tier).
    pub home: Option<ModelId>,
}

/// The clock a session's pin is read and written with: now and the rule's idle TTL.
pub fn clock(sticky: &StickyRouting, now_ms: u64) -> PinClock {
    PinClock {
        now_ms,
        idle_ms: sticky.idle_ms,
    }
}

/// Whether the request carries any of the rule's identifiers (a non-empty value).
pub fn identified(rule: &StickyRouting, request: &Request<'_>) -> bool {
    rule.session_identifiers
        .iter()
        .any(|id| request.identifier(id).is_some_and(|v| !v.is_empty()))
}

/// The session of a request.
pub fn session(
    vm_name: &str,
    sticky: &StickyRouting,
    request: &Request<'_>,
    now_ms: u64,
) -> Session {
    let mut key = Vec::with_capacity(64);
    for (i, id) in sticky.session_identifiers.iter().enumerate() {
        if i > 0 {
            key.push(0x1f);
        }
        key.extend_from_slice(request.identifier(id).as_deref().unwrap_or_default());
    }
    Session {
        hash: hash64(&[vm_name.as_bytes(), &key]),
        window: now_ms / sticky.ttl_ms.max(1),
        home: None,
    }
}

/// The catalog model the session was pinned to after a successful fallback, in its window.
pub fn pinned_target(
    config: &Config,
    vm_name: &str,
    session: Session,
    request: &Request<'_>,
    clock: PinClock,
) -> Option<ModelId> {
    request
        .state
        .pinned(vm_name, session.hash, session.window, clock)
        .and_then(|name| match config.lookup(&name) {
            Some(Named::Catalog(id, _)) => Some(id),
            _ => None,
        })
}

/// The session's target first (its pin if it has one, else the rendezvous winner among the
/// targets in the best standing, so the sessions of an unhealthy target spread over the
/// healthy ones by weight: TrueFoundry virtual models, "Routing Strategies", strategies pick
/// "among healthy targets"), then the other targets in config order; health then moves the
/// unhealthy and the evicted ones back, in that order, each target's standing computed once.
/// Also the session's home (its pin, else its winner health aside).
pub fn order(
    config: &Config,
    targets: &[WeightedTarget],
    session: Session,
    pinned: Option<ModelId>,
    standing: impl Fn(ModelId) -> Standing,
) -> (Vec<ModelId>, Option<ModelId>) {
    let ranks: Vec<u8> = targets.iter().map(|t| rank(standing(t.model))).collect();
    let pin = pinned.and_then(|p| targets.iter().position(|t| t.model == p));
    let (best, home) = match pin {
        Some(i) => (Some(i), Some(i)),
        None => winners(config, targets, session, &ranks),
    };
    let winner = best;
    let mut ordered: Vec<(u8, ModelId)> = winner
        .into_iter()
        .chain((0..targets.len()).filter(|i| Some(*i) != winner))
        .filter_map(|i| Some((*ranks.get(i)?, targets.get(i)?.model)))
        .collect();
    // Stable: the winner stays ahead of its standing's group, the rest keep config order.
    if ranks.iter().any(|r| *r != 0) {
        ordered.sort_by_key(|(r, _)| *r);
    }
    let home = home.and_then(|i| targets.get(i)).map(|t| t.model);
    (ordered.into_iter().map(|(_, m)| m).collect(), home)
}

/// The rendezvous winners among the targets with weight: in the best standing (`ranks`), and
/// health aside; each score computed once (a hash and a logarithm per target).
fn winners(
    config: &Config,
    targets: &[WeightedTarget],
    session: Session,
    ranks: &[u8],
) -> (Option<usize>, Option<usize>) {
    let key = hash64(&[&session.hash.to_le_bytes(), &session.window.to_le_bytes()]);
    let name = |m: ModelId| config.model(m).map_or("", |m| m.name.as_str());
    let scored: Vec<(u8, f64, usize)> = targets
        .iter()
        .zip(ranks)
        .enumerate()
        .filter(|(_, (t, _))| t.weight > 0)
        .map(|(i, (t, r))| (*r, rendezvous_score(key, name(t.model), t.weight), i))
        .collect();
    let best = scored
        .iter()
        .max_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)))
        .map(|(_, _, i)| *i);
    let home = scored
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(_, _, i)| *i);
    (best, home)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Routing;
    use crate::core::endpoint::Endpoint;
    use crate::core::headers::Headers;
    use crate::core::headers::NO_HEADERS;
    use crate::core::metadata::Metadata;
    use crate::core::routing::{plan, HealthInput, Request};
    use crate::core::routing::{LocalState, RoutingState};

    const CONFIG: &str = r#"{"models": [
        {"name": "a", "cluster": "c", "model": "m"},
        {"name": "b", "cluster": "c", "model": "m"},
        {"name": "c", "cluster": "c", "model": "m"}],
      "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
        "type": "weight-based-routing",
        "sticky_routing": {"ttl_seconds": 60, "session_identifiers": [
            {"key": "x-user-id", "source": "headers"}, {"key": "tenant", "source": "metadata"}]},
        "load_balance_targets": [
          {"target": "a", "weight": 70}, {"target": "b", "weight": 30}, {"target": "c", "weight": 0}]}}]}"#;

    fn route(
        config: &Config,
        state: &LocalState,
        user: &str,
        now_ms: u64,
    ) -> (Vec<ModelId>, Session) {
        let headers = Headers::from_pairs([("x-user-id", user)]);
        let metadata = Metadata::default();
        let request = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "vm",
            metadata: &metadata,
            headers: &headers,
            state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        let health = HealthInput {
            now_ms,
            ..HealthInput::NONE
        };
        let p = plan(
            config,
            &request,
            &health,
            &mut fastrand::Rng::with_seed(now_ms),
        )
        .unwrap();
        (p.candidates, p.sticky.unwrap())
    }

    #[test]
    fn a_session_keeps_its_target_for_the_window_and_sessions_split_by_weight() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let state = LocalState::default();
        let mut firsts = [0u32; 3];
        for user in 0..4000 {
            let user = format!("user-{user}");
            let (first, _) = route(&config, &state, &user, 1_000);
            // The same every time within the window, whatever the RNG says.
            for t in [2_000, 30_000, 59_999] {
                assert_eq!(route(&config, &state, &user, t).0, first);
            }
            firsts[first[0].0] += 1;
        }
        // 70/30 over sessions (bands of about 4 standard deviations); weight 0 never first.
        assert!(firsts[0].abs_diff(2800) < 120, "{firsts:?}");
        assert_eq!(firsts[2], 0);
    }

    #[test]
    fn windows_reshuffle_and_fallbacks_follow_config_order() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let state = LocalState::default();
        let moved = (0..200)
            .filter(|u| {
                let user = format!("u{u}");
                route(&config, &state, &user, 0).0[0] != route(&config, &state, &user, 60_000).0[0]
            })
            .count();
        assert!(
            moved > 40,
            "a new window re-evaluates sessions ({moved} of 200 moved)"
        );
        let (order, _) = route(&config, &state, "someone", 0);
        let rest: Vec<usize> = order[1..].iter().map(|m| m.0).collect();
        let mut expected = vec![0, 1, 2];
        expected.retain(|i| *i != order[0].0);
        assert_eq!(rest, expected, "not by weight: config order");
    }

    #[test]
    fn a_pin_after_fallback_wins_for_the_rest_of_the_window_only() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let state = LocalState::default();
        let (order, session) = route(&config, &state, "pinned-user", 5_000);
        let other = if order[0] == ModelId(0) { "b" } else { "a" };
        state.pin(
            "vm",
            session.hash,
            session.window,
            other,
            PinClock::default(),
        );
        let pinned = route(&config, &state, "pinned-user", 6_000).0;
        assert_eq!(config.model(pinned[0]).unwrap().name, other);
        assert_eq!(
            route(&config, &state, "pinned-user", 65_000).1.window,
            session.window + 1
        );
        assert_ne!(route(&config, &state, "pinned-user", 65_000).1, session);
    }

    #[test]
    fn missing_identifiers_count_as_empty_strings() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let vm = &config.virtual_models[0];
        let metadata = Metadata::default();
        let state = LocalState::default();
        let bare = Request {
            endpoint: Endpoint::ChatCompletions,
            model: "vm",
            metadata: &metadata,
            headers: &NO_HEADERS,
            state: &state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        let empty = Headers::from_pairs([("x-user-id", "")]);
        let blank = Request {
            headers: &empty,
            ..bare
        };
        let rule = vm.sticky.as_ref().unwrap();
        assert_eq!(
            session("vm", rule, &bare, 0),
            session("vm", rule, &blank, 0)
        );
    }

    /// Where 400 requests without any identifier go, by `missing_identifier`.
    fn without_identifiers(missing: &str) -> ([u32; 3], bool) {
        let json = CONFIG.replace(
            r#""ttl_seconds": 60,"#,
            &format!(r#""ttl_seconds": 60, "missing_identifier": "{missing}","#),
        );
        let config = Config::parse(json.as_bytes()).unwrap();
        let (metadata, state) = (Metadata::default(), LocalState::default());
        let mut firsts = [0u32; 3];
        let mut sticky = false;
        for seed in 0..400 {
            let request = Request {
                endpoint: Endpoint::ChatCompletions,
                model: "vm",
                metadata: &metadata,
                headers: &NO_HEADERS,
                state: &state,
                body: b"",
                fields: &[],
                tier_hint: None,
            };
            let health = HealthInput {
                now_ms: 1_000,
                ..HealthInput::NONE
            };
            let p = plan(
                &config,
                &request,
                &health,
                &mut fastrand::Rng::with_seed(seed),
            )
            .unwrap();
            firsts[p.candidates[0].0] += 1;
            sticky |= p.sticky.is_some();
        }
        (firsts, sticky)
    }

    #[test]
    fn requests_missing_every_identifier_share_one_session_unless_told_not_to() {
        // TrueFoundry virtual models, "Sticky routing": a missing identifier contributes an
        // empty string, so all such requests are one session, on one target.
        let (firsts, sticky) = without_identifiers("shared");
        assert!(
            sticky && firsts.iter().filter(|n| **n > 0).count() == 1,
            "{firsts:?}"
        );
        // `missing_identifier: "none"`: no session, weighted 70/30 like any request.
        let (firsts, sticky) = without_identifiers("none");
        assert!(!sticky);
        assert!(firsts[0].abs_diff(280) < 45 && firsts[2] == 0, "{firsts:?}");
        let bad = CONFIG.replace(
            r#""ttl_seconds": 60,"#,
            r#""ttl_seconds": 60, "missing_identifier": "x","#,
        );
        let e = Config::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("sticky_routing.missing_identifier"), "{e}");
    }

    #[test]
    fn a_session_whose_home_is_evicted_goes_elsewhere_and_a_pin_there_outlives_the_recovery() {
        let config = Config::parse(CONFIG.as_bytes()).unwrap();
        let Routing::Weighted(targets) = &config.virtual_models[0].routing else {
            panic!()
        };
        let session = Session {
            hash: 7,
            window: 3,
            home: None,
        };
        let healthy = |_| Standing::Healthy;
        let (first, home) = order(&config, targets, session, None, healthy);
        assert_eq!(Some(first[0]), home, "healthy: the request goes home");
        let gone = home.unwrap();
        let evicted = |m| {
            if m == gone {
                Standing::Evicted
            } else {
                Standing::Healthy
            }
        };
        let (moved, still) = order(&config, targets, session, None, evicted);
        assert_ne!(moved[0], gone);
        assert_eq!(
            still,
            Some(gone),
            "the home is the same: the answer elsewhere pins"
        );
        assert_eq!(moved.last(), Some(&gone));
        // Pinned where it answered, the session stays there after its home recovers.
        let (after, new_home) = order(&config, targets, session, Some(moved[0]), healthy);
        assert_eq!((after[0], new_home), (moved[0], Some(moved[0])));
    }

    #[test]
    fn an_idle_pin_is_forgotten_and_the_session_goes_home() {
        let json = CONFIG.replace(
            r#""ttl_seconds": 60,"#,
            r#""ttl_seconds": 60, "idle_ttl_seconds": 10,"#,
        );
        let config = Config::parse(json.as_bytes()).unwrap();
        let state = LocalState::default();
        let (order, session) = route(&config, &state, "idle-user", 1_000);
        let other = if order[0] == ModelId(0) { "b" } else { "a" };
        let clock = |now_ms| PinClock {
            now_ms,
            idle_ms: Some(10_000),
        };
        state.pin("vm", session.hash, session.window, other, clock(1_000));
        let name = |m: ModelId| config.model(m).unwrap().name.clone();
        // Used every 9 s (refreshed past 2.5 s), it holds well past 10 s after it was written.
        for t in [9_000, 18_000, 27_000] {
            assert_eq!(
                name(route(&config, &state, "idle-user", t).0[0]),
                other,
                "{t}"
            );
        }
        // Idle 10 s: forgotten, back to the rendezvous target.
        assert_eq!(route(&config, &state, "idle-user", 37_000).0[0], order[0]);
    }
}
