//! `mcpc test POLICY [TESTS...] [--format human|json|junit] [--coverage] [--threshold N]`
//! and `mcpc test DIR` (each policy under it with its `NAME.tests.toml`)
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
pub(crate) mod spec;

use std::process::ExitCode;

use clap::ValueEnum;

use super::policy::{LoadFailure, load_policy_with_source};
use super::{ColorChoice, emit, fail, inputs};

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
    /// The policy (`.mcpolicy`), or a compiled table (`.json`, no coverage);
    /// or a directory: every `*.mcpolicy` under it (sorted, hidden
    /// directories and `target/` skipped) with its `NAME.tests.toml` beside
    /// it.
    #[arg(value_name = "POLICY")]
    policy: String,
    /// Test files (TOML), e.g. `examples/personal-laptop.tests.toml`. When
    /// none is given, the policy's `NAME.tests.toml` beside it.
    #[arg(value_name = "TESTS")]
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

/// One policy's run: its test files' results and its coverage.
struct PolicyRun {
    policy: String,
    results: Vec<report::FileResults>,
    coverage: Option<coverage::Coverage>,
}

/// The policies to run and the test files of each.
fn pairs(args: &Args) -> Result<Vec<(String, Vec<String>)>, String> {
    let path = std::path::Path::new(&args.policy);
    if !path.is_dir() {
        let tests = if args.tests.is_empty() {
            let beside = inputs::tests_beside(path);
            if !beside.is_file() {
                return Err(format!(
                    "no test files given, and {} does not exist",
                    beside.display()
                ));
            }
            vec![beside.to_string_lossy().into_owned()]
        } else {
            args.tests.clone()
        };
        return Ok(vec![(args.policy.clone(), tests)]);
    }
    if !args.tests.is_empty() {
        return Err(format!(
            "{} is a directory: each policy's tests are its NAME.tests.toml, so give no test files",
            args.policy
        ));
    }
    let mut pairs = Vec::new();
    for policy in inputs::policies_under(path)? {
        let tests = inputs::tests_beside(&policy);
        if tests.is_file() {
            pairs.push((
                policy.to_string_lossy().into_owned(),
                vec![tests.to_string_lossy().into_owned()],
            ));
        }
    }
    if pairs.is_empty() {
        return Err(format!(
            "{}: no .mcpolicy file here has a NAME.tests.toml beside it",
            args.policy
        ));
    }
    Ok(pairs)
}

pub fn run(args: Args) -> ExitCode {
    if let Some(t) = args.threshold
        && !(0.0..=100.0).contains(&t)
    {
        return fail(format!(
            "--threshold {t} is not a percentage between 0 and 100"
        ));
    }
    let pairs = match pairs(&args) {
        Ok(pairs) => pairs,
        Err(message) => return fail(message),
    };
    let many = std::path::Path::new(&args.policy).is_dir();
    let mut runs = Vec::new();
    let mut worst = 0u8;
    for (policy, tests) in &pairs {
        match run_policy(&args, policy, tests) {
            Ok(run) => runs.push(run),
            // A malformed test file or a usage error stops everything.
            Err(2) => return ExitCode::from(2),
            Err(code) => worst = worst.max(code),
        }
    }
    if !many {
        let Some(run) = runs.first() else {
            return ExitCode::from(worst);
        };
        match args.format {
            Format::Human => emit(&report::human(&run.results, run.coverage.as_ref())),
            Format::Json => emit(&report::json(
                &run.policy,
                &run.results,
                run.coverage.as_ref(),
            )),
            Format::Junit => {
                emit(&report::junit(&run.results));
                if let Some(coverage) = &run.coverage {
                    say!("{}", coverage.human());
                }
            }
        }
    } else {
        emit_many(&args, &runs);
    }
    let mut code = worst;
    for run in &runs {
        let (_, failed) = report::counts(&run.results);
        if failed > 0 {
            code = code.max(1);
        }
        if let (Some(threshold), Some(coverage)) = (args.threshold, &run.coverage) {
            let total = coverage.total_ratio();
            if total.percent() + 1e-9 < threshold {
                sayln!(
                    "mcpc: coverage {:.1}% ({}/{}) of {} is below the threshold {threshold}%",
                    total.percent(),
                    total.covered,
                    total.total,
                    run.policy
                );
                code = code.max(1);
            }
        }
    }
    ExitCode::from(code)
}

/// The reports of a directory's policies: each policy's human report under
/// its name, one JSON document listing them, or one JUnit document.
fn emit_many(args: &Args, runs: &[PolicyRun]) {
    let all: Vec<&report::FileResults> = runs.iter().flat_map(|r| &r.results).collect();
    let (passed, failed) = runs
        .iter()
        .map(|r| report::counts(&r.results))
        .fold((0, 0), |(p, f), (rp, rf)| (p + rp, f + rf));
    match args.format {
        Format::Human => {
            let mut out = String::new();
            for run in runs {
                out.push_str(&format!(
                    "== {}
",
                    run.policy
                ));
                out.push_str(&report::human(&run.results, run.coverage.as_ref()));
                out.push('\n');
            }
            out.push_str(&format!(
                "total: {passed} passed, {failed} failed ({} policies)\n",
                runs.len()
            ));
            emit(&out);
        }
        Format::Json => {
            let policies: Vec<serde_json::Value> = runs
                .iter()
                .map(|r| report::json_value(&r.policy, &r.results, r.coverage.as_ref()))
                .collect();
            let doc = serde_json::json!({
                "passed": passed,
                "failed": failed,
                "policies": policies,
            });
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            ));
        }
        Format::Junit => {
            emit(&report::junit_of(&all));
            for run in runs {
                if let Some(coverage) = &run.coverage {
                    say!("{}: {}", run.policy, coverage.human());
                }
            }
        }
    }
}

/// Runs one policy's test files; `Err` is the exit code when it could not
/// run (2: usage, I/O or a malformed test file; 1: the policy has errors).
fn run_policy(args: &Args, policy_path: &str, tests: &[String]) -> Result<PolicyRun, u8> {
    let want_coverage = args.coverage || args.threshold.is_some();
    let (policy, source) = match load_policy_with_source(policy_path, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => {
            fail(message);
            return Err(2);
        }
        Err(LoadFailure::Findings) => return Err(1),
    };
    if want_coverage && source.is_none() {
        fail(format!(
            "{policy_path}: coverage needs the policy source (.mcpolicy), not a compiled table"
        ));
        return Err(2);
    }

    // Every file is read and validated before any case runs.
    let mut files = Vec::new();
    let mut malformed = false;
    for path in tests {
        match spec::load(path) {
            Ok(file) => files.push(file),
            Err(error) => {
                sayln!("mcpc: error: {error}");
                malformed = true;
            }
        }
    }
    if malformed {
        return Err(2);
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
            Err(message) => {
                fail(message);
                return Err(2);
            }
        },
        _ => None,
    };
    Ok(PolicyRun {
        policy: policy_path.to_owned(),
        results,
        coverage,
    })
}
