//! `mcpc check` in CI as linters are consumed there (README, "In CI"):
//!
//! - the pre-commit hooks (`.pre-commit-hooks.yaml`), under the real
//!   `pre-commit` (PyPI, pinned in `tests/pre-commit/requirements.txt`):
//!   `pre-commit try-repo` from a scratch repository holding a good policy,
//!   a bad one and an unformatted one;
//! - the GitHub Action's shell steps (`.github/mcpc-action.sh`, called by
//!   `action.yml`): inputs in, commands run, exit codes and the workflow
//!   annotations out, with GitHub's `GITHUB_OUTPUT`/`GITHUB_PATH` files as
//!   the runner reads them.
//!
//! pre-commit and the action's YAML need a Python that imports `pre_commit`
//! (with PyYAML): `MCPOLICY_PYTHON` (`.ci/run` installs it), else
//! `python3`. Without one those tests are skipped with a message, unless
//! `MCPOLICY_REQUIRE_PYTHON=1`, when they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const MCPC: &str = env!("CARGO_BIN_EXE_mcpc");

/// Clean and formatted.
const GOOD: &str = "mcpolicy 1\n\ndefaults {\n  sampling on\n}\n";
/// An error: a misspelt statement (E0101).
const BAD: &str = "mcpolicy 1\n\ndefaults {\n  max_token 4096\n}\n";
/// Clean, but not in the canonical layout.
const MESSY: &str = "mcpolicy 1\ndefaults {   sampling on\n}\n";
/// Only a warning: an unused reason (W0410).
const WARNED: &str = "mcpolicy 1\n\nreason acme.unused { retryable false }\n";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `mcpc ARGS` in `dir`.
fn mcpc(args: &[&str], dir: &Path) -> Output {
    Command::new(MCPC)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("mcpc runs")
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, content) in files {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
}

/// A Python that imports pre-commit and PyYAML, or `None` (skipped) unless
/// `MCPOLICY_REQUIRE_PYTHON=1`.
fn python_with_pre_commit() -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args(["-c", "import pre_commit, yaml"])
        .output();
    if probe.as_ref().is_ok_and(|o| o.status.success()) {
        return Some(python);
    }
    let why = match &probe {
        Ok(output) => text(&output.stderr).trim().to_owned(),
        Err(error) => error.to_string(),
    };
    assert!(
        std::env::var("MCPOLICY_REQUIRE_PYTHON").as_deref() != Ok("1"),
        "MCPOLICY_REQUIRE_PYTHON=1 but {python} cannot import pre-commit ({why}; \
         pip install -r tests/pre-commit/requirements.txt and set MCPOLICY_PYTHON)"
    );
    eprintln!(
        "skipping: {python} cannot import pre-commit ({why}); \
         pip install -r tests/pre-commit/requirements.txt and set MCPOLICY_PYTHON"
    );
    None
}

// ---------------------------------------------------------------- pre-commit

/// `git ARGS` in `dir`, with an identity and no user or system config.
fn git(args: &[&str], dir: &Path) {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .envs(git_env())
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        text(&output.stderr)
    );
}

fn git_env() -> [(&'static str, &'static str); 6] {
    [
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_AUTHOR_NAME", "mcpolicy test"),
        ("GIT_AUTHOR_EMAIL", "test@mcpolicy.test"),
        ("GIT_COMMITTER_NAME", "mcpolicy test"),
        ("GIT_COMMITTER_EMAIL", "test@mcpolicy.test"),
    ]
}

/// A hook repository holding only this repository's `.pre-commit-hooks.yaml`
/// (the hooks are `language: system`: they need nothing else from it), and
/// a user's repository with policies staged.
struct PreCommit {
    python: String,
    dir: tempfile::TempDir,
}

