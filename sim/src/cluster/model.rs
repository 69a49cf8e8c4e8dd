//! The compute model of a run: each worker's step durations, drawn as the `[cluster]` section says.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::time::{CLOCK_HINT, SimTime, num};
use crate::cluster::config::ClusterConfig;
use crate::cluster::host::Host;
use crate::cluster::slowdown::ModelState;
use crate::cluster::stragglers::{StragglerModel, TraceData, TraceEnd, load_trace};
use crate::env::BuildEnv;
use crate::error::ConfigError;

/// A worker's trace: its durations and what happens after the last.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Replay {
    steps: Arc<[SimTime]>,
    at_end: TraceEnd,
}

impl Replay {
    fn get(&self, k: u64) -> SimTime {
        let len = self.steps.len() as u64;
        let i = match self.at_end {
            TraceEnd::Repeat => k % len,
            TraceEnd::Hold => k.min(len - 1),
        };
        self.steps[i as usize]
    }
}

/// One worker's compute model.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Worker {
    base: SimTime,
    trace: Option<Replay>,
    models: Vec<ModelState>,
    steps: u64,
    history: Option<Vec<SimTime>>,
}

/// The compute model of a run: per-worker step durations.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cluster {
    workers: Vec<Worker>,
    /// Host work: its rates and every node's queue ([`crate::cluster::host`]).
    host: Host,
}

impl Cluster {
    /// Builds the compute model of `cfg`: validates it, resolves worker sets, derives base times,
    /// reads trace files (relative to [`BuildEnv::base_dir`]) and seeds every worker's streams
    /// from [`BuildEnv::seed`].
    pub fn new(cfg: &ClusterConfig, env: &BuildEnv) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let n = cfg.workers;
        let base = cfg.base_times(env)?;
        let mut workers: Vec<Worker> = base
            .into_iter()
            .map(|base| Worker {
                base,
                trace: None,
                models: Vec::new(),
                steps: 0,
                history: None,
            })
            .collect();
        let mut entries_of: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (m, s) in cfg.stragglers.iter().enumerate() {
            let prefix = format!("cluster.stragglers[{m}]");
            let at = |k: &str| format!("{prefix}.{k}");
            let covered = s.workers.resolve(n, env.seed, &at("workers"))?;
            for &w in &covered {
                entries_of[w].push(m);
            }
            if let StragglerModel::Trace(t) = &s.model {
                let data = load_trace(&env.resolve(&t.file), &at("file"))?;
                for &w in &covered {
                    let steps = match &data {
                        TraceData::Shared(v) => v.clone(),
                        TraceData::PerWorker(map) => per_worker(map, w, &at("file"))?,
                    };
                    workers[w].trace = Some(Replay {
                        steps,
                        at_end: t.at_end,
                    });
                }
                continue;
            }
            for &w in &covered {
                if let Some(state) = ModelState::new(&s.model, env.seed, w, m, &at)? {
                    workers[w].models.push(state);
                }
            }
        }
        for (w, entries) in entries_of.iter().enumerate() {
            check_step_bounds(cfg, w, &workers[w], entries)?;
        }
        Ok(Cluster {
            workers,
            host: Host::new(cfg.host_gbps, cfg.host_tflops),
        })
    }

    /// The nodes' host work ([`crate::cluster::host`]).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The nodes' host work, to charge it.
    pub fn host_mut(&mut self) -> &mut Host {
        &mut self.host
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The base step time of `worker` (before stragglers and traces).
    pub fn base_step_time(&self, worker: usize) -> SimTime {
        self.workers[worker].base
    }

    /// The duration of `worker`'s next step, which starts at `now`; advances that worker's step
    /// counter. Call it once per step, when the step starts.
    pub fn next_step_time(&mut self, worker: usize, now: SimTime) -> SimTime {
        let w = &mut self.workers[worker];
        let k = w.steps;
        w.steps += 1;
        let base = w.trace.as_ref().map_or(w.base, |t| t.get(k));
        let mut factor = 1.0;
        let mut delay_ms = 0.0;
        for m in &mut w.models {
            m.apply(now, &mut factor, &mut delay_ms);
        }
        let d = base.scale(factor) + SimTime::from_millis_f64(delay_ms);
        if let Some(h) = &mut w.history {
            h.push(d);
        }
        d
    }

    /// How many step durations `worker` has drawn.
    pub fn steps_drawn(&self, worker: usize) -> u64 {
        self.workers[worker].steps
    }

    /// Starts (or stops, discarding them) keeping every drawn duration, for inspection and tests.
    pub fn set_recording(&mut self, on: bool) {
        for w in &mut self.workers {
            w.history = on.then(Vec::new);
        }
    }

    /// The durations `worker` drew since recording started (empty when not recording).
    pub fn recorded(&self, worker: usize) -> &[SimTime] {
        self.workers[worker].history.as_deref().unwrap_or(&[])
    }
}

