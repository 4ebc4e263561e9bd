//! `latency-based-routing` (TrueFoundry virtual models, "Latency-based routing"): no weights. Each
//! target's time per output token (TPOT) over the successful answers of the last 20 minutes is
//! measured; targets without samples count as the average. A caller is pinned for a 10-minute
//! epoch by a deterministic weighted rendezvous hash whose odds are inversely proportional to
//! TPOT, so faster targets get more callers but every target keeps some; the others follow
//! fastest first as fallbacks. TPOT is taken as it stood when the epoch began, so a caller's
//! inputs stay fixed for the whole epoch. The caller's identity is hashed at once and never
//! stored.

use super::health_input::HealthInput;
use super::rendezvous::{hash64, rendezvous_score_f64};
use super::request::Request;
use crate::core::config::{Config, ModelId, SessionIdentifier};

/// A caller keeps its target for this long.
pub const EPOCH_MS: u64 = 600_000;

/// The order of a request's targets (those it may reach) for its caller: its
/// `caller_identifier`, else the config's `caller_identity`.
pub fn route(
    config: &Config,
    vm_name: &str,
    targets: &[ModelId],
    caller: Option<&SessionIdentifier>,
    request: &Request<'_>,
    health: &HealthInput<'_>,
) -> Vec<ModelId> {
    let id = caller_key(config, caller, request);
    order(config, vm_name, targets, &id, health)
}

/// Who the caller is for latency routing: its `caller_identifier`, else the config's
/// `caller_identity` (by default the client's credential); hashed at once so the raw value
/// goes nowhere.
fn caller_key(
    config: &Config,
    caller: Option<&SessionIdentifier>,
    request: &Request<'_>,
) -> [u8; 8] {
    let hash = match caller {
        Some(id) => hash64(&[request.identifier(id).as_deref().unwrap_or_default()]),
        None => {
            let caller = request.caller(&config.caller_identity);
            hash64(&[&caller.0])
        }
    };
    hash.to_le_bytes()
}

/// The caller's target first, then the rest fastest first.
pub fn order(
    config: &Config,
    vm_name: &str,
    targets: &[ModelId],
    caller: &[u8],
    health: &HealthInput<'_>,
) -> Vec<ModelId> {
    let epoch = health.now_ms / EPOCH_MS;
    let epoch_start = epoch * EPOCH_MS;
    let (measured, _) = health.tpots(targets, |w| w.mean_before(epoch_start));
    let tpot: Vec<(ModelId, f64)> = targets.iter().copied().zip(measured).collect();
    let key = hash64(&[vm_name.as_bytes(), caller, &epoch.to_le_bytes()]);
    let name = |m: ModelId| config.model(m).map_or("", |m| m.name.as_str());
    let primary = tpot
        .iter()
        .map(|(m, t)| (rendezvous_score_f64(key, name(*m), 1.0 / t), *m))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, m)| m);
    let mut rest: Vec<(ModelId, f64)> = tpot
        .into_iter()
        .filter(|(m, _)| Some(*m) != primary)
        .collect();
    rest.sort_by(|a, b| a.1.total_cmp(&b.1));
    primary
        .into_iter()
        .chain(rest.into_iter().map(|(m, _)| m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::health::policy::FailureWindow;
    use crate::core::health::record::HealthRecord;

    fn config() -> Config {
        Config::parse(
            br#"{"models": [
                {"name": "fast", "cluster": "c", "model": "m"},
                {"name": "slow", "cluster": "c", "model": "m"},
                {"name": "new", "cluster": "c", "model": "m"}],
              "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
                "type": "latency-based-routing", "load_balance_targets": [
                  {"target": "fast"}, {"target": "slow"}, {"target": "new"}]}}]}"#,
        )
        .unwrap()
    }

    /// Samples taken in the minute before `now`'s epoch began.
    fn records(now: u64) -> Vec<HealthRecord> {
        let before_epoch = (now / EPOCH_MS) * EPOCH_MS - 1;
        let mut fast = HealthRecord::default();
        let mut slow = HealthRecord::default();
        fast.latency.add(10, before_epoch);
        slow.latency.add(30, before_epoch);
        vec![fast, slow, HealthRecord::default()]
    }

    #[test]
    fn callers_split_inversely_to_tpot_and_unmeasured_targets_count_as_average() {
        let c = config();
        let now = 1_300_000;
        let recs = records(now);
        let health = HealthInput {
            records: &recs,
            now_ms: now,
            window: FailureWindow::default(),
        };
        let targets = [ModelId(0), ModelId(1), ModelId(2)];
        let mut firsts = [0u32; 3];
        for caller in 0..10_000u32 {
            let o = order(&c, "vm", &targets, &caller.to_le_bytes(), &health);
            firsts[o[0].0] += 1;
        }
        // TPOT 10, 30 and the average 20: odds 1/10 : 1/30 : 1/20 = 6 : 2 : 3 of 11.
        for (got, expected) in firsts.iter().zip([5455u32, 1818, 2727]) {
            assert!(got.abs_diff(expected) < 200, "{firsts:?}");
        }
    }

    #[test]
    fn a_caller_keeps_its_target_for_the_epoch_and_fallbacks_go_fastest_first() {
        let c = config();
        let targets = [ModelId(0), ModelId(1), ModelId(2)];
        let start = 6_000_000; // an epoch boundary
        let mut moved = 0;
        for caller in 0..300u32 {
            let at = |now: u64| {
                let recs = records(now);
                let health = HealthInput {
                    records: &recs,
                    now_ms: now,
                    window: FailureWindow::default(),
                };
                order(&c, "vm", &targets, &caller.to_le_bytes(), &health)
            };
            let first = at(start);
            assert_eq!(
                at(start + EPOCH_MS - 1)[0],
                first[0],
                "sticky for the whole epoch"
            );
            if at(start + EPOCH_MS)[0] != first[0] {
                moved += 1;
            }
            let rest: Vec<usize> = first[1..].iter().map(|m| m.0).collect();
            let mut expected = vec![0, 2, 1]; // 10, 20 (average), 30
            expected.retain(|i| *i != first[0].0);
            assert_eq!(rest, expected);
        }
        assert!(
            moved > 50,
            "a new epoch re-draws callers ({moved} of 300 moved)"
        );
    }
}
