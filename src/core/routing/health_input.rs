//! Health applied on top of a strategy's order: healthy targets first, then unhealthy ones,
//! then evicted ones, each group keeping the strategy's order.
//!
//! TrueFoundry virtual models, "Unhealthy target detection": unhealthy targets move to the end of
//! the list and are used only as a last resort. agentgateway virtual models, "Failover routing": an
//! evicted target leaves the active set, so a priority group spills to the next only when every one
//! of its targets is evicted. Evicted targets stay at the very end rather than vanish, so a request
//! still has somewhere to go when everything is evicted.

use crate::core::config::{ModelId, VirtualModel};
use crate::core::health::policy::FailureWindow;
use crate::core::health::record::{HealthRecord, Standing, TpotWindow};

/// What routing knows about health at the moment of a decision.
#[derive(Debug, Clone, Copy)]
pub struct HealthInput<'a> {
    /// Records indexed by [`ModelId`]; a missing one is a healthy target.
    pub records: &'a [HealthRecord],
    /// The decision time.
    pub now_ms: u64,
    /// The failure window of the config.
    pub window: FailureWindow,
}

impl HealthInput<'_> {
    /// No health information: every target healthy.
    pub const NONE: HealthInput<'static> = HealthInput {
        records: &[],
        now_ms: 0,
        window: FailureWindow {
            failures: 0,
            window_ms: 0,
        },
    };

    /// Where a target of `vm` stands, its SLA cutoff included.
    pub fn standing(&self, vm: &VirtualModel, model: ModelId) -> Standing {
        let Some(record) = self.records.get(model.0) else {
            return Standing::Healthy;
        };
        match record.standing(self.now_ms, &self.window) {
            Standing::Healthy
                if vm.has_sla
                    && vm
                        .policy(model)
                        .sla
                        .is_some_and(|sla| sla.breached(record, self.now_ms)) =>
            {
                Standing::Unhealthy
            }
            Standing::Evicted if vm.max_evicted_share.is_some() => self.capped(vm, model),
            other => other,
        }
    }

    /// When every one of `candidates` is evicted (as `vm` sees them; a catalog model called
    /// directly by its own record): the shortest time left of their evictions, which the
    /// client's final answer carries as `Retry-After` when it has none of its own. `None` as
    /// soon as one candidate is not evicted, so a request with a healthy first choice reads
    /// one record.
    pub fn evicted_for_ms(&self, vm: Option<&VirtualModel>, candidates: &[ModelId]) -> Option<u64> {
        let mut shortest: Option<u64> = None;
        for &m in candidates {
            let record = self.records.get(m.0)?;
            let evicted = match vm {
                Some(vm) => self.standing(vm, m) == Standing::Evicted,
                None => self.now_ms < record.evicted_until_ms,
            };
            if !evicted {
                return None;
            }
            let left = record.evicted_until_ms.saturating_sub(self.now_ms);
            shortest = Some(shortest.map_or(left, |s| s.min(left)));
        }
        shortest
    }

    /// An evicted target of a virtual model with `max_evicted_share`: it stays evicted only
    /// while fewer than the share's targets that failed more recently are evicted too; past
    /// that it counts as unhealthy, so something still serves when everything looks broken
    /// (Envoy's outlier detection caps ejection the same way, `max_ejection_percent`). Off by
    /// default: agentgateway virtual models, "Failover routing", spills a priority group only
    /// when all of it is evicted, which a cap would prevent.
    fn capped(&self, vm: &VirtualModel, model: ModelId) -> Standing {
        let share = f64::from(vm.max_evicted_share.unwrap_or(1.0));
        // Each catalog model once, though a virtual model may list one in several places.
        let targets = vm
            .targets
            .iter()
            .enumerate()
            .filter(|(i, t)| vm.targets.iter().position(|u| u.model == t.model) == Some(*i))
            .map(|(_, t)| t.model);
        let allowed = (share * targets.clone().count() as f64).floor() as usize;
        // Most recently failed first; the model id breaks ties so every worker agrees.
        let key = |m: ModelId| {
            let last = self.records.get(m.0).and_then(|r| r.failures.last());
            (last.copied().unwrap_or(0), m.0)
        };
        let evicted = |m: ModelId| {
            self.records
                .get(m.0)
                .is_some_and(|r| self.now_ms < r.evicted_until_ms)
        };
        let ahead = targets
            .filter(|m| *m != model && evicted(*m) && key(*m) > key(model))
            .count();
        if ahead < allowed {
            Standing::Evicted
        } else {
            Standing::Unhealthy
        }
    }
}

impl HealthInput<'_> {
    /// Each target's share inside a priority group: its health score times its speed relative
    /// to the targets' average time per output token (a target without samples counts as
    /// average).
    pub fn shares(&self, models: &[ModelId]) -> Vec<(ModelId, f64)> {
        let (tpot, average) = self.tpots(models, |w| w.mean(self.now_ms));
        models
            .iter()
            .zip(tpot)
            .map(|(m, t)| {
                let score = self.records.get(m.0).map_or(1.0, |r| f64::from(r.score));
                (*m, score * average / t)
            })
            .collect()
    }

    /// Each model's time per output token by `mean`, a model without samples counting as the
    /// average of the others (1.0 when none has any); with that average.
    pub fn tpots(
        &self,
        models: &[ModelId],
        mean: impl Fn(&TpotWindow) -> Option<f64>,
    ) -> (Vec<f64>, f64) {
        let measured: Vec<Option<f64>> = models
            .iter()
            .map(|m| self.records.get(m.0).and_then(|r| mean(&r.latency)))
            .collect();
        let known: Vec<f64> = measured.iter().flatten().copied().collect();
        let average = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let tpot = measured
            .into_iter()
            .map(|t| t.unwrap_or(average).max(1e-3))
            .collect();
        (tpot, average)
    }
}

