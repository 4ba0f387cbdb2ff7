//! Rendering results: human text, JSON, JUnit XML.

use serde_json::{Value, json};

use super::coverage::Coverage;
use super::run::{CaseResult, Failure};

/// The results of one test file.
#[derive(Debug)]
pub struct FileResults {
    /// The test file as given.
    pub path: String,
    /// Its cases in file order.
    pub cases: Vec<CaseResult>,
}

/// Passed and failed case counts.
pub fn counts(files: &[FileResults]) -> (usize, usize) {
    let all = files.iter().flat_map(|f| &f.cases);
    let failed = all.clone().filter(|c| !c.failures.is_empty()).count();
    (all.count() - failed, failed)
}

fn shown(value: Option<&Value>) -> String {
    match value {
        None => "nothing (the result has no such field)".to_owned(),
        Some(v) => v.to_string(),
    }
}

/// One failure as a single line (JUnit messages).
fn one_line(f: &Failure) -> String {
    match &f.note {
        Some(note) => format!("{}: {note}", f.step),
        None => format!(
            "{}: expect.{}: expected {}, got {}",
            f.step,
            f.field,
            shown(f.expected.as_ref()),
            shown(f.actual.as_ref())
        ),
    }
}

/// Every failure with its place, as text.
fn failure_text(f: &Failure) -> String {
    match &f.note {
        Some(note) => format!("{}: {}: {note}\n", f.at, f.step),
        None => {
            let mut text = format!(
                "{}: {}: expect.{}\n    expected: {}\n    actual:   {}\n",
                f.at,
                f.step,
                f.field,
                shown(f.expected.as_ref()),
                shown(f.actual.as_ref())
            );
            if let Some(detail) = &f.detail {
                text.push_str(&format!("    message:  {detail}\n"));
            }
            text
        }
    }
}

/// The human report.
pub fn human(files: &[FileResults], coverage: Option<&Coverage>) -> String {
    let mut out = String::new();
    for file in files {
        out.push_str(&format!("{}\n", file.path));
        for case in &file.cases {
            if case.failures.is_empty() {
                out.push_str(&format!("  ok    {}\n", case.name));
            } else {
                out.push_str(&format!("  FAIL  {} ({})\n", case.name, case.at));
                for failure in &case.failures {
                    for line in failure_text(failure).lines() {
                        out.push_str(&format!("        {line}\n"));
                    }
                }
            }
        }
    }
    let (passed, failed) = counts(files);
    out.push_str(&format!(
        "\n{passed} passed, {failed} failed ({} {})\n",
        files.len(),
        if files.len() == 1 { "file" } else { "files" }
    ));
    if let Some(coverage) = coverage {
        out.push('\n');
        out.push_str(&coverage.human());
    }
    out
}

/// The JSON report.
pub fn json(policy: &str, files: &[FileResults], coverage: Option<&Coverage>) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(&json_value(policy, files, coverage)).unwrap_or_default()
    )
}

/// The JSON report as a value (`mcpc test DIR` lists one per policy).
pub fn json_value(policy: &str, files: &[FileResults], coverage: Option<&Coverage>) -> Value {
    let (passed, failed) = counts(files);
    let files: Vec<Value> = files
        .iter()
        .map(|file| {
            json!({
                "path": file.path,
                "cases": file.cases.iter().map(|case| json!({
                    "name": case.name,
                    "line": case.at.line,
                    "passed": case.failures.is_empty(),
                    "failures": case.failures.iter().map(|f| json!({
                        "step": f.step,
                        "field": f.field,
                        "expected": f.expected,
                        "actual": f.actual,
                        "actual_present": f.actual.is_some(),
                        "location": f.at.to_string(),
                        "note": f.note,
                        "message": f.detail,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut report = json!({
        "policy": policy,
        "passed": passed,
        "failed": failed,
        "files": files,
    });
    if let (Some(coverage), Some(object)) = (coverage, report.as_object_mut()) {
        object.insert("coverage".to_owned(), coverage.json());
    }
    report
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 cannot carry other control characters at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// The JUnit XML report (one `testsuite` per test file). Times are not
/// measured, so the report is the same on every run.
pub fn junit(files: &[FileResults]) -> String {
    junit_of(&files.iter().collect::<Vec<_>>())
}

/// [`junit`] over the test files of several policies (`mcpc test DIR`).
pub fn junit_of(files: &[&FileResults]) -> String {
    let all = files.iter().flat_map(|f| &f.cases);
    let failed = all.clone().filter(|c| !c.failures.is_empty()).count();
    let passed = all.count() - failed;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"mcpc test\" tests=\"{}\" failures=\"{failed}\" errors=\"0\">\n",
        passed + failed
    ));
    for file in files.iter().copied() {
        let failures = file.cases.iter().filter(|c| !c.failures.is_empty()).count();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">\n",
            xml_escape(&file.path),
            file.cases.len()
        ));
        for case in &file.cases {
            let open = format!(
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\"",
                xml_escape(&case.name),
                xml_escape(&file.path),
                xml_escape(&case.at.file),
                case.at.line
            );
            if case.failures.is_empty() {
                out.push_str(&format!("{open}/>\n"));
                continue;
            }
            out.push_str(&format!("{open}>\n"));
            let message = case
                .failures
                .iter()
                .map(one_line)
                .collect::<Vec<_>>()
                .join("; ");
            let body: String = case.failures.iter().map(failure_text).collect();
            out.push_str(&format!(
                "      <failure message=\"{}\" type=\"expectation\">{}</failure>\n",
                xml_escape(&message),
                xml_escape(&body)
            ));
            out.push_str("    </testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
