//! Partitioning the training split across workers, and the `partition.csv` that records it.
//!
//! Every kind draws from stream (Init, 2) and assigns every training sample to exactly one
//! worker; no shard is empty (that is an error, not a panic).
//!
//! - **iid**: shuffle `0..len`, then deal contiguous shards; the first `len mod n` shards get one
//!   sample more, so sizes differ by at most one.
//! - **dirichlet** (α): the indices of each class, in ascending order, are shuffled (class by
//!   class). Then for each class `k` in turn, proportions `p ~ Dirichlet(α, …, α)` over the `n`
//!   workers are drawn, the class's `n_k` samples are apportioned to the workers by largest
//!   remainder of `p_j·n_k` (as for unequal sizes, below), and worker `j` gets the next
//!   contiguous run of the shuffled class (Hsu et al. 2019; NIID-Bench's label-Dirichlet). If a worker
//!   ends with no sample, all proportions are drawn again (the shuffles are kept), up to
//!   [`DIRICHLET_ATTEMPTS`] times: the partition is Dirichlet conditioned on no empty shard.
//!   A proportion vector is drawn as `g_j = G_j · U_j^{1/α}` with `G_j ~ Gamma(α + 1, 1)` and
//!   `U_j` uniform in `(0, 1]` (drawn `G_0, U_0, G_1, U_1, …`), normalized in log space, which
//!   stays exact for very small α.
//! - **shards** (k per worker, McMahan et al. 2017): shuffle `0..len`, stable-sort by label (so
//!   each class is in random order), cut into `n·k` contiguous shards whose sizes differ by at
//!   most one (nothing is dropped), shuffle the shard numbers and give worker `j` the shards at
//!   positions `j·k … j·k + k − 1` of that order.
//! - **unequal**: sizes proportional to the weights (or to `(i + 1)^−power`), apportioned by
//!   largest remainder (ties to the lower worker), then the iid shuffle is cut into contiguous
//!   shards of those sizes. With equal weights this is exactly the iid partition.

use rand::Rng;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Gamma};

use dasim_sim::ConfigError;
use dasim_sim::clock::rng::{Stream, StreamKind, stream};

use crate::error::Result;

use super::config::PartitionConfig;
use super::{Dataset, TargetKind};

/// The stream id (kind Init) of the partition.
pub const PARTITION_STREAM: u64 = 2;

/// How many Dirichlet draws are tried before giving up on a partition without empty shards.
pub const DIRICHLET_ATTEMPTS: usize = 1000;

/// IID partition: `workers` shards of a shuffled order of `0..len`, sizes differing by at most
/// one. (`partition` with [`PartitionConfig::Iid`] checks its arguments; this does not.)
pub fn partition_iid(len: usize, workers: usize, seed: u64) -> Vec<Vec<usize>> {
    let sizes: Vec<usize> = (0..workers)
        .map(|w| len / workers + usize::from(w < len % workers))
        .collect();
    cut(&shuffled(len, &mut rng(seed)), &sizes)
}

fn rng(seed: u64) -> Stream {
    stream(seed, StreamKind::Init, PARTITION_STREAM)
}

fn shuffled(len: usize, rng: &mut Stream) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(rng);
    order
}

fn cut(order: &[usize], sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            start += s;
            order[start - s..start].to_vec()
        })
        .collect()
}

