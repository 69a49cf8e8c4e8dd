//! JUnit XML, the report format CI systems read (GitHub Actions through a reporter action,
//! GitLab's `artifacts:reports:junit`, Jenkins): one `testsuite` per scenario, one `testcase`
//! per claim, algorithm and seed.
//!
//! ```text
//! <testsuites name="dasim check" tests="3" failures="1" errors="0" skipped="0" time="1.250">
//!   <testsuite name="scenarios/claims/ps.toml" tests="3" failures="1" errors="0" skipped="0" time="1.250">
//!     <properties><property name="backend" value="flex (CPU)"/>…</properties>
//!     <testcase classname="ps.ps" name="expect[0] staleness.mean ~= n - 1 (±5%) [seed 1]">
//!       <failure message="observed 9.1, bound 7 ± 0.35" type="claim">…</failure>
//!     </testcase>
//! ```
//!
//! Written by hand: the format is small, and every text is escaped (`&`, `<`, `>`, `"`, `'`;
//! characters XML 1.0 does not allow become U+FFFD).

use std::fmt::Write as _;

/// One `testsuite`: the claims of one scenario.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Suite {
    /// Its name: the scenario file as given.
    pub name: String,
    /// Host seconds its runs took.
    pub time_s: f64,
    /// `properties`: what ran it (dasim's version, the backend, the seeds).
    pub properties: Vec<(String, String)>,
    /// Its test cases.
    pub cases: Vec<Case>,
}

/// One `testcase`: a claim for one algorithm and seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `classname`: the scenario's name and the algorithm's label, `ps.ps`.
    pub classname: String,
    /// `name`: the claim as written, with its seed.
    pub name: String,
    /// How it ended.
    pub outcome: Outcome,
}

/// How a test case ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The claim holds.
    Pass,
    /// It does not: `message` with the observed value and the bound, `detail` more.
    Failure {
        /// One line: observed value and bound.
        message: String,
        /// More: the note, the reason.
        detail: String,
    },
    /// The run could not produce a value (it failed).
    Error {
        /// One line.
        message: String,
        /// More.
        detail: String,
    },
    /// It does not apply.
    Skipped {
        /// Why.
        message: String,
    },
}

/// `s` escaped for an XML attribute or text node.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[derive(Default)]
struct Counts {
    tests: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
}

impl Counts {
    fn of(cases: &[Case]) -> Counts {
        let mut c = Counts {
            tests: cases.len(),
            ..Counts::default()
        };
        for case in cases {
            match case.outcome {
                Outcome::Pass => {}
                Outcome::Failure { .. } => c.failures += 1,
                Outcome::Error { .. } => c.errors += 1,
                Outcome::Skipped { .. } => c.skipped += 1,
            }
        }
        c
    }

    fn attrs(&self, time_s: f64) -> String {
        format!(
            r#"tests="{}" failures="{}" errors="{}" skipped="{}" time="{time_s:.3}""#,
            self.tests, self.failures, self.errors, self.skipped
        )
    }
}

/// The JUnit XML document of `suites`.
pub fn junit_xml(suites: &[Suite]) -> String {
    let all: Vec<Case> = suites.iter().flat_map(|s| s.cases.clone()).collect();
    let total_time: f64 = suites.iter().map(|s| s.time_s).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        r#"<testsuites name="dasim check" {}>"#,
        Counts::of(&all).attrs(total_time)
    );
    for s in suites {
        let _ = writeln!(
            x,
            r#"  <testsuite name="{}" {}>"#,
            escape(&s.name),
            Counts::of(&s.cases).attrs(s.time_s)
        );
        if !s.properties.is_empty() {
            x.push_str("    <properties>\n");
            for (name, value) in &s.properties {
                let _ = writeln!(
                    x,
                    r#"      <property name="{}" value="{}"/>"#,
                    escape(name),
                    escape(value)
                );
            }
            x.push_str("    </properties>\n");
        }
        for c in &s.cases {
            let open = format!(
                r#"    <testcase classname="{}" name="{}""#,
                escape(&c.classname),
                escape(&c.name)
            );
            match &c.outcome {
                Outcome::Pass => {
                    let _ = writeln!(x, "{open}/>");
                }
                Outcome::Failure { message, detail } | Outcome::Error { message, detail } => {
                    let tag = if matches!(c.outcome, Outcome::Failure { .. }) {
                        "failure"
                    } else {
                        "error"
                    };
                    let _ = writeln!(x, "{open}>");
                    let _ = writeln!(
                        x,
                        r#"      <{tag} message="{}" type="claim">{}</{tag}>"#,
                        escape(message),
                        escape(detail)
                    );
                    let _ = writeln!(x, "    </testcase>");
                }
                Outcome::Skipped { message } => {
                    let _ = writeln!(x, "{open}>");
                    let _ = writeln!(x, r#"      <skipped message="{}"/>"#, escape(message));
                    let _ = writeln!(x, "    </testcase>");
                }
            }
        }
        let _ = writeln!(x, "  </testsuite>");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            escape(r#"a < b && "c" > 'd'"#),
            "a &lt; b &amp;&amp; &quot;c&quot; &gt; &apos;d&apos;"
        );
        assert_eq!(escape("x\u{1}y\nz"), "x\u{FFFD}y\nz");
    }

    #[test]
    fn counts_are_per_suite_and_in_total() {
        let case = |outcome| Case {
            classname: "s.a".into(),
            name: "expect[0] loss < 1 [seed 1]".into(),
            outcome,
        };
        let suites = [
            Suite {
                name: "a.toml".into(),
                time_s: 1.0,
                properties: vec![("backend".into(), "flex <CPU>".into())],
                cases: vec![
                    case(Outcome::Pass),
                    case(Outcome::Failure {
                        message: "observed 2, bound 1".into(),
                        detail: String::new(),
                    }),
                ],
            },
            Suite {
                name: "b.toml".into(),
                time_s: 0.5,
                properties: Vec::new(),
                cases: vec![case(Outcome::Skipped {
                    message: "n/a".into(),
                })],
            },
        ];
        let x = junit_xml(&suites);
        assert!(x.contains(
            r#"<testsuites name="dasim check" tests="3" failures="1" errors="0" skipped="1" time="1.500">"#
        ));
        assert!(x.contains(
            r#"<testsuite name="a.toml" tests="2" failures="1" errors="0" skipped="0" time="1.000">"#
        ));
        assert!(x.contains("name=\"expect[0] loss &lt; 1 [seed 1]\""));
        assert_eq!(x.matches("<testcase ").count(), 3);
        assert!(x.contains(r#"<property name="backend" value="flex &lt;CPU&gt;"/>"#));
    }
}