impl PreCommit {
    fn new(python: String, files: &[(&str, &str)]) -> PreCommit {
        let dir = tempfile::tempdir().unwrap();
        let hooks = dir.path().join("hooks");
        fs::create_dir_all(&hooks).unwrap();
        fs::copy(
            repo().join(".pre-commit-hooks.yaml"),
            hooks.join(".pre-commit-hooks.yaml"),
        )
        .unwrap();
        git(&["init", "-q"], &hooks);
        git(&["add", "."], &hooks);
        git(&["commit", "-q", "-m", "hooks"], &hooks);
        let work = dir.path().join("work");
        fs::create_dir_all(&work).unwrap();
        git(&["init", "-q"], &work);
        write(&work, files);
        git(&["add", "."], &work);
        PreCommit { python, dir }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `pre-commit try-repo HOOKS HOOK ARGS` in the user's repository, with
    /// this build's `mcpc` first on `PATH`: its exit code and output.
    fn try_repo(&self, hook: &str, args: &[&str]) -> (i32, String) {
        let bin = Path::new(MCPC).parent().unwrap();
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
        )
        .unwrap();
        let output = Command::new(&self.python)
            .args(["-m", "pre_commit", "try-repo"])
            .arg(self.dir.path().join("hooks"))
            .arg(hook)
            .args(["--color", "never"])
            .args(args)
            .current_dir(self.work())
            .envs(git_env())
            .env("PATH", path)
            .env("PRE_COMMIT_HOME", self.dir.path().join("cache"))
            // One batch of files, whatever the machine's core count.
            .env("PRE_COMMIT_NO_CONCURRENCY", "1")
            .env("NO_COLOR", "1")
            .output()
            .expect("pre-commit runs");
        let all = format!("{}{}", text(&output.stdout), text(&output.stderr));
        (output.status.code().unwrap_or(-1), all)
    }
}

