//! Process setup that the command line and a binding share: the compute backend, the thread
//! pools, the allocator's behaviour, the Vulkan driver's display check, and Ctrl-C.
//!
//! A program that runs simulations calls [`quiet_display_probe`] and [`keep_freed_memory`]
//! first (before any other thread exists); a [`Launch`](crate::launch::Launch) then starts its
//! [`Pool`] and chooses its [`backend`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use dasim_models::{Backend, BackendChoice};

use crate::{Error, Result};

/// The compute backend: `auto` takes a hardware GPU if present (wgpu), else `flex` on the CPU.
/// A choice is resolved once per process: later calls get the same backend without looking
/// for adapters again.
pub fn backend(choice: BackendChoice) -> Result<Backend> {
    static CHOSEN: Mutex<Vec<(BackendChoice, Backend)>> = Mutex::new(Vec::new());
    let mut chosen = CHOSEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, b)) = chosen.iter().find(|(c, _)| *c == choice) {
        return Ok(b.clone());
    }
    let b = dasim_models::backend::select(choice)?;
    chosen.push((choice, b.clone()));
    Ok(b)
}

/// The named choice that gives `backend` (`flex` or `wgpu`, never `auto`): what a checkpoint
/// records, and what a resumed run must run on again.
pub fn choice_of(backend: &Backend) -> BackendChoice {
    if dasim_models::backend::is_flex(&backend.device) {
        BackendChoice::Flex
    } else {
        BackendChoice::Wgpu
    }
}

/// mimalloc's `mi_option_purge_delay` (the 16th entry of `mi_option_e` in the bundled v3
/// `mimalloc.h`; the crate exports no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc (the command line's global allocator) never to return freed memory to the
/// kernel, unless the user set `MIMALLOC_PURGE_DELAY` themselves. By default (mimalloc 3,
/// `options.c`) it gives back memory unused for a second, and a later flush's matrix products
/// fault it in again as pages the kernel must zero: on the 16-worker MLP 784-128-10 benchmark
/// the page zeroing was a tenth to a fifth of the samples. The cost can be a higher peak of
/// resident memory (the book's performance chapter has the figures).
///
/// # Safety
///
/// `mi_option_set` is not thread-safe: call this before any other thread exists.
pub unsafe fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: the caller guarantees that no other thread exists.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
    }
}

/// Probing for a GPU loads the Vulkan driver, whose window-system code prints
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` on a machine without a
/// desktop session, although nothing is wrong: dasim never opens a window. An absolute path is
/// all that check wants, so where the variable is unset it gets the temporary directory.
///
/// # Safety
///
/// It sets an environment variable: call it before any other thread exists.
pub unsafe fn quiet_display_probe() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: the caller guarantees that nothing reads the environment concurrently.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
}

/// A started thread pool: the store's flush groups and the backend's own parallel kernels share
/// it, so one thread is one thread. A run executes inside it ([`Pool::install`]).
pub struct Pool {
    threads: usize,
    /// `None`: the process's global pool ([`Pool::process`]).
    own: Option<rayon::ThreadPool>,
}

impl Pool {
    /// The one pool of the process, with `threads` threads (`None`: every core): what the
    /// command line runs on. The first call starts it; a later one must ask for as many.
    pub fn process(threads: Option<usize>) -> Result<Pool> {
        static STARTED: Mutex<Option<usize>> = Mutex::new(None);
        let threads = count(threads)?;
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        match *started {
            Some(n) if n == threads => {}
            Some(n) => {
                return Err(Error::Usage(format!(
                    "cannot start {threads} threads: the process's pool has {n}"
                )));
            }
            None => {
                builder(threads)
                    .build_global()
                    .map_err(|e| Error::Usage(format!("cannot start {threads} threads: {e}")))?;
                *started = Some(threads);
            }
        }
        Ok(Pool { threads, own: None })
    }

    /// A pool of `threads` threads (`None`: every core) of its own, ended when it is dropped:
    /// what a program that embeds dasim runs each launch on (the Python package; a sweep's
    /// points in one process, each on its own).
    pub fn own(threads: Option<usize>) -> Result<Pool> {
        let threads = count(threads)?;
        let pool = builder(threads)
            .build()
            .map_err(|e| Error::Usage(format!("cannot start {threads} threads: {e}")))?;
        Ok(Pool {
            threads,
            own: Some(pool),
        })
    }

    /// Its number of threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `work` on a thread of the pool, and waits for it. The simulation's own thread is
    /// then one of the pool's threads: the splits it hands out (a flush's groups, a long
    /// optimizer step or mean) run on it and on the others, instead of on the pool's threads
    /// while it waits, so two threads are two busy threads, not three competing for two cores.
    pub fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        match &self.own {
            Some(pool) => pool.install(work),
            None => rayon::scope(|_| work()),
        }
    }
}

/// `threads`, or every core; zero is refused.
fn count(threads: Option<usize>) -> Result<usize> {
    match threads {
        Some(0) => Err(Error::Usage("--threads must be at least 1".into())),
        Some(t) => Ok(t),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

fn builder(threads: usize) -> rayon::ThreadPoolBuilder {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        // The simulation runs on one of these threads (`Pool::install`): the main thread's
        // stack.
        .stack_size(8 << 20)
}

/// Raised by the first Ctrl-C: a run given it
/// ([`Checkpoints::interrupt`](crate::simulation::Checkpoints::interrupt)) stops after the
/// current event and writes a checkpoint. A second Ctrl-C ends the process at once.
pub fn interrupt_flag() -> &'static AtomicBool {
    static FLAG: AtomicBool = AtomicBool::new(false);
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if FLAG.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: stopping after the current event to write a checkpoint (Ctrl-C again to quit now)"
            );
        });
        if let Err(e) = installed {
            eprintln!("warning: Ctrl-C will not write a checkpoint: {e}");
        }
    });
    &FLAG
}