/// Checks that worker `w`'s steps fit the clock: its longest base time (its trace's longest
/// duration) times every factor that may apply to it (fixed, Markov and window factors, and the
/// mean of a jitter factor) stays within [`SimTime::MAX_CONFIG`], and its shortest mean step
/// (shortest base × fixed factors × jitter means + mean delays) lasts at least 1 ns. `entries`
/// are the straggler entries covering `w`, in order; an error is at the key of the entry that
/// crosses the bound, and states that key's largest (or smallest) value.
fn check_step_bounds(
    cfg: &ClusterConfig,
    w: usize,
    worker: &Worker,
    entries: &[usize],
) -> Result<(), ConfigError> {
    let ns = |t: SimTime| t.as_nanos() as f64;
    let (base_hi, base_lo) = match &worker.trace {
        Some(r) => {
            let hi = r.steps.iter().copied().max().unwrap_or(worker.base);
            let lo = r.steps.iter().copied().min().unwrap_or(worker.base);
            (ns(hi), ns(lo))
        }
        None => (ns(worker.base), ns(worker.base)),
    };
    let max_ns = ns(SimTime::MAX_CONFIG);
    let ms = |x: f64| num(x / 1e6);
    let mut hi = base_hi;
    let mut lo = base_lo;
    let mut delay = 0.0;
    let mut last_jitter = None;
    for &m in entries {
        let (key, factor) = match &cfg.stragglers[m].model {
            StragglerModel::Fixed { factor } => {
                lo *= factor;
                ("factor", *factor)
            }
            StragglerModel::Jitter(j) => {
                lo *= j.mean;
                last_jitter = Some((m, j.mean));
                ("mean", j.mean)
            }
            StragglerModel::Markov(mk) => ("factor", mk.factor),
            StragglerModel::Window(wn) => ("factor", wn.factor),
            StragglerModel::Delay(d) => {
                delay += d.mean_ms * 1e6;
                continue;
            }
            StragglerModel::Trace(_) => continue,
        };
        let before = hi;
        hi *= factor;
        if hi > max_ns {
            let path = format!("cluster.stragglers[{m}].{key}");
            return Err(ConfigError::new(
                &path,
                format!(
                    "{path} = {} makes worker {w}'s step {} ms, more than simulated time can hold \
                     (at most {} ms): on its step of up to {} ms before this entry, {key} can be \
                     at most {}",
                    num(factor),
                    ms(hi),
                    ms(max_ns),
                    ms(before),
                    num(max_ns / before)
                ),
            )
            .hint(CLOCK_HINT));
        }
    }
    if let Some((m, mean)) = last_jitter
        && lo + delay < 1.0
    {
        // The mean step without this entry's factor.
        let others = lo / mean;
        let path = format!("cluster.stragglers[{m}].mean");
        return Err(ConfigError::new(
            &path,
            format!(
                "with {path} = {}, worker {w}'s mean step is {} ns, shorter than 1 ns, the \
                 resolution of simulated time: on its step of {} ms, the mean factor must be at \
                 least {}",
                num(mean),
                num(lo + delay),
                ms(others),
                num((1.0 - delay) / others)
            ),
        )
        .hint("steps that round to 0 ns would make the run loop at one instant"));
    }
    Ok(())
}

fn per_worker(
    map: &BTreeMap<usize, Arc<[SimTime]>>,
    w: usize,
    path: &str,
) -> Result<Arc<[SimTime]>, ConfigError> {
    map.get(&w).cloned().ok_or_else(|| {
        let have: Vec<String> = map.keys().map(usize::to_string).collect();
        ConfigError::new(
            path,
            format!(
                "the trace has no row for worker {w} (it has workers {})",
                have.join(", ")
            ),
        )
        .hint("add rows for this worker, or narrow this entry's `workers`")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::StragglerConfig;

    fn cfg() -> ClusterConfig {
        ClusterConfig::new(4)
            .with_step_time_ms(10.0)
            .with_straggler(StragglerConfig::fixed([1], 4.0))
    }

    #[test]
    fn fixed_slowdown_scales_the_base_time() {
        let mut c = Cluster::new(&cfg(), &BuildEnv::new(1)).unwrap();
        let t = SimTime::ZERO;
        assert_eq!(c.next_step_time(0, t), SimTime::from_millis_f64(10.0));
        assert_eq!(c.next_step_time(1, t), SimTime::from_millis_f64(40.0));
        assert_eq!(c.steps_drawn(1), 1);
    }

    #[test]
    fn invalid_values_are_rejected_with_their_path() {
        let mut c = cfg();
        c.workers = 0;
        let e = c.validate().unwrap_err();
        assert_eq!(e.path.to_string(), "cluster.workers");
        assert!(e.message.contains("at least 2, got 0"));

        let mut c = cfg();
        c.stragglers[0].model = StragglerModel::Fixed { factor: 0.5 };
        let e = c.validate().unwrap_err();
        assert_eq!(e.path.to_string(), "cluster.stragglers[0].factor");

        let mut c = cfg();
        c.stragglers[0].workers = vec![9].into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path.to_string(), "cluster.stragglers[0].workers");
    }
}
