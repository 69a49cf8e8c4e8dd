//! The terminal's [`Progress`]: what `dasim run`, `dasim check` and a sweep's points show on
//! stderr while a [`Launch`](crate::launch::Launch) runs.

use indicatif::{ProgressBar, ProgressStyle};

use dasim_sim::engine::RunProgress;

use crate::simulation::Progress;

/// The terminal's [`Progress`]: a bar per algorithm with its simulated time, steps and rate,
/// and notes on stderr (when shown); warnings are printed in any case.
pub struct Bar {
    show: bool,
    bar: ProgressBar,
}

impl Bar {
    /// A bar on stderr; `show = false` keeps it hidden (warnings are still printed).
    pub fn new(show: bool) -> Bar {
        Bar {
            show,
            bar: ProgressBar::hidden(),
        }
    }
}

impl Progress for Bar {
    fn algorithm_started(&mut self, _label: &str) {
        self.bar = if self.show {
            ProgressBar::new(1000)
        } else {
            ProgressBar::hidden()
        };
        self.bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}%  {msg}",
            )
            .expect("valid template"),
        );
    }

    fn advanced(&mut self, label: &str, p: &RunProgress, wall_s: f64) {
        let wall = wall_s.max(1e-9);
        self.bar.set_position((p.fraction * 1000.0).round() as u64);
        self.bar.set_message(format!(
            "{label}  sim {:.2} s  {} steps  {:.0} steps/s",
            p.time.as_secs_f64(),
            p.worker_steps,
            p.worker_steps as f64 / wall
        ));
    }

    fn algorithm_finished(&mut self, _label: &str) {
        self.bar.finish_and_clear();
    }

    fn note(&mut self, message: &str) {
        if self.show {
            self.bar.suspend(|| eprintln!("{message}"));
        }
    }

    fn warning(&mut self, message: &str) {
        self.bar.suspend(|| eprintln!("warning: {message}"));
    }
}
