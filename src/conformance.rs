//! The conformance table: the leadership features run against several operators (one
//! profile each) on one provider, and what each scenario found for each of them — held,
//! broken (with the step and the checker's verdict), or not applicable (left out; for an
//! operator that cannot run on the provider at all, every scenario, with the reason its
//! run gave) — with the failover figures. Written as Markdown, JSON and an HTML page.
//!
//! Each profile runs in an `opconform test` of its own (this executable again: one suite per
//! process), with `--operator`, `--provider`, `--tags` and `--out`; the table is read from
//! the `suite.json` each run writes. No cargo, no checkout of the repository: the features
//! are those the executable carries ([`crate::features`]). A broken guarantee, or an operator that
//! cannot run on the provider (`notApplicable` in its `suite.json`), is a finding, not a
//! failure of the command: it fails only when a run could not produce its report.
//!
//! On local, `--kubernetes 1.34,1.37` runs the profiles once per Kubernetes version, one
//! version after another (each run's control plane of that version, built into the cache
//! when missing): a column per profile and version, `name · 1.34`, and the wall time of
//! each version. A profile that elects through coordinated leader election
//! (`election.coordinated`) is not applicable on the providers that cannot set feature
//! gates (every one but local).
//!
//! On kind the profiles share one kind cluster: the command creates it before the first
//! run (unless `OPCONFORM_KIND_CLUSTER` names one), hands it to each run as
//! `OPCONFORM_KIND_CLUSTER` (each loads its own operator's image into it), and deletes it
//! at the end, also after a failure and on ctrl-c or SIGTERM: each profile saves a
//! cluster's creation (25 to 80 s measured on 2 cores) and deletion (5 to 30 s).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use crate::check::Breach;
use crate::cluster::local::KubernetesVersion;
use crate::cluster::{ProviderError, ProviderKind};

/// Errors of a conformance run.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// A profile could not be read.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// The test run could not be started.
    #[error("cannot run opconform test for {subject}")]
    Spawn {
        /// The subject.
        subject: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The run ended without its report.
    #[error("the run of {subject} wrote no report {path} (its output: {log})")]
    NoReport {
        /// The subject.
        subject: String,
        /// The report expected.
        path: PathBuf,
        /// The run's output.
        log: PathBuf,
    },
    /// A report could not be read.
    #[error("cannot read report {path}")]
    Report {
        /// The report.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The provider is not one the table can run on.
    #[error(transparent)]
    Provider(ProviderError),
    /// One prebuilt image cannot stand for several operators.
    #[error(
        "OPCONFORM_IMAGE={image} would replace the image of each of the {profiles} profiles on kind: \
         unset it, so that each runs its own (from the local Docker engine, or built from its \
         binary on OPCONFORM_KIND_BASE_IMAGE), or give one profile"
    )]
    OneImage {
        /// The prebuilt image.
        image: String,
        /// How many profiles.
        profiles: usize,
    },
    /// The kind cluster the profiles share could not be set up.
    #[error("cannot set up the kind cluster the profiles share")]
    SharedCluster(#[source] ProviderError),
}

/// The `suite.json` of one run, as far as the table needs it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuiteReport {
    /// The provider it ran on.
    pub provider: String,
    /// Wall time of the run.
    pub wall_seconds: f64,
    /// The tags left out, and why.
    #[serde(default)]
    pub left_out: Vec<LeftOut>,
    /// Why the operator cannot run on the provider at all, when it cannot (its run then
    /// has no results).
    #[serde(default)]
    pub not_applicable: Option<String>,
    /// Every scenario that ran.
    pub results: Vec<ScenarioResult>,
}

/// A tag a run left out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeftOut {
    /// The tag.
    pub tag: String,
    /// Why.
    pub why: String,
}

/// One scenario of a run.
#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Whether every step passed.
    pub passed: bool,
    /// The failed step and its error.
    #[serde(default)]
    pub failure: Option<String>,
    /// Failover figures (`crash: 4158 ms`).
    #[serde(default)]
    pub failovers: Vec<String>,
    /// Its timeline, relative to the run's reports.
    #[serde(default)]
    pub link: String,
    /// The kind of guarantee its failure breached.
    #[serde(default)]
    pub breach: Option<Breach>,
    /// Why opconform holds operators to the breached guarantee, when client-go does not
    /// promise it.
    #[serde(default)]
    pub ours: Option<String>,
}

/// What one scenario found for one subject, over its runs (`--runs N`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum Cell {
    /// Every step of every run passed.
    Held {
        /// How many runs.
        runs: usize,
        /// The failover figures over the runs.
        figures: Vec<Figure>,
        /// The first run's timeline.
        link: String,
    },
    /// A step failed in at least one run.
    Broken {
        /// How many runs held.
        held: usize,
        /// How many runs.
        runs: usize,
        /// The gravest kind of guarantee the failed runs breached; none when the failed
        /// step checks no election guarantee.
        #[serde(skip_serializing_if = "Option::is_none")]
        breach: Option<Breach>,
        /// When that guarantee is opconform's own, why it matters.
        #[serde(skip_serializing_if = "Option::is_none")]
        ours: Option<String>,
        /// The first failed run's step and the checker's verdict, on one line.
        why: String,
        /// The failover figures over the runs.
        figures: Vec<Figure>,
        /// The first failed run's timeline.
        link: String,
    },
    /// Not run for this subject: a tag it cannot serve was left out (no reason), or the
    /// operator cannot run on the provider at all (the reason its run gave).
    NotApplicable {
        /// Why the operator cannot run on the provider.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// One failover figure (`crash: 4158 ms` in a run's report) over the runs that measured it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Figure {
    /// What it measures: the fault's verb (`crash`, `partition`…).
    pub label: String,
    /// How many runs measured it.
    pub runs: usize,
    /// The least, in milliseconds.
    pub min_ms: u64,
    /// The median (the lower middle of an even count), in milliseconds.
    pub median_ms: u64,
    /// The greatest, in milliseconds.
    pub max_ms: u64,
}