/// Divides the training split `train` among `workers` as `cfg` says, from stream (Init, 2).
/// Every sample is in exactly one shard, and no shard is empty.
///
/// Errors ([`crate::Error::Config`], at the scenario field to change): fewer samples than
/// workers (or than shards), weights not one per worker, an empty shard (weights too uneven,
/// α too small for the number of workers), a label-skewed kind on real-valued targets.
pub fn partition(
    cfg: &PartitionConfig,
    train: &Dataset,
    workers: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    cfg.validate()?;
    let n = train.len();
    if workers == 0 {
        return Err(
            ConfigError::new("cluster.workers", "there are no workers to partition among").into(),
        );
    }
    if n < workers {
        return Err(ConfigError::new(
            "cluster.workers",
            format!("{workers} workers cannot share {n} training samples"),
        )
        .hint("every worker needs a shard of at least one sample: use fewer workers or more data")
        .into());
    }
    let shards = match cfg {
        PartitionConfig::Iid {} => partition_iid(n, workers, seed),
        PartitionConfig::Dirichlet { alpha } => {
            dirichlet(train, label_classes(train, cfg)?, workers, *alpha, seed)?
        }
        PartitionConfig::Shards { per_worker } => {
            label_classes(train, cfg)?;
            shards(train, workers, *per_worker, seed)?
        }
        PartitionConfig::Unequal { weights, power } => {
            let (weights, field) = match (weights, power) {
                (Some(w), _) => {
                    if w.len() != workers {
                        return Err(ConfigError::new(
                            "data.partition.weights",
                            format!("{} weights for {workers} workers", w.len()),
                        )
                        .hint("give one weight per worker")
                        .into());
                    }
                    (w.clone(), "data.partition.weights")
                }
                (None, Some(s)) => (
                    (0..workers).map(|i| ((i + 1) as f64).powf(-s)).collect(),
                    "data.partition.power",
                ),
                (None, None) => unreachable!("validated"),
            };
            let sizes = apportion(n, &weights);
            if let Some(j) = sizes.iter().position(|&s| s == 0) {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "worker {j} gets no sample: its share of the {n} training samples is {:.3}",
                        n as f64 * weights[j] / weights.iter().sum::<f64>()
                    ),
                )
                .hint("make the sizes less uneven, or use fewer workers or more data")
                .into());
            }
            cut(&shuffled(n, &mut rng(seed)), &sizes)
        }
    };
    debug_assert!(shards.iter().all(|s| !s.is_empty()));
    Ok(shards)
}

fn label_classes(train: &Dataset, cfg: &PartitionConfig) -> Result<usize> {
    match train.target {
        TargetKind::Classes(c) => Ok(c),
        TargetKind::Real | TargetKind::Tokens(_) => Err(ConfigError::new(
            "data.partition.kind",
            format!(
                "a `{}` partition skews labels, and this dataset has real-valued targets",
                cfg.name()
            ),
        )
        .hint("use kind = \"iid\" or \"unequal\"")
        .into()),
    }
}

