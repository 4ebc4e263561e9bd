//! A loaded plugin: the compiled config and what the host keeps beside it, the ids of the
//! config's metrics. Config stays the ground floor (it knows nothing of metrics); both hosts
//! hold a `Plugin`, and a request keeps the one it started with across reloads.

use crate::core::config::Config;
use crate::core::metrics::MetricTable;

/// The plugin config as loaded by a host.
#[derive(Debug, Clone)]
pub struct Plugin {
    /// The compiled plugin config.
    pub config: Config,
    /// Where each metric of the config sits, and its host id once defined.
    pub metrics: MetricTable,
}

impl Plugin {
    /// `config`, with its metrics laid out and none defined in a host yet.
    pub fn new(config: Config) -> Plugin {
        let metrics = MetricTable::new(&config);
        Plugin { config, metrics }
    }

    /// The plugin with the host's id of each of its metrics, in
    /// [`crate::core::metrics::definitions`] order (set by the host once it has defined them).
    pub fn with_metric_ids(mut self, ids: Vec<u32>) -> Self {
        self.metrics = std::mem::take(&mut self.metrics).with_ids(ids);
        self
    }
}