impl Figure {
    /// The figures of `reports` (each a run's `label: N ms` strings), label by label in
    /// the order they first appear; a string of another shape is left out.
    fn over<'a>(reports: impl IntoIterator<Item = &'a [String]>) -> Vec<Self> {
        let mut measured: Vec<(String, Vec<u64>)> = Vec::new();
        for failovers in reports {
            for f in failovers {
                let Some((label, ms)) = f
                    .split_once(": ")
                    .and_then(|(l, v)| Some((l, v.strip_suffix(" ms")?.parse::<u64>().ok()?)))
                else {
                    continue;
                };
                match measured.iter_mut().find(|(l, _)| l == label) {
                    Some((_, values)) => values.push(ms),
                    None => measured.push((label.to_string(), vec![ms])),
                }
            }
        }
        measured
            .into_iter()
            .map(|(label, mut values)| {
                values.sort_unstable();
                Self {
                    label,
                    runs: values.len(),
                    min_ms: values[0],
                    median_ms: values[(values.len() - 1) / 2],
                    max_ms: values[values.len() - 1],
                }
            })
            .collect()
    }

    /// `crash: 4158 ms` for one run, `crash: 4158 / 4200 / 4630 ms` (min / median / max)
    /// for several.
    fn shown(&self) -> String {
        if self.runs == 1 {
            format!("{}: {} ms", self.label, self.min_ms)
        } else {
            format!(
                "{}: {} / {} / {} ms",
                self.label, self.min_ms, self.median_ms, self.max_ms
            )
        }
    }
}

/// One subject's column.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// The profile's name.
    pub name: String,
    /// The Kubernetes version it ran on (`1.37`), when the table runs on several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
    /// The profile.
    pub profile: PathBuf,
    /// Its reports, relative to the table's directory.
    pub reports: String,
    /// Scenarios run and held in every run.
    pub held: usize,
    /// Scenarios run.
    pub ran: usize,
    /// How many times each scenario ran.
    pub runs: usize,
    /// The run's wall time.
    pub wall_seconds: f64,
    /// What was left out, and why.
    pub left_out: Vec<LeftOut>,
    /// Why the operator cannot run on the provider at all, when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
}

impl Subject {
    /// Its column's heading: the name, with ` · 1.37` when the table runs on several
    /// Kubernetes versions.
    pub fn heading(&self) -> String {
        match &self.kubernetes {
            Some(version) => format!("{} · {version}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The runs of the profiles on one Kubernetes version.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionRuns {
    /// The minor, `1.37`, as the columns name it.
    pub kubernetes: String,
    /// The full version, `v1.37.2`.
    pub full: String,
    /// The wall time of its profiles' runs, together.
    pub wall_seconds: f64,
}

/// The table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    /// The provider.
    pub provider: String,
    /// The Kubernetes versions it ran on, when named (`--kubernetes`): a column per
    /// profile and version.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kubernetes: Vec<VersionRuns>,
    /// The columns.
    pub subjects: Vec<Subject>,
    /// One row per scenario: its name and a cell per subject, in the columns' order.
    pub rows: Vec<Row>,
}

/// One scenario's row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: String,
    /// A cell per subject.
    pub cells: Vec<Cell>,
}

impl Table {
    /// The table of `runs` (subject, profile, its reports directory name, its report), rows
    /// in the order the scenarios first appear; the runs of a scenario repeated with
    /// `--runs N` (named `… (run i of N)`) make one cell.
    pub fn of(provider: &str, runs: &[Run]) -> Self {
        let columns: Vec<(Option<&str>, &Run)> = runs.iter().map(|run| (None, run)).collect();
        Self::of_columns(provider, &columns, Vec::new())
    }

    /// The table of the runs of the same profiles on several Kubernetes versions, each
    /// version's runs with its wall time: a column per profile and version, the versions
    /// of a profile side by side in the order given.
    pub fn across(provider: &str, versions: &[(VersionRuns, Vec<Run>)]) -> Self {
        let profiles = versions
            .iter()
            .map(|(_, runs)| runs.len())
            .max()
            .unwrap_or(0);
        let columns: Vec<(Option<&str>, &Run)> = (0..profiles)
            .flat_map(|i| {
                versions.iter().filter_map(move |(version, runs)| {
                    Some((Some(version.kubernetes.as_str()), runs.get(i)?))
                })
            })
            .collect();
        let kubernetes = versions
            .iter()
            .map(|(version, _)| version.clone())
            .collect();
        Self::of_columns(provider, &columns, kubernetes)
    }

    fn of_columns(
        provider: &str,
        runs: &[(Option<&str>, &Run)],
        kubernetes: Vec<VersionRuns>,
    ) -> Self {
        let mut scenarios: Vec<String> = Vec::new();
        for (_, (_, _, _, report)) in runs {
            for r in &report.results {
                let (name, _) = crate::features::run_of(&r.name);
                if !scenarios.iter().any(|s| s == name) {
                    scenarios.push(name.to_string());
                }
            }
        }
        let rows = scenarios
            .into_iter()
            .map(|scenario| {
                let cells = runs
                    .iter()
                    .map(|(_, (_, _, dir, report))| cell(&scenario, dir, report))
                    .collect();
                Row { scenario, cells }
            })
            .collect();
        let subjects = runs
            .iter()
            .map(|(version, (name, profile, dir, report))| {
                let cells: Vec<Cell> = report
                    .results
                    .iter()
                    .map(|r| crate::features::run_of(&r.name).0)
                    .fold(Vec::<&str>::new(), |mut names, n| {
                        if !names.contains(&n) {
                            names.push(n);
                        }
                        names
                    })
                    .into_iter()
                    .map(|n| cell(n, dir, report))
                    .collect();
                Subject {
                    name: name.clone(),
                    kubernetes: version.map(str::to_string),
                    profile: profile.clone(),
                    reports: dir.clone(),
                    held: cells
                        .iter()
                        .filter(|c| matches!(c, Cell::Held { .. }))
                        .count(),
                    ran: cells.len(),
                    runs: cells
                        .iter()
                        .map(|c| match c {
                            Cell::Held { runs, .. } | Cell::Broken { runs, .. } => *runs,
                            Cell::NotApplicable { .. } => 0,
                        })
                        .max()
                        .unwrap_or(1),
                    wall_seconds: report.wall_seconds,
                    left_out: report.left_out.clone(),
                    not_applicable: report.not_applicable.clone(),
                }
            })
            .collect();
        Self {
            provider: provider.to_string(),
            kubernetes,
            subjects,
            rows,
        }
    }

