//! What a gradient pass of a model with a CPU program (a convolutional model, the transformer)
//! allocates, counted by a global allocator, stays within the memory estimate's activations term
//! (and the gradients it counts as in flight), so that the activations cannot silently grow
//! back: a pass that kept its buffers per replica, or allocated them afresh for every layer,
//! would fail here.
//!
//! One test in this binary: the allocator's counters are process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use dasim_models::memory::{MemoryEstimate, RunShape};
use dasim_models::{DataConfig, ModelConfig, Problem};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; the counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_gradient_pass_allocates_no_more_than_the_estimate_says() {
    // ResNet-20 (the convolutional CPU program) and a GPT of 4 blocks, d = 128, context 64 on
    // the shipped text (the transformer's), one after the other: the counters are the
    // process's.
    let resnet: ModelConfig = toml::from_str("kind = \"resnet\"\ndepth = 20").unwrap();
    let images: DataConfig = toml::from_str(
        "dataset = \"gaussian-mixture\"\nbatch_size = 32\n\
         synthetic = { samples = 600, shape = [3, 32, 32], classes = 10 }",
    )
    .unwrap();
    check(&resnet, &images, 32, "ResNet-20");
    let gpt: ModelConfig = toml::from_str(
        "kind = \"transformer\"\nlayers = 4\nd_model = 128\nheads = 4\ncontext = 64",
    )
    .unwrap();
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare.txt.gz");
    let text: DataConfig = toml::from_str(&format!(
        "dataset = \"text\"\npath = {text:?}\nbatch_size = 8"
    ))
    .unwrap();
    check(&gpt, &text, 8, "GPT 4x128");
}

fn check(model: &ModelConfig, data: &DataConfig, batch: usize, what: &str) {
    let problem = Problem::load(model, data, Path::new("."), 1).unwrap();
    let workers = 16;
    let threads = rayon::current_num_threads();
    let estimate = MemoryEstimate::new(RunShape {
        model: &problem.model,
        workers,
        rows: workers,
        batch,
        optimizer_state: 1,
        data_floats: problem.data_floats(),
        max_batch: None,
        queued_messages: 0,
        queued_models: 0,
        gpu: false,
        threads,
    });
    let optimizer: OptimizerConfig = toml::from_str("lr = 0.05\nmomentum = 0.9").unwrap();
    let mut store = problem
        .store(burn::tensor::Device::flex(), workers, batch, optimizer, 1)
        .with_threads(threads);
    // Two flushes of every worker: the first builds the threads' buffers, the second reuses
    // them; the peak above what was live before covers both.
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    for _ in 0..2 {
        let grads: Vec<_> = (0..workers).map(|w| store.request_gradient(w)).collect();
        let mean = store.mean_gradient(&grads);
        for w in 0..workers {
            store.apply_gradient(w, mean, 0.05);
        }
        store.release_gradient(mean);
    }
    let grown = PEAK.load(Ordering::SeqCst) - before;
    let bound = estimate.activations + estimate.in_flight;
    eprintln!(
        "two flushes of {workers} {what} requests on {threads} threads: peak {} MiB above the \
         start, bound {} MiB (activations {} MiB, in flight {} MiB)",
        grown >> 20,
        bound >> 20,
        estimate.activations >> 20,
        estimate.in_flight >> 20
    );
    assert!(
        grown as u64 <= bound,
        "{what}: a pass allocated {grown} bytes, more than the estimate's {bound}"
    );
    // Not a bound that any run would pass: the passes do keep their buffers.
    assert!(
        grown as u64 >= estimate.activations / 4,
        "{what}: {grown} bytes: the count does not see the passes"
    );
}
