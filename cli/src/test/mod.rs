//! `mcpc test POLICY TESTS... [--format human|json|junit] [--coverage] [--threshold N]`
//!
//! Policy unit tests in the manner of `opa test`: each case of a TOML test
//! file (format in `spec.rs` and the README) sends a request, after optional
//! earlier requests, to an engine over the policy's table with a fresh
//! in-memory store and a fixed clock, and compares what the engine answered
//! with what the case expects.
//! Exit codes: 0 every case passed (and coverage met `--threshold`); 1 a
//! case failed, coverage fell short, or the policy has errors; 2 usage, I/O,
//! or a malformed test file.

pub(crate) mod coverage;
mod report;
mod run;
mod spec;

use std::process::ExitCode;

use clap::ValueEnum;

use super::policy::{LoadFailure, load_policy_with_source};
use super::{ColorChoice, emit, fail};

/// Output formats of `mcpc test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Readable text.
    Human,
    /// One JSON document.
    Json,
    /// JUnit XML, for CI systems (coverage goes to stderr as text).
    Junit,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy (`.mcpolicy`), or a compiled table (`.json`, no coverage).
    #[arg(value_name = "POLICY")]
    policy: String,
    /// Test files (TOML), e.g. `examples/personal-laptop.tests.toml`.
    #[arg(value_name = "TESTS", required = true)]
    tests: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Report which statements and reasons the cases exercised.
    #[arg(long)]
    coverage: bool,
    /// Fail (exit 1) when total coverage (statements and reasons) is below this percentage; implies `--coverage`.
    #[arg(long, value_name = "PERCENT")]
    threshold: Option<f64>,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    if let Some(t) = args.threshold
        && !(0.0..=100.0).contains(&t)
    {
        return fail(format!(
            "--threshold {t} is not a percentage between 0 and 100"
        ));
    }
    let want_coverage = args.coverage || args.threshold.is_some();
    let (policy, source) = match load_policy_with_source(&args.policy, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
    };
    if want_coverage && source.is_none() {
        return fail(format!(
            "{}: coverage needs the policy source (.mcpolicy), not a compiled table",
            args.policy
        ));
    }

    // Every file is read and validated before any case runs.
    let mut files = Vec::new();
    let mut malformed = false;
    for path in &args.tests {
        match spec::load(path) {
            Ok(file) => files.push(file),
            Err(error) => {
                sayln!("mcpc: error: {error}");
                malformed = true;
            }
        }
    }
    if malformed {
        return ExitCode::from(2);
    }

    let mut results = Vec::new();
    let mut hits = Vec::new();
    let mut reasons = Vec::new();
    let mut unattributed = Vec::new();
    for file in &files {
        let mut cases = Vec::new();
        for case in &file.cases {
            let mut result = run::run_case(&policy, case);
            hits.append(&mut result.hits);
            reasons.append(&mut result.reasons);
            unattributed.extend(
                result
                    .unattributed
                    .iter()
                    .map(|u| format!("{} ({}), {u}", case.name, case.at)),
            );
            cases.push(result);
        }
        results.push(report::FileResults {
            path: file.path.clone(),
            cases,
        });
    }

    let coverage = match (&source, want_coverage) {
        (Some(source), true) => match coverage::StatementMap::new(source, policy.table()) {
            Ok(map) => Some(map.coverage(&hits, &reasons, unattributed)),
            Err(message) => return fail(message),
        },
        _ => None,
    };

    match args.format {
        Format::Human => emit(&report::human(&results, coverage.as_ref())),
        Format::Json => emit(&report::json(&args.policy, &results, coverage.as_ref())),
        Format::Junit => {
            emit(&report::junit(&results));
            if let Some(coverage) = &coverage {
                say!("{}", coverage.human());
            }
        }
    }

    let (_, failed) = report::counts(&results);
    let mut code = if failed > 0 { 1 } else { 0 };
    if let (Some(threshold), Some(coverage)) = (args.threshold, &coverage) {
        let total = coverage.total_ratio();
        if total.percent() + 1e-9 < threshold {
            sayln!(
                "mcpc: coverage {:.1}% ({}/{}) of {} is below the threshold {threshold}%",
                total.percent(),
                total.covered,
                total.total,
                args.policy
            );
            code = 1;
        }
    }
    ExitCode::from(code)
}