    /// The sentences of the guarantees of opconform's own that a cell of the table
    /// breached, each once, numbered in the order they appear.
    fn ours(&self) -> Vec<&str> {
        let mut found: Vec<&str> = Vec::new();
        for row in &self.rows {
            for cell in &row.cells {
                if let Cell::Broken {
                    ours: Some(why), ..
                } = cell
                    && !found.contains(&why.as_str())
                {
                    found.push(why);
                }
            }
        }
        found
    }

    /// A cell's verdict in words: `held`, `held 3 of 3`, `broken (timing, ours¹)`,
    /// `held 2 of 3, broken (safety)`.
    fn verdict(&self, cell: &Cell) -> Option<String> {
        match cell {
            Cell::Held { runs, .. } if *runs > 1 => Some(format!("held {runs} of {runs}")),
            Cell::Held { .. } => Some("held".into()),
            Cell::Broken {
                held,
                runs,
                breach,
                ours,
                ..
            } => {
                let ours = ours.as_ref().and_then(|why| {
                    let n = self.ours().iter().position(|o| o == why)? + 1;
                    Some(format!(", ours [{n}]"))
                });
                let kind = breach.map(|b| format!(" ({}{})", b.name(), ours.unwrap_or_default()));
                let kind = kind.unwrap_or_default();
                Some(if *runs > 1 {
                    format!("held {held} of {runs}, broken{kind}")
                } else {
                    format!("broken{kind}")
                })
            }
            Cell::NotApplicable { .. } => None,
        }
    }

    /// The table as Markdown: a row per scenario, a column per subject, then what each
    /// subject left out.
    pub fn markdown(&self) -> String {
        let mut out = format!("## Leadership conformance on {}\n\n", self.title());
        out.push_str("| scenario |");
        for s in &self.subjects {
            out.push_str(&format!(" {} |", s.heading()));
        }
        out.push_str("\n|---|");
        for _ in &self.subjects {
            out.push_str("---|");
        }
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format!("| {} |", cell_text(&row.scenario)));
            for cell in &row.cells {
                let verdict = self.verdict(cell).unwrap_or_default();
                let text = match cell {
                    Cell::Held { figures, .. } => with_figures(&verdict, figures),
                    Cell::Broken { why, figures, .. } => {
                        with_figures(&format!("**{verdict}**: {}", cell_text(why)), figures)
                    }
                    Cell::NotApplicable { reason: None } => "n/a".to_string(),
                    Cell::NotApplicable {
                        reason: Some(reason),
                    } => format!("n/a: {}", cell_text(reason)),
                };
                out.push_str(&format!(" {text} |"));
            }
            out.push('\n');
        }
        out.push('\n');
        for (n, why) in self.ours().iter().enumerate() {
            out.push_str(&format!(
                "[{}] A guarantee of opconform's own, which client-go's documented semantics \
                 do not promise: {why}.\n\n",
                n + 1
            ));
        }
        for s in &self.subjects {
            let verdict = match &s.not_applicable {
                Some(reason) => format!("not applicable on {}: {reason}", self.provider),
                None if s.runs > 1 => {
                    format!("{} of {} held in each of {} runs", s.held, s.ran, s.runs)
                }
                None => format!("{} of {} held", s.held, s.ran),
            };
            out.push_str(&format!(
                "- **{}** (`{}`): {verdict}, {:.0} s",
                s.heading(),
                s.profile.display(),
                s.wall_seconds
            ));
            for l in &s.left_out {
                out.push_str(&format!("; left out @{}: {}", l.tag, l.why));
            }
            out.push('\n');
        }
        for v in &self.kubernetes {
            out.push_str(&format!(
                "- Kubernetes {} ({}): every profile in {:.0} s\n",
                v.kubernetes, v.full, v.wall_seconds
            ));
        }
        out
    }

    /// `local`, or `local, Kubernetes 1.34 and 1.37` when it ran on named versions.
    fn title(&self) -> String {
        let names: Vec<&str> = self
            .kubernetes
            .iter()
            .map(|v| v.kubernetes.as_str())
            .collect();
        match names.split_last() {
            None => self.provider.clone(),
            Some((only, [])) => format!("{}, Kubernetes {only}", self.provider),
            Some((last, rest)) => format!(
                "{}, Kubernetes {} and {last}",
                self.provider,
                rest.join(", ")
            ),
        }
    }

    /// The table as an HTML page whose cells link to the scenarios' timelines.
    pub fn html(&self) -> String {
        use crate::report::escape;
        let mut head = String::from("<tr><th>scenario</th>");
        for s in &self.subjects {
            let verdict = match &s.not_applicable {
                Some(_) => "n/a".to_string(),
                None => format!("{} of {} held", s.held, s.ran),
            };
            head.push_str(&format!(
                "<th>{}<br><small>{verdict}</small></th>",
                escape(&s.heading()),
            ));
        }
        head.push_str("</tr>");
        let mut body = String::new();
        for row in &self.rows {
            body.push_str(&format!("<tr><td>{}</td>", escape(&row.scenario)));
            for cell in &row.cells {
                let verdict = self.verdict(cell).unwrap_or_default();
                let (class, text, figures, link) = match cell {
                    Cell::Held { figures, link, .. } => ("held", verdict, figures, link),
                    Cell::Broken {
                        why, figures, link, ..
                    } => ("broken", format!("{verdict}: {why}"), figures, link),
                    Cell::NotApplicable { reason: None } => {
                        body.push_str("<td class=\"na\">n/a</td>");
                        continue;
                    }
                    Cell::NotApplicable {
                        reason: Some(reason),
                    } => {
                        body.push_str(&format!(
                            "<td class=\"na\" title=\"{}\">n/a</td>",
                            escape(reason)
                        ));
                        continue;
                    }
                };
                let text = with_figures(&text, figures);
                let text = if link.is_empty() {
                    escape(&text)
                } else {
                    format!("<a href=\"{}\">{}</a>", escape(link), escape(&text))
                };
                body.push_str(&format!("<td class=\"{class}\">{text}</td>"));
            }
            body.push_str("</tr>\n");
        }
        let mut notes = String::new();
        for (n, why) in self.ours().iter().enumerate() {
            notes.push_str(&format!(
                "<li>[{}] A guarantee of opconform's own, which client-go's documented \
                 semantics do not promise: {}.</li>",
                n + 1,
                escape(why)
            ));
        }
        for s in &self.subjects {
            if let Some(reason) = &s.not_applicable {
                notes.push_str(&format!(
                    "<li>{}: not applicable on {}: {}</li>",
                    escape(&s.heading()),
                    escape(&self.provider),
                    escape(reason)
                ));
            }
            for l in &s.left_out {
                notes.push_str(&format!(
                    "<li>{}: left out @{}: {}</li>",
                    escape(&s.heading()),
                    escape(&l.tag),
                    escape(&l.why)
                ));
            }
        }
        for v in &self.kubernetes {
            notes.push_str(&format!(
                "<li>Kubernetes {} ({}): every profile in {:.0} s</li>",
                escape(&v.kubernetes),
                escape(&v.full),
                v.wall_seconds
            ));
        }
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Leadership conformance on {provider}</title>\n\
             <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
             td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top;max-width:28em}}\
             .held{{background:#e6f4ea}}.broken{{background:#fce8e6}}.na{{color:#888}}</style></head>\n\
             <body><h1>Leadership conformance on {provider}</h1>\n<table>{head}\n{body}</table>\n<ul>{notes}</ul></body></html>\n",
            provider = escape(&self.title()),
        )
    }
}