/// `mcpc-check` passes the good policy, fails the bad one with its
/// diagnostic (as `mcpc check` prints it), takes several files in one run,
/// and never sees a file that is not a policy.
#[test]
fn pre_commit_check_hook_passes_the_good_policy_and_fails_the_bad_one() {
    let Some(python) = python_with_pre_commit() else {
        return;
    };
    let files = [
        ("good.mcpolicy", GOOD),
        ("policies/bad.mcpolicy", BAD),
        ("messy.mcpolicy", MESSY),
        ("notes.txt", BAD),
    ];
    let scratch = PreCommit::new(python, &files);

    let (code, out) = scratch.try_repo("mcpc-check", &["--files", "good.mcpolicy"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("mcpc check") && out.contains("Passed"),
        "{out}"
    );

    let (code, out) = scratch.try_repo("mcpc-check", &["--all-files"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Failed") && out.contains("- exit code: 1"),
        "{out}"
    );
    let direct = mcpc(&["check", "policies/bad.mcpolicy"], &scratch.work());
    assert_eq!(direct.status.code(), Some(1));
    let diagnostic = format!("{}{}", text(&direct.stdout), text(&direct.stderr));
    assert!(diagnostic.contains("E0101"), "{diagnostic}");
    // Its diagnostic as `mcpc check` prints it; the summary counts the three
    // policies, checked in one run, and not notes.txt.
    let summary = "1 error, 0 warnings in 1 file";
    assert!(diagnostic.contains(summary), "{diagnostic}");
    for line in diagnostic
        .lines()
        .filter(|l| !l.trim().is_empty() && *l != summary)
    {
        assert!(
            out.contains(line),
            "`{line}` missing from the hook's output:\n{out}"
        );
    }
    assert!(out.contains("1 error, 0 warnings in 3 files"), "{out}");
    assert!(!out.contains("notes.txt"), "{out}");

    let (code, out) = scratch.try_repo("mcpc-check", &["--files", "notes.txt"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("(no files to check)Skipped"), "{out}");
}

/// `mcpc-fmt` rewrites an unformatted policy into `mcpc fmt`'s layout (and
/// pre-commit fails the run because a file changed); the next run passes
/// and a formatted policy is left alone.
#[test]
fn pre_commit_fmt_hook_reformats_in_place() {
    let Some(python) = python_with_pre_commit() else {
        return;
    };
    let scratch = PreCommit::new(
        python,
        &[("good.mcpolicy", GOOD), ("messy.mcpolicy", MESSY)],
    );
    let (code, out) = scratch.try_repo("mcpc-fmt", &["--all-files"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("files were modified by this hook"), "{out}");
    let work = scratch.work();
    assert_eq!(
        fs::read_to_string(work.join("messy.mcpolicy")).unwrap(),
        GOOD
    );
    assert_eq!(
        fs::read_to_string(work.join("good.mcpolicy")).unwrap(),
        GOOD
    );

    let (code, out) = scratch.try_repo("mcpc-fmt", &["--all-files"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Passed"), "{out}");
}

// ------------------------------------------------------------ GitHub Action

/// One run of a step of `.github/mcpc-action.sh`, in a scratch workspace.
struct Step {
    code: i32,
    stdout: String,
    stderr: String,
    /// What the step appended to `$GITHUB_OUTPUT`, as `name=value` lines.
    outputs: String,
    /// What it appended to `$GITHUB_PATH`.
    path: String,
}

impl Step {
    fn output(&self, name: &str) -> Option<&str> {
        self.outputs
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
    }
}

/// Runs `mcpc-action.sh STEP` in `workspace` with `env` (and nothing of the
/// test's own `INPUT_*`/`GITHUB_*`), as the runner would.
fn action_step(step: &str, workspace: &Path, env: &[(&str, &str)]) -> Step {
    let github = tempfile::tempdir().unwrap();
    let outputs = github.path().join("output");
    let path = github.path().join("path");
    fs::write(&outputs, "").unwrap();
    fs::write(&path, "").unwrap();
    let mut command = Command::new(repo().join(".github/mcpc-action.sh"));
    command.arg(step).current_dir(workspace);
    for (name, _) in std::env::vars() {
        if ["INPUT_", "GITHUB_", "RUNNER_", "MCPC"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(name);
        }
    }
    command
        .env("GITHUB_OUTPUT", &outputs)
        .env("GITHUB_PATH", &path)
        .env("RUNNER_TEMP", github.path())
        .env("NO_COLOR", "1")
        .envs(env.iter().copied());
    let output = command.output().expect("the action's script runs");
    Step {
        code: output.status.code().unwrap_or(-1),
        stdout: text(&output.stdout),
        stderr: text(&output.stderr),
        outputs: fs::read_to_string(&outputs).unwrap(),
        path: fs::read_to_string(&path).unwrap(),
    }
}

/// A workspace holding `files`.
fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    dir
}

/// The check step prints exactly `mcpc check --format github`'s annotations
/// for the paths given (one per line, blank lines and indentation ignored, a
/// path with a space kept whole) and exits with its code: 1 on an error, 0
/// when clean.
#[test]
fn action_check_step_annotates_as_mcpc_check_format_github() {
    let ws = workspace(&[
        ("good.mcpolicy", GOOD),
        ("my policies/bad.mcpolicy", BAD),
        ("other/bad.mcpolicy", BAD),
    ]);
    let step = action_step(
        "check",
        ws.path(),
        &[
            ("MCPC", MCPC),
            (
                "INPUT_PATHS",
                "  good.mcpolicy\n\nmy policies/bad.mcpolicy  \n",
            ),
        ],
    );
    assert_eq!(step.code, 1, "{}{}", step.stdout, step.stderr);
    let direct = mcpc(
        &[
            "check",
            "--format",
            "github",
            "good.mcpolicy",
            "my policies/bad.mcpolicy",
        ],
        ws.path(),
    );
    assert_eq!(direct.status.code(), Some(1));
    assert_eq!(step.stdout, text(&direct.stdout));
    let annotations: Vec<&str> = step.stdout.lines().collect();
    assert_eq!(annotations.len(), 1, "{}", step.stdout);
    assert!(
        annotations[0].starts_with("::error file=my policies/bad.mcpolicy,line=4,col=3,")
            && annotations[0].contains(",title=E0101 "),
        "{}",
        annotations[0]
    );
    assert!(!step.stdout.contains("other/"), "only the paths given");
    assert_eq!(step.outputs, "", "no SARIF asked for");

    let clean = action_step(
        "check",
        ws.path(),
        &[("MCPC", MCPC), ("INPUT_PATHS", "good.mcpolicy")],
    );
    assert_eq!(
        (clean.code, clean.stdout.as_str()),
        (0, ""),
        "{}",
        clean.stderr
    );
}

/// Without paths the step checks the workspace (`.`, recursively); with
/// `deny-warnings` a warning fails it, without it a warning is annotated
/// and passes.
#[test]
fn action_check_step_defaults_to_the_workspace_and_denies_warnings_on_request() {
    let ws = workspace(&[("a/warned.mcpolicy", WARNED), ("good.mcpolicy", GOOD)]);
    let step = action_step("check", ws.path(), &[("MCPC", MCPC)]);
    assert_eq!(step.code, 0, "{}{}", step.stdout, step.stderr);
    let direct = mcpc(&["check", "--format", "github", "."], ws.path());
    assert_eq!(step.stdout, text(&direct.stdout));
    assert!(
        step.stdout.starts_with("::warning file="),
        "{}",
        step.stdout
    );
    assert!(step.stdout.contains("title=W0410 "), "{}", step.stdout);

    let step = action_step(
        "check",
        ws.path(),
        &[("MCPC", MCPC), ("INPUT_DENY_WARNINGS", "true")],
    );
    assert_eq!(step.code, 1, "{}{}", step.stdout, step.stderr);
    let direct = mcpc(
        &["check", "--format", "github", "--deny-warnings", "."],
        ws.path(),
    );
    assert_eq!(step.stdout, text(&direct.stdout));
}

/// With `sarif-file` the step also writes SARIF 2.1.0 holding the findings,
/// says where (output `sarif-file`), and still fails on them; with
/// `upload-sarif` alone the SARIF goes to the runner's temporary directory.
#[test]
fn action_check_step_writes_sarif_on_request() {
    let ws = workspace(&[("bad.mcpolicy", BAD)]);
    let check_into_out = || {
        action_step(
            "check",
            ws.path(),
            &[
                ("MCPC", MCPC),
                ("INPUT_PATHS", "bad.mcpolicy"),
                ("INPUT_SARIF_FILE", "out/results.sarif"),
            ],
        )
    };
    let step = check_into_out();
    assert_eq!(
        step.code, 2,
        "the directory out/ does not exist: {}",
        step.stdout
    );
    assert_eq!(
        step.stdout,
        "::error title=mcpc action::input 'sarif-file': cannot write 'out/results.sarif'\n"
    );

    fs::create_dir(ws.path().join("out")).unwrap();
    let step = check_into_out();
    assert_eq!(step.code, 1, "{}{}", step.stdout, step.stderr);
    assert_eq!(step.output("sarif-file"), Some("out/results.sarif"));
    assert!(
        step.stdout.starts_with("::error file=bad.mcpolicy,"),
        "{}",
        step.stdout
    );
    let sarif: Value =
        serde_json::from_str(&fs::read_to_string(ws.path().join("out/results.sarif")).unwrap())
            .unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let direct = mcpc(&["check", "--format", "sarif", "bad.mcpolicy"], ws.path());
    assert_eq!(
        sarif,
        serde_json::from_slice::<Value>(&direct.stdout).unwrap()
    );
    assert_eq!(
        sarif["runs"][0]["results"][0]["ruleId"], "E0101",
        "{sarif:#}"
    );

    let step = action_step(
        "check",
        ws.path(),
        &[
            ("MCPC", MCPC),
            ("INPUT_PATHS", "bad.mcpolicy"),
            ("INPUT_UPLOAD_SARIF", "true"),
        ],
    );
    assert_eq!(step.code, 1, "{}{}", step.stdout, step.stderr);
    let written = PathBuf::from(step.output("sarif-file").unwrap());
    assert!(written.ends_with("mcpolicy.sarif"), "{}", step.outputs);
}

/// Bad inputs are usage errors (exit 2) with an error annotation naming the
/// input; a missing path is mcpc's own I/O error (exit 2).
#[test]
fn action_steps_refuse_bad_inputs() {
    let ws = workspace(&[("good.mcpolicy", GOOD)]);
    for (name, input) in [
        ("deny-warnings", "INPUT_DENY_WARNINGS"),
        ("upload-sarif", "INPUT_UPLOAD_SARIF"),
    ] {
        let step = action_step("check", ws.path(), &[("MCPC", MCPC), (input, "yes")]);
        assert_eq!(step.code, 2, "{name}");
        assert_eq!(
            step.stdout,
            format!("::error title=mcpc action::input '{name}' must be true or false, not 'yes'\n")
        );
    }
    let step = action_step(
        "check",
        ws.path(),
        &[("MCPC", MCPC), ("INPUT_PATHS", "missing.mcpolicy")],
    );
    assert_eq!(step.code, 2, "{}{}", step.stdout, step.stderr);

    let step = action_step("install", ws.path(), &[("INPUT_MCPC", "/nonexistent/mcpc")]);
    assert_eq!(step.code, 2);
    assert!(
        step.stdout
            .contains("input 'mcpc': '/nonexistent/mcpc' does not run"),
        "{}",
        step.stdout
    );
    assert_eq!(step.outputs, "");

    let step = action_step("deploy", ws.path(), &[]);
    assert_eq!(step.code, 2);
    assert!(step.stderr.contains("usage:"), "{}", step.stderr);
}

/// A directory of symbolic links to the tools the script uses, plus `extra`
/// (name, target): a `PATH` with no cargo unless one is added.
fn tools(extra: &[(&str, &Path)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for tool in [
        "bash",
        "env",
        "find",
        "sort",
        "xargs",
        "sha256sum",
        "cut",
        "uname",
        "dirname",
        "mkdir",
        "cp",
    ] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no {tool} on PATH"));
        std::os::unix::fs::symlink(found, dir.path().join(tool)).unwrap();
    }
    for (name, target) in extra {
        std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
    }
    dir
}

/// Without an `mcpc` input the install step builds one with `cargo install
/// --locked --path cli` from the action's own sources into the key step's
/// root, puts its `bin` on `PATH` and names it; a cached one (the second
/// run) is used without cargo; with no cargo and no cache it fails saying
/// what to add. With an `mcpc` input, that binary is used as it is.
#[test]
fn action_install_step_builds_once_with_cargo_and_reuses_the_cache() {
    let ws = workspace(&[]);
    let root = ws.path().join("mcpc-root");
    let root_text = root.to_str().unwrap();
    // A stand-in cargo: records its arguments and "installs" this build's mcpc.
    let fake = ws.path().join("fake-cargo");
    let log = ws.path().join("cargo.log");
    fs::write(
        &fake,
        format!(
            "#!/usr/bin/env bash\nprintf '%s\\n' \"$*\" >> '{}'\nmkdir -p '{root_text}/bin'\ncp '{MCPC}' '{root_text}/bin/mcpc'\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let with_cargo = tools(&[("cargo", fake.as_path())]);
    let without_cargo = tools(&[]);
    let with_cargo = with_cargo.path().to_str().unwrap();
    let without_cargo = without_cargo.path().to_str().unwrap();
    let install_with_path = |path: &str| {
        action_step(
            "install",
            ws.path(),
            &[("PATH", path), ("MCPC_ROOT", root_text)],
        )
    };

    let step = install_with_path(without_cargo);
    assert_eq!(step.code, 2, "{}{}", step.stdout, step.stderr);
    assert!(
        step.stdout.contains("no cargo on PATH") && step.stdout.contains("Rust toolchain"),
        "{}",
        step.stdout
    );

    let step = install_with_path(with_cargo);
    assert_eq!(step.code, 0, "{}{}", step.stdout, step.stderr);
    let cli = repo().join("cli");
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        format!(
            "install --locked --root {root_text} --path {}\n",
            cli.display()
        )
    );
    let installed = format!("{root_text}/bin/mcpc");
    assert_eq!(step.output("mcpc"), Some(installed.as_str()));
    assert_eq!(step.path, format!("{root_text}/bin\n"));
    assert!(
        step.stdout.contains("mcpc "),
        "the version is printed: {}",
        step.stdout
    );

    let step = install_with_path(without_cargo);
    assert_eq!(step.code, 0, "{}{}", step.stdout, step.stderr);
    assert!(step.stdout.contains("using the cached"), "{}", step.stdout);
    assert_eq!(step.output("mcpc"), Some(installed.as_str()));
    assert_eq!(
        fs::read_to_string(&log).unwrap().lines().count(),
        1,
        "cargo ran once"
    );

    let step = action_step("install", ws.path(), &[("INPUT_MCPC", MCPC)]);
    assert_eq!(step.code, 0, "{}{}", step.stdout, step.stderr);
    assert_eq!(step.output("mcpc"), Some(MCPC));
    assert_eq!(step.path, "", "a given binary changes no PATH");
}

/// The cache key names the OS and architecture and changes with the
/// sources mcpc is built from, not with their tests; the root is under the
/// cache directory, named by the key.
#[test]
fn action_cache_key_follows_the_sources_mcpc_is_built_from() {
    let ws = workspace(&[
        ("action/Cargo.toml", "[workspace]\n"),
        ("action/Cargo.lock", "version = 4\n"),
        ("action/cli/src/main.rs", "fn main() {}\n"),
        ("action/grammar/src/lib.rs", "\n"),
        ("action/compiler/src/lib.rs", "\n"),
        ("action/runtime/src/lib.rs", "\n"),
        ("action/proxy/src/lib.rs", "\n"),
        ("action/cli/tests/t.rs", "\n"),
        ("action/lsp/src/main.rs", "\n"),
    ]);
    let action = ws.path().join("action");
    let key = |ws: &Path| {
        let step = action_step(
            "key",
            ws,
            &[
                ("GITHUB_ACTION_PATH", action.to_str().unwrap()),
                ("RUNNER_OS", "Linux"),
                ("RUNNER_ARCH", "X64"),
                ("MCPC_CACHE_DIR", "/cache"),
            ],
        );
        assert_eq!(step.code, 0, "{}{}", step.stdout, step.stderr);
        let key = step.output("key").unwrap().to_owned();
        assert_eq!(step.output("root"), Some(format!("/cache/{key}").as_str()));
        key
    };
    let first = key(ws.path());
    assert!(first.starts_with("mcpc-Linux-X64-"), "{first}");
    assert_eq!(key(ws.path()), first, "deterministic");
    write(
        &action,
        &[
            ("cli/tests/t.rs", "// changed\n"),
            ("lsp/src/main.rs", "// changed\n"),
        ],
    );
    assert_eq!(key(ws.path()), first, "tests and other crates do not count");
    write(&action, &[("cli/src/main.rs", "fn main() { }\n")]);
    assert_ne!(key(ws.path()), first, "a source file counts");
}

/// `action.yml` runs the script's steps, passes every input to it through
/// the environment (never spliced into the script), and uploads SARIF only
/// on request.
#[test]
fn action_yml_passes_every_input_to_the_script_through_the_environment() {
    let Some(python) = python_with_pre_commit() else {
        return;
    };
    let output = Command::new(&python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(repo().join("action.yml"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let action: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(action["runs"]["using"], "composite");
    let steps = action["runs"]["steps"].as_array().unwrap();
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert_eq!(
        runs,
        ["key", "install", "check"]
            .map(|s| format!("\"$GITHUB_ACTION_PATH/.github/mcpc-action.sh\" {s}"))
    );
    for step in steps.iter().filter(|s| s.get("run").is_some()) {
        assert_eq!(step["shell"], "bash");
    }
    let env: Vec<(&String, &Value)> = steps
        .iter()
        .filter_map(|s| s["env"].as_object())
        .flatten()
        .collect();
    let inputs = action["inputs"].as_object().unwrap();
    for (name, input) in inputs {
        assert!(
            input["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}"
        );
        let expression = format!("${{{{ inputs.{name} }}}}");
        // Read by the script from INPUT_<NAME>, or only by `if:` conditions (`cache`).
        let by_env = env.iter().any(|(var, value)| {
            **var == format!("INPUT_{}", name.to_uppercase().replace('-', "_"))
                && **value == expression
        });
        assert!(
            by_env || name == "cache",
            "input {name} is not passed as INPUT_…"
        );
    }
    let yml = fs::read_to_string(repo().join("action.yml")).unwrap();
    for run in runs {
        assert!(
            !run.contains("${{"),
            "an expression spliced into a script: {run}"
        );
    }
    assert!(yml.contains("uses: github/codeql-action/upload-sarif@v3"));
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.contains("upload-sarif"))
        })
        .unwrap();
    assert!(
        upload["if"]
            .as_str()
            .unwrap()
            .contains("inputs.upload-sarif == 'true'")
    );
}

// ------------------------------------------------------------------ crates

/// The crates a user installs: the binaries, the embeddable runtime and its
/// rmcp adapter.
const INSTALLED: [&str; 4] = ["mcpc", "mcpolicy-lsp", "mcpolicy-runtime", "mcpolicy-rmcp"];

/// `cargo metadata` of the workspace's own packages, with their declared
/// dependencies.
fn metadata() -> Value {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--locked",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The workspace's packages, by name.
fn members(metadata: &Value) -> Vec<&Value> {
    let ids = metadata["workspace_members"].as_array().unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| ids.contains(&p["id"]))
        .collect()
}

/// Exactly the crates users install and the workspace crates they depend on
/// (normal and build dependencies) are publishable; every other member
/// (fuzz targets, examples, test support) says `publish = false`.
#[test]
fn the_publishable_crates_are_the_installed_ones_and_their_dependencies() {
    let metadata = metadata();
    let members = members(&metadata);
    let by_name = |name: &str| {
        *members
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    };
    let mut needed: Vec<String> = INSTALLED.iter().map(|s| (*s).to_owned()).collect();
    let mut at = 0;
    while at < needed.len() {
        let package = by_name(&needed[at]);
        for dependency in package["dependencies"].as_array().unwrap() {
            let name = dependency["name"].as_str().unwrap();
            if dependency["kind"] != "dev"
                && dependency.get("path").is_some()
                && !needed.iter().any(|n| n == name)
            {
                needed.push(name.to_owned());
            }
        }
        at += 1;
    }
    needed.sort();
    let mut publishable: Vec<String> = members
        .iter()
        .filter(|p| p["publish"] != serde_json::json!([]))
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    publishable.sort();
    assert_eq!(publishable, needed);
}

/// Every publishable crate has a description, a README, keywords, the
/// workspace's licence with both license texts in its package, and no
/// metadata that points at a placeholder (a field without a real value is
/// left out). `cargo package --list` shows what crates.io would get.
#[test]
fn published_crates_carry_a_readme_the_license_texts_and_no_placeholder() {
    for manifest in [
        "Cargo.toml",
        ".pre-commit-hooks.yaml",
        "action.yml",
        "lsp/editors/vscode/package.json",
    ]
    .into_iter()
    .map(|f| repo().join(f))
    {
        let text = fs::read_to_string(&manifest).unwrap();
        assert!(!text.contains(".invalid"), "{}", manifest.display());
    }
    let metadata = metadata();
    for package in members(&metadata)
        .into_iter()
        .filter(|p| p["publish"] != serde_json::json!([]))
    {
        let name = package["name"].as_str().unwrap();
        let manifest = fs::read_to_string(package["manifest_path"].as_str().unwrap()).unwrap();
        assert!(!manifest.contains(".invalid"), "{name}");
        for field in ["repository", "homepage", "documentation"] {
            assert!(
                package[field].is_null(),
                "{name}: {field} has no real value yet"
            );
        }
        assert!(
            package["description"]
                .as_str()
                .is_some_and(|d| d.len() > 20),
            "{name}"
        );
        assert_eq!(package["license"], "MIT OR Apache-2.0", "{name}");
        let readme = package["readme"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no readme"));
        assert!(Path::new(readme).is_file(), "{name}: {readme}");
        let keywords = package["keywords"].as_array().unwrap();
        assert!((1..=5).contains(&keywords.len()), "{name}: 1 to 5 keywords");

        let output = Command::new(env!("CARGO"))
            .args([
                "package",
                "--list",
                "--locked",
                "--offline",
                "--allow-dirty",
                "-p",
                name,
            ])
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));
        let files = text(&output.stdout);
        let files: Vec<&str> = files.lines().collect();
        for required in [
            "Cargo.toml",
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            "src/lib.rs",
        ] {
            let present = files.contains(&required)
                || (required == "src/lib.rs" && files.contains(&"src/main.rs"));
            assert!(present, "{name}'s package lacks {required}: {files:?}");
        }
        assert!(
            !files
                .iter()
                .any(|f| f.starts_with("tests/") && !f.starts_with("tests/fixtures/")),
            "{name}'s package carries tests that read the repository: {files:?}"
        );
    }
    for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let text = fs::read_to_string(repo().join(license)).unwrap();
        assert!(text.contains(if license == "LICENSE-MIT" {
            "MIT License"
        } else {
            "Apache License"
        }));
    }
}
