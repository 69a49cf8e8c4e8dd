//! Availability traces: each worker's off intervals, read from a CSV file (`[[faults]] kind =
//! "availability"`).
//!
//! ```text
//! worker,off_s,on_s
//! 3,0.5,0.8        # worker 3 is off from 0.5 s to 0.8 s
//! 3,2.0,           # and from 2 s to the end of the run
//! 7,0.1,0.15
//! ```
//!
//! An off interval is a crash at `off_s` and, when `on_s` is given, a rejoin at `on_s`, with
//! everything a crash means (the step under way is lost, messages landing meanwhile are dropped,
//! the algorithm must handle rejoins or refuses the scenario). A worker's intervals may come in
//! any order in the file but must not overlap. `#` starts a comment; blank lines are skipped.

use crate::clock::time::SimTime;

/// What the file must look like, for error hints.
pub const HINT: &str = "an availability file is CSV with a header `worker,off_s,on_s`, then one off interval per row in simulated seconds (`on_s` empty: off for good); a relative path is resolved against the scenario file's directory";

/// One off interval of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Off {
    /// The worker.
    pub worker: usize,
    /// When it goes off.
    pub off: SimTime,
    /// When it comes back, if it does.
    pub on: Option<SimTime>,
}

/// Parses an availability file of a cluster of `n` workers: its intervals, sorted by worker and
/// time. Errors name the line.
pub fn parse(text: &str, n: usize) -> Result<Vec<Off>, String> {
    let mut lines = crate::csv::data_lines(text);
    let Some((hline, header)) = lines.next() else {
        return Err("the file is empty".into());
    };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    if cols != ["worker", "off_s", "on_s"] {
        return Err(format!(
            "line {hline}: the header is `{header}`, expected `worker,off_s,on_s`"
        ));
    }
    let mut rows: Vec<(Off, usize)> = Vec::new();
    for (no, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 3 {
            return Err(format!(
                "line {no}: {} fields, the header has 3",
                fields.len()
            ));
        }
        let worker: usize = fields[0]
            .parse()
            .map_err(|_| format!("line {no}: `{}` is not a worker index", fields[0]))?;
        if worker >= n {
            return Err(format!(
                "line {no}: worker {worker}, but the cluster has {n} workers (0 to {})",
                n - 1
            ));
        }
        let time = |field: &str, key: &str| -> Result<SimTime, String> {
            let v: f64 = field
                .parse()
                .map_err(|_| format!("line {no}: {key} `{field}` is not a number"))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "line {no}: {key} must be a zero or positive number of seconds, got {v}"
                ));
            }
            SimTime::checked_from_secs_f64(v, key).map_err(|e| format!("line {no}: {}", e.message))
        };
        let off = time(fields[1], "off_s")?;
        let on = match fields[2] {
            "" => None,
            f => Some(time(f, "on_s")?),
        };
        if on.is_some_and(|on| on <= off) {
            return Err(format!(
                "line {no}: worker {worker} comes back at {} s, not after it goes off at {} s",
                fields[2], fields[1]
            ));
        }
        rows.push((Off { worker, off, on }, no));
    }
    if rows.is_empty() {
        return Err("the file has no interval".into());
    }
    rows.sort_by_key(|(o, _)| (o.worker, o.off));
    for pair in rows.windows(2) {
        let ((a, la), (b, lb)) = (pair[0], pair[1]);
        if a.worker == b.worker && a.on.is_none_or(|on| on > b.off) {
            let end = a.on.map_or("the end of the run".to_owned(), |t| {
                format!("{} s", t.as_secs_f64())
            });
            return Err(format!(
                "line {lb}: worker {} goes off at {} s while still off from line {la} (until {end})",
                b.worker,
                b.off.as_secs_f64()
            ));
        }
    }
    Ok(rows.into_iter().map(|(o, _)| o).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: f64) -> SimTime {
        SimTime::from_secs_f64(v)
    }

    #[test]
    fn intervals_parse_sorted_by_worker_and_time() {
        let text = "# from a trace\nworker,off_s,on_s\n3,2.0,\n3, 0.5, 0.8 # short\n\n1,0,0.1\n";
        let got = parse(text, 4).unwrap();
        assert_eq!(
            got,
            [
                Off {
                    worker: 1,
                    off: s(0.0),
                    on: Some(s(0.1))
                },
                Off {
                    worker: 3,
                    off: s(0.5),
                    on: Some(s(0.8))
                },
                Off {
                    worker: 3,
                    off: s(2.0),
                    on: None
                },
            ]
        );
    }

    #[test]
    fn bad_files_are_refused_naming_the_line() {
        for (text, needle) in [
            ("", "empty"),
            ("worker,off,on\n", "line 1: the header"),
            ("worker,off_s,on_s\n", "no interval"),
            ("worker,off_s,on_s\n1,0.5\n", "line 2: 2 fields"),
            (
                "worker,off_s,on_s\nx,0.5,1\n",
                "line 2: `x` is not a worker",
            ),
            (
                "worker,off_s,on_s\n4,0.5,1\n",
                "line 2: worker 4, but the cluster has 4",
            ),
            ("worker,off_s,on_s\n1,a,1\n", "line 2: off_s `a`"),
            ("worker,off_s,on_s\n1,-1,1\n", "line 2: off_s must be"),
            (
                "worker,off_s,on_s\n1,0.5,0.5\n",
                "line 2: worker 1 comes back at 0.5 s",
            ),
            (
                "worker,off_s,on_s\n1,0.5,1.0\n2,0,\n1,0.8,2\n",
                "line 4: worker 1 goes off at 0.8 s while still off from line 2 (until 1 s)",
            ),
            (
                "worker,off_s,on_s\n1,0.5,\n1,3,4\n",
                "line 3: worker 1 goes off at 3 s while still off from line 2 (until the end of the run)",
            ),
        ] {
            let e = parse(text, 4).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