/// The cell of `scenario` in one subject's `report` (its runs' reports under `dir`).
fn cell(scenario: &str, dir: &str, report: &SuiteReport) -> Cell {
    if let Some(reason) = &report.not_applicable {
        return Cell::NotApplicable {
            reason: Some(reason.clone()),
        };
    }
    let runs: Vec<&ScenarioResult> = report
        .results
        .iter()
        .filter(|r| crate::features::run_of(&r.name).0 == scenario)
        .collect();
    let Some(first) = runs.first() else {
        return Cell::NotApplicable { reason: None };
    };
    let link = |r: &ScenarioResult| {
        if r.link.is_empty() {
            String::new()
        } else {
            format!("{dir}/{}", r.link)
        }
    };
    let figures = Figure::over(runs.iter().map(|r| r.failovers.as_slice()));
    let failed: Vec<&&ScenarioResult> = runs.iter().filter(|r| !r.passed).collect();
    let Some(first_failed) = failed.first() else {
        return Cell::Held {
            runs: runs.len(),
            figures,
            link: link(first),
        };
    };
    let breach = failed.iter().filter_map(|r| r.breach).max();
    Cell::Broken {
        held: runs.len() - failed.len(),
        runs: runs.len(),
        breach,
        ours: failed
            .iter()
            .find(|r| r.breach == breach)
            .and_then(|r| r.ours.clone()),
        why: first_failed
            .failure
            .as_deref()
            .and_then(|f| f.lines().next())
            .unwrap_or("a step failed")
            .to_string(),
        figures,
        link: link(first_failed),
    }
}

fn with_figures(text: &str, figures: &[Figure]) -> String {
    if figures.is_empty() {
        text.to_string()
    } else {
        let shown: Vec<String> = figures.iter().map(Figure::shown).collect();
        format!("{text} (failover {})", shown.join(", "))
    }
}

/// Text safe inside a Markdown table cell.
fn cell_text(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The profiles shipped with the repository, sorted: `profile.yaml` and `*.profile.yaml`
/// in each folder of `profiles/` and `subjects/` (a subject with several profiles, such as
/// one per election library, names each `<name>.profile.yaml`).
pub fn shipped_profiles(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for folder in ["profiles", "subjects"] {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else {
            continue;
        };
        for dir in entries.flatten() {
            let Ok(files) = std::fs::read_dir(dir.path()) else {
                continue;
            };
            found.extend(files.flatten().map(|f| f.path()).filter(|path| {
                path.is_file()
                    && path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|name| {
                            name == "profile.yaml" || name.ends_with(".profile.yaml")
                        })
            }));
        }
    }
    found.sort();
    found
}

/// How a conformance run is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// The provider (`sim`, `local` or `kind`).
    pub provider: String,
    /// The profiles, one column each.
    pub profiles: Vec<PathBuf>,
    /// The cucumber tag expression of the scenarios to run.
    pub tags: String,
    /// Where the table and every run's reports go.
    pub out: PathBuf,
    /// How many times each scenario runs per profile (`--runs`).
    pub runs: usize,
    /// On local, the Kubernetes versions to run the profiles on, one after another (a
    /// column per profile and version); none: the pinned one, columns without a version.
    pub kubernetes: Vec<KubernetesVersion>,
    /// On local, the control plane's feature gates (`--feature-gates`, checked), passed on
    /// to each run.
    pub feature_gates: Option<String>,
}

/// One profile's run: its subject's name, the profile as shown, its reports directory
/// name, its report.
type Run = (String, PathBuf, String, SuiteReport);