/// Where a standing goes in the order: healthy 0, unhealthy 1, evicted 2.
pub fn rank(standing: Standing) -> u8 {
    match standing {
        Standing::Healthy => 0,
        Standing::Unhealthy => 1,
        Standing::Evicted => 2,
    }
}

/// Reorders candidates by standing, stable within each standing. Each standing is computed
/// once; the common all-healthy case moves nothing.
pub fn apply(candidates: &mut Vec<ModelId>, standing: impl Fn(ModelId) -> Standing) {
    let ranks: Vec<u8> = candidates.iter().map(|m| rank(standing(*m))).collect();
    if ranks.iter().all(|r| *r == 0) {
        return;
    }
    let mut ranked: Vec<(u8, ModelId)> =
        ranks.into_iter().zip(candidates.iter().copied()).collect();
    ranked.sort_by_key(|(rank, _)| *rank);
    candidates.clear();
    candidates.extend(ranked.into_iter().map(|(_, m)| m));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_then_evicted_targets_move_back_keeping_strategy_order() {
        let mut c: Vec<ModelId> = (0..5).map(ModelId).collect();
        let standing = |m: ModelId| match m.0 {
            0 => Standing::Evicted,
            1 | 3 => Standing::Unhealthy,
            _ => Standing::Healthy,
        };
        apply(&mut c, standing);
        assert_eq!(c, [2, 4, 1, 3, 0].map(ModelId));
    }

    fn four_targets(cap: &str) -> crate::core::config::Config {
        let models: Vec<String> = (0..4)
            .map(|i| format!(r#"{{"name": "m{i}", "cluster": "c", "model": "m"}}"#))
            .collect();
        let targets: Vec<String> = (0..4)
            .map(|i| format!(r#"{{"target": "m{i}", "weight": 25}}"#))
            .collect();
        let json = format!(
            r#"{{"models": [{}], "virtual_models": [{{"name": "vm", "model_types": ["chat"], {cap}
                 "routing_config": {{"type": "weight-based-routing",
                   "load_balance_targets": [{}]}}}}]}}"#,
            models.join(","),
            targets.join(",")
        );
        crate::core::config::Config::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn past_max_evicted_share_the_least_recently_failed_evicted_targets_count_as_unhealthy() {
        // m0..m2 evicted until 10 s, last failed at 3, 1 and 2 s; m3 healthy.
        let evicted = |last: u64| HealthRecord {
            failures: vec![last * 1_000],
            evicted_until_ms: 10_000,
            ..HealthRecord::default()
        };
        let records = [evicted(3), evicted(1), evicted(2), HealthRecord::default()];
        let input = HealthInput {
            records: &records,
            now_ms: 5_000,
            window: FailureWindow::default(),
        };
        let standings = |config: &crate::core::config::Config| -> Vec<Standing> {
            let vm = &config.virtual_models[0];
            (0..4).map(|i| input.standing(vm, ModelId(i))).collect()
        };
        use Standing::*;
        // Half of four: the two most recently failed stay evicted, m1 (failed first) serves.
        let capped = four_targets(r#""max_evicted_share": 0.5,"#);
        assert_eq!(standings(&capped), [Evicted, Unhealthy, Evicted, Healthy]);
        let none = four_targets(r#""max_evicted_share": 0.0,"#);
        assert_eq!(standings(&none), [Unhealthy, Unhealthy, Unhealthy, Healthy]);
        // Off by default: every evicted target stays evicted.
        assert_eq!(
            standings(&four_targets("")),
            [Evicted, Evicted, Evicted, Healthy]
        );
        // The time left when every candidate is evicted, as each view sees them.
        let ids = |i: &[usize]| i.iter().map(|i| ModelId(*i)).collect::<Vec<_>>();
        let plain = four_targets("");
        let vm = Some(&plain.virtual_models[0]);
        assert_eq!(input.evicted_for_ms(vm, &ids(&[0, 1, 2])), Some(5_000));
        assert_eq!(input.evicted_for_ms(vm, &ids(&[0, 3])), None);
        assert_eq!(input.evicted_for_ms(None, &ids(&[1])), Some(5_000));
        let capped_vm = Some(&capped.virtual_models[0]);
        assert_eq!(
            input.evicted_for_ms(capped_vm, &ids(&[0, 1, 2])),
            None,
            "m1 serves"
        );
    }

    #[test]
    fn max_evicted_share_is_a_fraction_named_by_its_path() {
        let config = four_targets(r#""max_evicted_share": 0.5,"#);
        assert_eq!(config.virtual_models[0].max_evicted_share, Some(0.5));
        let json = r#"{"models": [{"name": "m", "cluster": "c", "model": "m"}],
            "virtual_models": [{"name": "vm", "model_types": ["chat"], "max_evicted_share": 2,
              "routing_config": {"type": "weight-based-routing",
                "load_balance_targets": [{"target": "m", "weight": 100}]}}]}"#;
        let err = crate::core::config::Config::parse(json.as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains("virtual_models[0].max_evicted_share"),
            "{err}"
        );
    }
}