/// Largest-remainder apportionment of `n` items to `weights` (ties to the lower index).
fn apportion(n: usize, weights: &[f64]) -> Vec<usize> {
    let total: f64 = weights.iter().sum();
    let quotas: Vec<f64> = weights.iter().map(|w| n as f64 * w / total).collect();
    let mut sizes: Vec<usize> = quotas.iter().map(|q| (q.floor() as usize).min(n)).collect();
    let assigned: usize = sizes.iter().sum();
    let mut rest = n.saturating_sub(assigned);
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        let (ra, rb) = (quotas[a] - quotas[a].floor(), quotas[b] - quotas[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &j in by_remainder.iter().cycle() {
        if rest == 0 {
            break;
        }
        sizes[j] += 1;
        rest -= 1;
    }
    sizes
}

/// Dirichlet(α, …, α) proportions over `k` parts; see the module documentation.
fn dirichlet_proportions(alpha: f64, k: usize, rng: &mut Stream, out: &mut Vec<f64>) {
    let gamma = Gamma::new(alpha + 1.0, 1.0).expect("alpha + 1 > 0");
    out.clear();
    for _ in 0..k {
        let g: f64 = gamma.sample(rng);
        let u = 1.0 - rng.random::<f64>();
        out.push(g.ln() + u.ln() / alpha);
    }
    let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in out.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in out.iter_mut() {
        *v /= sum;
    }
}

fn by_class(train: &Dataset, classes: usize) -> Vec<Vec<usize>> {
    let mut groups = vec![Vec::new(); classes];
    for (i, &l) in train.labels.iter().enumerate() {
        groups[l as usize].push(i);
    }
    groups
}

fn dirichlet(
    train: &Dataset,
    classes: usize,
    workers: usize,
    alpha: f64,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let rng = &mut rng(seed);
    let mut groups = by_class(train, classes);
    for g in &mut groups {
        g.shuffle(rng);
    }
    let mut p = Vec::with_capacity(workers);
    for _ in 0..DIRICHLET_ATTEMPTS {
        let mut shards = vec![Vec::new(); workers];
        for g in &groups {
            dirichlet_proportions(alpha, workers, rng, &mut p);
            let mut start = 0;
            for (shard, size) in shards.iter_mut().zip(apportion(g.len(), &p)) {
                shard.extend_from_slice(&g[start..start + size]);
                start += size;
            }
        }
        if shards.iter().all(|s| !s.is_empty()) {
            return Ok(shards);
        }
    }
    Err(ConfigError::new(
        "data.partition.alpha",
        format!(
            "Dirichlet(α = {alpha}) left a worker without samples in each of {DIRICHLET_ATTEMPTS} draws ({} training samples, {classes} classes, {workers} workers)",
            train.len()
        ),
    )
    .hint("raise alpha, or use fewer workers: with a small alpha each class goes to about one worker")
    .into())
}

fn shards(
    train: &Dataset,
    workers: usize,
    per_worker: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    let n = train.len();
    let count = workers * per_worker;
    if count > n {
        return Err(ConfigError::new(
            "data.partition.per_worker",
            format!(
                "{workers} workers × {per_worker} shards = {count} shards, but the training split has only {n} samples"
            ),
        )
        .hint("lower per_worker, or use fewer workers or more data")
        .into());
    }
    let rng = &mut rng(seed);
    let mut order = shuffled(n, rng);
    order.sort_by_key(|&i| train.labels[i]);
    let sizes: Vec<usize> = (0..count)
        .map(|s| n / count + usize::from(s < n % count))
        .collect();
    let pieces = cut(&order, &sizes);
    let mut ids: Vec<usize> = (0..count).collect();
    ids.shuffle(rng);
    Ok(ids
        .chunks_exact(per_worker)
        .map(|mine| {
            mine.iter()
                .flat_map(|&s| pieces[s].iter().copied())
                .collect()
        })
        .collect())
}

/// Per worker, the number of samples of each class (empty rows for real targets).
pub fn class_counts(shards: &[Vec<usize>], train: &Dataset) -> Vec<Vec<usize>> {
    let classes = train.classes().unwrap_or(0);
    shards
        .iter()
        .map(|s| {
            let mut counts = vec![0; classes];
            if classes > 0 {
                for &i in s {
                    counts[train.labels[i] as usize] += 1;
                }
            }
            counts
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iid_partition_assigns_every_sample_once() {
        let shards = partition_iid(103, 10, 1);
        let mut all: Vec<usize> = shards.concat();
        all.sort_unstable();
        assert_eq!(all, (0..103).collect::<Vec<_>>());
        assert!(shards.iter().all(|s| s.len() == 10 || s.len() == 11));
    }

    #[test]
    fn apportionment_is_exact_and_fair() {
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(apportion(100, &[3.0, 1.0]), vec![75, 25]);
        assert_eq!(apportion(7, &[1.0; 7]), vec![1; 7]);
        let s = apportion(1000, &[0.5, 0.2, 0.2, 0.1]);
        assert_eq!(s.iter().sum::<usize>(), 1000);
    }

    #[test]
    fn dirichlet_proportions_sum_to_one_even_for_tiny_alpha() {
        let r = &mut rng(5);
        let mut p = Vec::new();
        for alpha in [1e-3, 0.1, 1.0, 100.0] {
            dirichlet_proportions(alpha, 8, r, &mut p);
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{p:?}");
            assert!(p.iter().all(|v| v.is_finite() && *v >= 0.0));
        }
    }
}