/// Runs the scenarios for every profile, one after another (on kind, on one kind cluster
/// for all of them), and writes the table (`conformance.md`, `conformance.json`,
/// `index.html`) into `options.out`; returns it.
///
/// # Errors
/// A profile that cannot be read, an unknown provider, a shared kind cluster that cannot
/// be set up, a run that cannot start or writes no report, or a table that cannot be
/// written.
pub async fn run(options: &Options) -> Result<Table, ConformanceError> {
    let provider =
        ProviderKind::parse(Some(&options.provider)).map_err(ConformanceError::Provider)?;
    let subjects = options
        .profiles
        .iter()
        .map(|profile| crate::profile::Profile::read(profile))
        .collect::<Result<Vec<_>, _>>()?;
    let table = if provider == ProviderKind::Kind {
        if let Some(image) = std::env::var("OPCONFORM_IMAGE")
            .ok()
            .filter(|i| !i.is_empty() && options.profiles.len() > 1)
        {
            return Err(ConformanceError::OneImage {
                image,
                profiles: options.profiles.len(),
            });
        }
        // From here on ctrl-c and SIGTERM delete the cluster this command creates.
        crate::cluster::start_run(ProviderKind::Kind);
        let runs = match crate::cluster::kind::KindRun::global().cluster().await {
            Ok(cluster) => run_profiles(options, &subjects, Some(cluster.name()), None).await,
            Err(e) => Err(ConformanceError::SharedCluster(e)),
        };
        // Each run exported the logs of its own failures: the cluster just goes.
        crate::cluster::finish_run(ProviderKind::Kind, false).await;
        Table::of(&options.provider, &runs?)
    } else if options.kubernetes.is_empty() {
        Table::of(
            &options.provider,
            &run_profiles(options, &subjects, None, None).await?,
        )
    } else {
        let mut versions = Vec::new();
        for (i, version) in options.kubernetes.iter().enumerate() {
            eprintln!(
                "conformance: Kubernetes {version} ({} of {})…",
                i + 1,
                options.kubernetes.len()
            );
            let begin = std::time::Instant::now();
            let runs = run_profiles(options, &subjects, None, Some(*version)).await?;
            let wall_seconds = begin.elapsed().as_secs_f64();
            eprintln!("conformance: Kubernetes {version}: every profile in {wall_seconds:.0}s");
            let runs_of = VersionRuns {
                kubernetes: version.minor_name().to_string(),
                full: version.full().to_string(),
                wall_seconds,
            };
            versions.push((runs_of, runs));
        }
        Table::across(&options.provider, &versions)
    };
    // Made by the runs too, but not when every profile was not applicable before running.
    std::fs::create_dir_all(&options.out).map_err(|source| ConformanceError::Write {
        path: options.out.clone(),
        source,
    })?;
    let write = |name: &str, text: String| {
        let path = options.out.join(name);
        std::fs::write(&path, text).map_err(|source| ConformanceError::Write { path, source })
    };
    write("conformance.md", table.markdown())?;
    write(
        "conformance.json",
        serde_json::to_string_pretty(&table).unwrap_or_default(),
    )?;
    write("index.html", table.html())?;
    Ok(table)
}

/// Why `subject` cannot run on `provider` before any scenario starts: it elects through
/// coordinated leader election, whose feature gate only the local provider sets.
fn not_applicable_before(subject: &crate::subject::Subject, provider: &str) -> Option<String> {
    (subject.election.coordinated && provider != ProviderKind::Local.name()).then(|| {
        format!(
            "the profile of {} says it elects through coordinated leader election \
             (election.coordinated), which needs kube-apiserver's CoordinatedLeaderElection \
             feature gate, and the {provider} provider cannot set feature gates",
            subject.name
        )
    })
}

