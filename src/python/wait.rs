//! A run or a sweep on a thread of its own, without the GIL, while the calling thread hands
//! its progress to a Python reporter and checks for signals.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;

use dasim_sim::engine::RunProgress;

use crate::simulation::Progress;
use crate::sweep::exec::{SweepProgress, SweepReport};

use super::bug;

/// What a run or a sweep reports while it goes, queued for the waiting Python thread.
#[derive(Debug)]
enum Event {
    Started(String),
    Advanced {
        label: String,
        fraction: f64,
        sim_time_s: f64,
        steps: u64,
        wall_s: f64,
    },
    Finished(String),
    Note(String),
    Warning(String),
    SweepStarted {
        total: usize,
        selected: usize,
        skipped: usize,
        to_run: usize,
    },
    PointEnded {
        name: String,
        error: Option<String>,
        wall_s: f64,
    },
}

/// The queue of [`Event`]s; consecutive `Advanced` events are merged into the last.
#[derive(Clone, Default)]
pub(super) struct Events(Arc<Mutex<Vec<Event>>>);

impl Events {
    fn push(&self, e: Event) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(e, Event::Advanced { .. }) && matches!(q.last(), Some(Event::Advanced { .. })) {
            q.pop();
        }
        q.push(e);
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Progress for Events {
    fn algorithm_started(&mut self, label: &str) {
        self.push(Event::Started(label.to_owned()));
    }
    fn advanced(&mut self, label: &str, p: &RunProgress, wall_s: f64) {
        self.push(Event::Advanced {
            label: label.to_owned(),
            fraction: p.fraction,
            sim_time_s: p.time.as_secs_f64(),
            steps: p.worker_steps,
            wall_s,
        });
    }
    fn algorithm_finished(&mut self, label: &str) {
        self.push(Event::Finished(label.to_owned()));
    }
    fn note(&mut self, message: &str) {
        self.push(Event::Note(message.to_owned()));
    }
    fn warning(&mut self, message: &str) {
        self.push(Event::Warning(message.to_owned()));
    }
}

impl SweepProgress for Events {
    fn started(&mut self, report: &SweepReport, to_run: usize) {
        self.push(Event::SweepStarted {
            total: report.total,
            selected: report.selected,
            skipped: report.skipped,
            to_run,
        });
    }
    fn point_ended(&mut self, name: &str, error: Option<&str>, wall_s: f64) {
        self.push(Event::PointEnded {
            name: name.to_owned(),
            error: error.map(str::to_owned),
            wall_s,
        });
    }
}

/// Hands `events` to the reporter's methods (`started`, `advanced`, `finished`, `note`,
/// `warning`, `sweep_started`, `point_ended`).
fn report(reporter: &Bound<'_, PyAny>, events: Vec<Event>) -> PyResult<()> {
    for e in events {
        match e {
            Event::Started(label) => reporter.call_method1("started", (label,))?,
            Event::Advanced {
                label,
                fraction,
                sim_time_s,
                steps,
                wall_s,
            } => reporter.call_method1("advanced", (label, fraction, sim_time_s, steps, wall_s))?,
            Event::Finished(label) => reporter.call_method1("finished", (label,))?,
            Event::Note(m) => reporter.call_method1("note", (m,))?,
            Event::Warning(m) => reporter.call_method1("warning", (m,))?,
            Event::SweepStarted {
                total,
                selected,
                skipped,
                to_run,
            } => reporter.call_method1("sweep_started", (total, selected, skipped, to_run))?,
            Event::PointEnded {
                name,
                error,
                wall_s,
            } => reporter.call_method1("point_ended", (name, error, wall_s))?,
        };
    }
    Ok(())
}

/// Runs `work` on a thread of its own, the GIL released, while this thread hands its events to
/// `reporter` and checks for signals every tenth of a second. A signal's exception (Ctrl-C's
/// `KeyboardInterrupt`) or the reporter's raises `stop` and is returned once `work` has
/// returned; a panic in `work` is [`InternalError`].
pub(super) fn wait_for<T: Send>(
    py: Python<'_>,
    reporter: Option<&Bound<'_, PyAny>>,
    events: &Events,
    stop: &AtomicBool,
    work: impl FnOnce() -> T + Send,
) -> (PyResult<T>, Option<PyErr>) {
    let mut raised: Option<PyErr> = None;
    let result = std::thread::scope(|s| {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = s.spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(work));
            let _ = done_tx.send(());
            r
        });
        let mut done_rx = Some(done_rx);
        loop {
            let rx = done_rx.take().expect("put back below");
            let (finished, rx) = py.detach(move || {
                let r = rx.recv_timeout(Duration::from_millis(100));
                let timeout = matches!(r, Err(std::sync::mpsc::RecvTimeoutError::Timeout));
                (!timeout, rx)
            });
            done_rx = Some(rx);
            let pending = events.take();
            if let Some(r) = reporter
                && raised.is_none()
                && let Err(e) = report(r, pending)
            {
                stop.store(true, Ordering::SeqCst);
                raised = Some(e);
            }
            if let Err(e) = py.check_signals() {
                stop.store(true, Ordering::SeqCst);
                raised.get_or_insert(e);
            }
            if finished {
                break;
            }
        }
        handle.join().expect("the work's panics are caught")
    });
    (result.map_err(|panic| bug(&*panic)), raised)
}