/// Runs each profile's scenarios in an `opconform test` of its own, on `kind_cluster` when
/// given (`OPCONFORM_KIND_CLUSTER`), or on local's Kubernetes `version` when given, and
/// reads its report.
async fn run_profiles(
    options: &Options,
    subjects: &[crate::subject::Subject],
    kind_cluster: Option<&str>,
    version: Option<KubernetesVersion>,
) -> Result<Vec<Run>, ConformanceError> {
    let root = crate::subject::repository_root();
    let opconform = std::env::current_exe().map_err(|source| ConformanceError::Spawn {
        subject: "the first profile".into(),
        source,
    })?;
    let mut runs = Vec::new();
    for (i, (profile, subject)) in options.profiles.iter().zip(subjects).enumerate() {
        let shown = profile.strip_prefix(&root).unwrap_or(profile).to_path_buf();
        if let Some(reason) = not_applicable_before(subject, &options.provider) {
            eprintln!(
                "conformance: {}: not applicable on {} ({reason})",
                subject.name, options.provider
            );
            let report = SuiteReport {
                provider: options.provider.clone(),
                wall_seconds: 0.0,
                left_out: Vec::new(),
                not_applicable: Some(reason),
                results: Vec::new(),
            };
            runs.push((subject.name.clone(), shown, subject.name.clone(), report));
            continue;
        }
        // On several versions, each version's reports in a folder of its own: `1.37/name`.
        let dir = match version {
            Some(version) => format!("{}/{}", version.minor_name(), subject.name),
            None => subject.name.clone(),
        };
        let reports = options.out.join(&dir);
        std::fs::create_dir_all(&reports).map_err(|source| ConformanceError::Write {
            path: reports.clone(),
            source,
        })?;
        let log = reports.join("run.log");
        let report = reports.join("suite.json");
        let _ = std::fs::remove_file(&report);
        eprintln!(
            "conformance: {} on {}{}{} ({} of {}; output in {})…",
            subject.name,
            options.provider,
            kind_cluster.map_or_else(String::new, |c| format!(" (kind cluster {c})")),
            version.map_or_else(String::new, |v| format!(" (Kubernetes {v})")),
            i + 1,
            options.profiles.len(),
            log.display()
        );
        let output = std::fs::File::create(&log).map_err(|source| ConformanceError::Write {
            path: log.clone(),
            source,
        })?;
        let errors = output
            .try_clone()
            .map_err(|source| ConformanceError::Write {
                path: log.clone(),
                source,
            })?;
        let begin = std::time::Instant::now();
        let mut command = tokio::process::Command::new(&opconform);
        command
            .arg("test")
            .arg("--operator")
            .arg(profile)
            .args(["--provider", &options.provider, "--tags", &options.tags])
            .args(["--runs", &options.runs.max(1).to_string()])
            .arg("--out")
            .arg(&reports)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .kill_on_drop(true);
        if let Some(cluster) = kind_cluster {
            command.env("OPCONFORM_KIND_CLUSTER", cluster);
        }
        if let Some(version) = version {
            command.args(["--kubernetes", version.full()]);
        }
        if let Some(gates) = &options.feature_gates {
            command.args(["--feature-gates", gates]);
        }
        let status = command
            .status()
            .await
            .map_err(|source| ConformanceError::Spawn {
                subject: subject.name.clone(),
                source,
            })?;
        let text = std::fs::read_to_string(&report).map_err(|_| ConformanceError::NoReport {
            subject: subject.name.clone(),
            path: report.clone(),
            log: log.clone(),
        })?;
        let parsed: SuiteReport =
            serde_json::from_str(&text).map_err(|source| ConformanceError::Report {
                path: report.clone(),
                source,
            })?;
        let seconds = begin.elapsed().as_secs_f64();
        match &parsed.not_applicable {
            Some(reason) => eprintln!(
                "conformance: {}: not applicable on {} ({reason}), {seconds:.0}s",
                subject.name, options.provider
            ),
            None => eprintln!(
                "conformance: {}: {} of {} scenario{} held in {seconds:.0}s{}",
                subject.name,
                parsed.results.iter().filter(|r| r.passed).count(),
                parsed.results.len(),
                if options.runs > 1 { " runs" } else { "s" },
                if status.success() {
                    ""
                } else {
                    " (the others found a broken guarantee)"
                }
            ),
        }
        runs.push((subject.name.clone(), shown, dir, parsed));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(results: &[(&str, Option<&str>)]) -> SuiteReport {
        SuiteReport {
            provider: "sim".into(),
            wall_seconds: 10.0,
            left_out: vec![LeftOut {
                tag: "memcached".into(),
                why: "no Memcached CRD".into(),
            }],
            not_applicable: None,
            results: results
                .iter()
                .map(|(name, failure)| ScenarioResult {
                    name: name.to_string(),
                    passed: failure.is_none(),
                    failure: failure.map(str::to_string),
                    failovers: vec!["reject: 4158 ms".into()],
                    link: format!("{}/timeline.html", name.to_lowercase()),
                    breach: None,
                    ours: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_scenario_is_held_broken_with_its_verdict_or_not_applicable_per_subject() {
        let runs = vec![
            (
                "ours".to_string(),
                PathBuf::from("profiles/ours/profile.yaml"),
                "ours".to_string(),
                report(&[("One leader", None), ("Skew", None)]),
            ),
            (
                "theirs".to_string(),
                PathBuf::from("subjects/theirs/profile.yaml"),
                "theirs".to_string(),
                report(&[(
                    "Skew",
                    Some(
                        "And there was never more than one leader: single leader: a and b | both\n  +3.0s gauge",
                    ),
                )]),
            ),
        ];
        let table = Table::of("sim", &runs);
        assert_eq!(table.rows.len(), 2);
        assert_eq!(table.rows[0].scenario, "One leader");
        assert_eq!(table.rows[0].cells[1], Cell::NotApplicable { reason: None });
        assert!(matches!(
            &table.rows[1].cells[1],
            Cell::Broken { why, link, .. }
                if why.ends_with("a and b | both") && link == "theirs/skew/timeline.html"
        ));
        let md = table.markdown();
        assert!(md.contains("| Skew | held (failover reject: 4158 ms) | **broken**: And there was never more than one leader: single leader: a and b \\| both (failover reject: 4158 ms) |"), "{md}");
        assert!(md.contains("left out @memcached: no Memcached CRD"));
        let html = table.html();
        assert!(html.contains("<td class=\"na\">n/a</td>"));
        assert!(html.contains("href=\"theirs/skew/timeline.html\""));
        assert_eq!(table.subjects[1].held, 0);
    }

    #[test]
    fn an_operator_that_cannot_run_on_the_provider_is_not_applicable_everywhere_with_the_reason() {
        let reason = "its manager reads the service-account files | which pods on local lack";
        let suite: SuiteReport = serde_json::from_value(serde_json::json!({
            "provider": "local",
            "subject": "kubebuilder",
            "wallSeconds": 2.5,
            "leftOut": [],
            "notApplicable": reason,
            "scenarios": 0,
            "passed": 0,
            "results": [],
        }))
        .unwrap();
        let runs = vec![
            (
                "ours".to_string(),
                PathBuf::from("profiles/ours/profile.yaml"),
                "ours".to_string(),
                report(&[("One leader", None), ("Skew", Some("a step failed"))]),
            ),
            (
                "kubebuilder".to_string(),
                PathBuf::from("subjects/kubebuilder/profile.yaml"),
                "kubebuilder".to_string(),
                suite,
            ),
        ];
        let table = Table::of("local", &runs);
        let na = Cell::NotApplicable {
            reason: Some(reason.into()),
        };
        assert_eq!(table.rows.len(), 2);
        assert!(table.rows.iter().all(|row| row.cells[1] == na));
        assert_eq!(table.subjects[1].not_applicable.as_deref(), Some(reason));
        assert_eq!((table.subjects[1].held, table.subjects[1].ran), (0, 0));
        // A scenario a subject merely did not run has no reason.
        let left = Table::of("local", &runs[..1]);
        assert!(left.subjects[0].not_applicable.is_none());

        let md = table.markdown();
        let escaped = "its manager reads the service-account files \\| which pods on local lack";
        assert!(
            md.contains(&format!(
                "| One leader | held (failover reject: 4158 ms) | n/a: {escaped} |"
            )),
            "{md}"
        );
        assert!(
            md.contains(&format!(
                "- **kubebuilder** (`subjects/kubebuilder/profile.yaml`): not applicable on local: {reason}, 2 s"
            )),
            "{md}"
        );
        let html = table.html();
        let title = "its manager reads the service-account files | which pods on local lack";
        assert!(
            html.contains(&format!("<td class=\"na\" title=\"{title}\">n/a</td>")),
            "{html}"
        );
        assert!(html.contains("<th>kubebuilder<br><small>n/a</small></th>"));
        assert!(html.contains(&format!(
            "<li>kubebuilder: not applicable on local: {title}</li>"
        )));
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(
            json["rows"][0]["cells"][1],
            serde_json::json!({"verdict": "notApplicable", "reason": reason})
        );
        assert_eq!(json["subjects"][1]["notApplicable"], reason);
        assert!(json["subjects"][0].get("notApplicable").is_none());
        assert_eq!(
            serde_json::to_value(Cell::NotApplicable { reason: None }).unwrap(),
            serde_json::json!({"verdict": "notApplicable"})
        );
    }

    /// A result of run `i` of 3 of `name`.
    fn run(
        name: &str,
        i: usize,
        failure: Option<(&str, Breach, Option<&str>)>,
        ms: u64,
    ) -> ScenarioResult {
        ScenarioResult {
            name: crate::features::run_name(name, i, 3),
            passed: failure.is_none(),
            failure: failure.map(|(f, ..)| f.to_string()),
            failovers: vec![format!("crash: {ms} ms")],
            link: format!("run-{i}/timeline.html"),
            breach: failure.map(|(_, b, _)| b),
            ours: failure.and_then(|(.., o)| o.map(str::to_string)),
        }
    }

    #[test]
    fn the_runs_of_a_scenario_make_one_cell_held_k_of_n_with_the_spread_and_the_gravest_breach() {
        let mut suite = report(&[]);
        suite.results = vec![
            run("Crash", 1, None, 4300),
            run("Crash", 2, None, 4100),
            run("Crash", 3, None, 4600),
            run(
                "Partition",
                1,
                Some((
                    "And the old leader stopped leading at most 3s after the partition: 3.4s",
                    Breach::Timing,
                    Some("from the fault"),
                )),
                5000,
            ),
            run("Partition", 2, None, 4000),
            run(
                "Partition",
                3,
                Some((
                    "And there was never more than one leader: a and b",
                    Breach::Safety,
                    None,
                )),
                6000,
            ),
        ];
        let runs = vec![(
            "ours".to_string(),
            PathBuf::from("profiles/ours/profile.yaml"),
            "ours".to_string(),
            suite,
        )];
        let table = Table::of("sim", &runs);
        assert_eq!(table.rows.len(), 2);
        let figure = |min_ms, median_ms, max_ms| Figure {
            label: "crash".into(),
            runs: 3,
            min_ms,
            median_ms,
            max_ms,
        };
        assert_eq!(
            table.rows[0].cells[0],
            Cell::Held {
                runs: 3,
                figures: vec![figure(4100, 4300, 4600)],
                link: "ours/run-1/timeline.html".into(),
            }
        );
        assert_eq!(
            table.rows[1].cells[0],
            Cell::Broken {
                held: 1,
                runs: 3,
                breach: Some(Breach::Safety),
                ours: None,
                why: "And the old leader stopped leading at most 3s after the partition: 3.4s"
                    .into(),
                figures: vec![figure(4000, 5000, 6000)],
                link: "ours/run-1/timeline.html".into(),
            }
        );
        assert_eq!(
            (
                table.subjects[0].held,
                table.subjects[0].ran,
                table.subjects[0].runs
            ),
            (1, 2, 3)
        );
        let md = table.markdown();
        assert!(
            md.contains("| Crash | held 3 of 3 (failover crash: 4100 / 4300 / 4600 ms) |"),
            "{md}"
        );
        assert!(
            md.contains("| Partition | **held 1 of 3, broken (safety)**: And the old leader"),
            "{md}"
        );
        assert!(md.contains("1 of 2 held in each of 3 runs"), "{md}");
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(json["rows"][1]["cells"][0]["breach"], "safety");
        assert_eq!(json["rows"][1]["cells"][0]["held"], 1);
        assert_eq!(json["rows"][0]["cells"][0]["figures"][0]["medianMs"], 4300);
    }

    #[test]
    fn a_breach_of_a_guarantee_of_our_own_is_marked_with_why_it_matters() {
        let mut suite = report(&[]);
        suite.results = vec![ScenarioResult {
            name: "Partition".into(),
            passed: false,
            failure: Some(
                "And the old leader stopped leading at most 3s after the partition: 3.4s".into(),
            ),
            failovers: Vec::new(),
            link: String::new(),
            breach: Some(Breach::Timing),
            ours: Some("measured from the fault".into()),
        }];
        let runs = vec![(
            "ours".to_string(),
            PathBuf::from("profiles/ours/profile.yaml"),
            "ours".to_string(),
            suite,
        )];
        let table = Table::of("sim", &runs);
        let md = table.markdown();
        assert!(
            md.contains("| Partition | **broken (timing, ours [1])**: And the old leader"),
            "{md}"
        );
        assert!(md.contains("[1] A guarantee of opconform's own, which client-go's documented semantics do not promise: measured from the fault."), "{md}");
        let html = table.html();
        assert!(
            html.contains("broken (timing, ours [1]): And the old leader"),
            "{html}"
        );
        assert!(
            html.contains("<li>[1] A guarantee of opconform&#39;s own")
                || html.contains("<li>[1] A guarantee of opconform's own"),
            "{html}"
        );
    }

    /// The runs of `ours` and `theirs` on Kubernetes `minor`, in folders of its own.
    fn on(minor: &str, seconds: f64, theirs_broken: bool) -> (VersionRuns, Vec<Run>) {
        let failure = theirs_broken.then_some("And there was never more than one leader: a and b");
        let runs = vec![
            (
                "ours".to_string(),
                PathBuf::from("profiles/ours/profile.yaml"),
                format!("{minor}/ours"),
                report(&[("One leader", None), ("Skew", None)]),
            ),
            (
                "theirs".to_string(),
                PathBuf::from("subjects/theirs/profile.yaml"),
                format!("{minor}/theirs"),
                report(&[("One leader", None), ("Skew", failure)]),
            ),
        ];
        let version = KubernetesVersion::resolve(minor).unwrap();
        let runs_of = VersionRuns {
            kubernetes: version.minor_name().to_string(),
            full: version.full().to_string(),
            wall_seconds: seconds,
        };
        (runs_of, runs)
    }

    #[test]
    fn on_several_versions_each_profile_has_a_column_per_version_side_by_side() {
        let table = Table::across(
            "local",
            &[on("1.34", 312.4, false), on("1.37", 298.0, true)],
        );
        let headings: Vec<String> = table.subjects.iter().map(Subject::heading).collect();
        assert_eq!(
            headings,
            [
                "ours · 1.34",
                "ours · 1.37",
                "theirs · 1.34",
                "theirs · 1.37"
            ]
        );
        assert_eq!(table.rows.len(), 2);
        assert!(matches!(table.rows[1].cells[2], Cell::Held { .. }));
        assert!(matches!(
            &table.rows[1].cells[3],
            Cell::Broken { link, .. } if link == "1.37/theirs/skew/timeline.html"
        ));
        let md = table.markdown();
        assert!(
            md.starts_with("## Leadership conformance on local, Kubernetes 1.34 and 1.37\n\n| scenario | ours · 1.34 | ours · 1.37 | theirs · 1.34 | theirs · 1.37 |\n|---|---|---|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| Skew | held (failover reject: 4158 ms) | held (failover reject: 4158 ms) | held (failover reject: 4158 ms) | **broken**: And there was never more than one leader: a and b (failover reject: 4158 ms) |"),
            "{md}"
        );
        assert!(
            md.contains("- **theirs · 1.37** (`subjects/theirs/profile.yaml`): 1 of 2 held, 10 s"),
            "{md}"
        );
        assert!(
            md.contains("- Kubernetes 1.34 (v1.34.4): every profile in 312 s\n"),
            "{md}"
        );
        assert!(
            md.contains("- Kubernetes 1.37 (v1.37.2): every profile in 298 s\n"),
            "{md}"
        );
        let html = table.html();
        assert!(
            html.contains("<h1>Leadership conformance on local, Kubernetes 1.34 and 1.37</h1>")
        );
        assert!(
            html.contains("<th>theirs · 1.37<br><small>1 of 2 held</small></th>"),
            "{html}"
        );
        assert!(html.contains("<li>Kubernetes 1.37 (v1.37.2): every profile in 298 s</li>"));
        let json = serde_json::to_value(&table).unwrap();
        assert_eq!(json["subjects"][1]["name"], "ours");
        assert_eq!(json["subjects"][1]["kubernetes"], "1.37");
        assert_eq!(json["kubernetes"][0]["full"], "v1.34.4");
        assert_eq!(json["kubernetes"][1]["wallSeconds"], 298.0);
    }

    #[test]
    fn one_named_version_shows_in_the_title_and_the_columns() {
        let table = Table::across("local", &[on("1.37", 100.0, false)]);
        let md = table.markdown();
        assert!(
            md.starts_with("## Leadership conformance on local, Kubernetes 1.37\n\n| scenario | ours · 1.37 | theirs · 1.37 |"),
            "{md}"
        );
    }

    #[test]
    fn without_named_versions_the_table_keeps_its_single_version_layout() {
        let (_, runs) = on("1.34", 1.0, false);
        let table = Table::of("local", &runs);
        let md = table.markdown();
        assert!(
            md.starts_with("## Leadership conformance on local\n\n| scenario | ours | theirs |\n"),
            "{md}"
        );
        assert!(!md.contains("Kubernetes"), "{md}");
        assert!(!md.contains(" · "), "{md}");
        let json = serde_json::to_value(&table).unwrap();
        assert!(json.get("kubernetes").is_none());
        assert!(json["subjects"][0].get("kubernetes").is_none());
    }

    #[test]
    fn a_coordinated_profile_is_not_applicable_where_feature_gates_cannot_be_set() {
        let mut subject = crate::subject::Subject::memcached();
        assert_eq!(not_applicable_before(&subject, "sim"), None);
        subject.election.coordinated = true;
        assert_eq!(not_applicable_before(&subject, "local"), None);
        for provider in ["sim", "kind"] {
            let why = not_applicable_before(&subject, provider).unwrap();
            assert!(
                why.ends_with(&format!(
                    "CoordinatedLeaderElection feature gate, and the {provider} provider cannot set feature gates"
                )),
                "{why}"
            );
            assert!(why.contains("(election.coordinated)"), "{why}");
        }
    }

    #[test]
    fn a_report_without_not_applicable_reads_as_one_that_ran() {
        let suite: SuiteReport = serde_json::from_str(
            r#"{"provider":"sim","wallSeconds":1.0,"results":[{"name":"One leader","passed":true}]}"#,
        )
        .unwrap();
        assert!(suite.not_applicable.is_none());
        assert_eq!(suite.results.len(), 1);
    }

    #[test]
    fn the_shipped_profiles_are_found_in_both_folders() {
        let found = shipped_profiles(&crate::subject::repository_root());
        let names: Vec<String> = found
            .iter()
            .filter_map(|p| p.parent()?.file_name()?.to_str().map(str::to_string))
            .collect();
        for shipped in [
            "memcached-operator",
            "kube-lease-manager",
            "kube-leader-election",
        ] {
            assert!(names.contains(&shipped.to_string()), "{names:?}");
        }
    }

    #[test]
    fn profiles_named_profile_yaml_or_ending_in_it_are_found_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        for file in [
            "profiles/a/profile.yaml",
            "subjects/b/one.profile.yaml",
            "subjects/b/two.profile.yaml",
            "subjects/b/config/manager.yaml",
            "subjects/b/profile.yml",
            "subjects/c/readme.md",
        ] {
            let path = root.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
        }
        let found: Vec<String> = shipped_profiles(root.path())
            .iter()
            .map(|p| p.strip_prefix(root.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "profiles/a/profile.yaml",
                "subjects/b/one.profile.yaml",
                "subjects/b/two.profile.yaml"
            ]
        );
    }
}
