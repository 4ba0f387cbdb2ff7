//! `mcpc store …` on a store written by `mcpc eval` at fixed instants: every
//! subcommand in human and JSON form (the JSON parsed and checked field by
//! field), the filters, forget's `--yes` rule and the exit codes. Each test
//! runs the real binary.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use serde_json::Value;

const POLICY: &str = r#"mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages

reason user.denied { retryable false; ttl forever }
reason policy.rate_limit { retryable true; ttl 60s }

defaults {
  max_messages 2
  rate 2 per 1m
  budget 5 requests per day
  consent never
}

server "asker" { consent first }
"#;

/// `guard` given a block of its own, added to [`POLICY`]: its decisions go
/// stale, `asker`'s stay live.
const GUARD_BLOCK: &str = "server \"guard\" { max_messages 5 }\n";

/// The requests the fixture sends, by file name: (messages, text).
const REQUESTS: [(&str, usize, &str); 5] = [
    ("long.json", 3, "a"),
    ("b.json", 1, "b"),
    ("c.json", 1, "c"),
    ("d.json", 1, "d"),
    ("e.json", 1, "e"),
];

/// A temporary directory with the store, [`POLICY`] and its edit.
struct Fixture {
    dir: tempfile::TempDir,
    store: String,
    policy: String,
    edited: String,
}

/// `mcpc ARGS…`: exit code, stdout, stderr.
fn mcpc(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .output()
        .unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.code().unwrap(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// `mcpc store SUB --store SPEC ARGS…`.
fn store(spec: &str, sub: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["store", sub, "--store", spec];
    all.extend_from_slice(args);
    mcpc(&all)
}

/// A store holding, at 2026-03-10T12:00:0xZ: `guard`'s max_messages denial
/// (0 s), `asker`'s user.denied (1 s) and user.approved (2 s), two allows of
/// `guard` (3 s, 4 s), then its rate denial (5 s), replayed once (6 s).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut f = Fixture {
        store: dir.path().join("store.sqlite3").display().to_string(),
        policy: String::new(),
        edited: String::new(),
        dir,
    };
    f.policy = f.file("policy.mcpolicy", POLICY);
    f.edited = f.file("edited.mcpolicy", &format!("{POLICY}{GUARD_BLOCK}"));
    for (name, messages, text) in REQUESTS {
        let message =
            serde_json::json!({"role": "user", "content": {"type": "text", "text": text}});
        let body = serde_json::json!({"messages": vec![message; messages], "maxTokens": 10});
        f.file(name, &body.to_string());
    }
    // (server, request, second, consent): b.json and d.json are sent again.
    let steps = [
        ("guard", "long.json", "00", None),
        ("asker", "b.json", "01", Some("deny")),
        ("asker", "e.json", "02", Some("approve")),
        ("guard", "b.json", "03", None),
        ("guard", "c.json", "04", None),
        ("guard", "d.json", "05", None),
        ("guard", "d.json", "06", None),
    ];
    for (server, request, second, consent) in steps {
        let now = format!("2026-03-10T12:00:{second}Z");
        let request = f.path(request);
        let mut args = vec![
            "eval",
            &f.policy,
            "--server",
            server,
            "--request",
            &request,
            "--store",
            &f.store,
            "--now",
            &now,
        ];
        if let Some(answer) = consent {
            args.extend(["--consent", answer]);
        }
        let (code, _, stderr) = mcpc(&args);
        assert!(code <= 1, "{stderr}");
    }
    f
}

impl Fixture {
    /// The path of `name` in the fixture's directory.
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// Writes `name` in the fixture's directory; its path.
    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// `mcpc store SUB --store S ARGS…`: exit code, stdout, stderr.
    fn run(&self, sub: &str, args: &[&str]) -> (i32, String, String) {
        store(&self.store, sub, args)
    }

    /// The same, exit code 0 expected: stdout.
    fn stdout(&self, sub: &str, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.run(sub, args);
        assert_eq!(code, 0, "{stderr}");
        stdout
    }

    /// The same, exit code `code` expected: stderr.
    fn fails(&self, code: i32, sub: &str, args: &[&str]) -> String {
        let (got, _, stderr) = self.run(sub, args);
        assert_eq!(got, code, "{sub} {args:?}: {stderr}");
        stderr
    }

    /// The same with `--format json`, parsed (exit code 0 expected).
    fn json(&self, sub: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        let stdout = self.stdout(sub, &all);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// `guard`'s budgets under [`POLICY`] at `now`, as JSON.
    fn guard_budgets(&self, now: &str) -> Value {
        self.json(
            "budgets",
            &["--policy", &self.policy, "--server", "guard", "--now", now],
        )
    }
}

const AT: &str = "2026-03-10T12:00:10Z";

fn decisions(value: &Value) -> &Vec<Value> {
    value["decisions"].as_array().unwrap()
}

#[test]
fn ls_lists_every_decision_with_its_columns() {
    let f = fixture();
    let stdout = f.stdout("ls", &["--now", AT]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    for header in [
        "SERVER",
        "IDENTITY",
        "VERDICT",
        "REASON",
        "STATEMENT",
        "REPRESENTED",
        "STORED AT",
        "EXPIRES AT",
    ] {
        assert!(lines[0].contains(header), "{}", lines[0]);
    }
    assert!(!lines[0].contains("CURRENT"));
    // Aligned: every column starts where its header does.
    let at = lines[0].find("REASON").unwrap();
    for line in &lines[1..] {
        assert!(
            line[at..].starts_with("user.") || line[at..].starts_with("policy."),
            "{line}"
        );
        assert_eq!(&line[at - 2..at], "  ");
    }
    let cells: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        cells
            .iter()
            .map(|c| (c[0], c[2], c[3], c[4], c[5]))
            .collect::<Vec<_>>(),
        // Ordered by (server, key): the approval is stored under its
        // approval key (`asker:approval:…`), which sorts before this
        // refusal key (`docs/spec/identity.md`, "Two keys").
        [
            ("asker", "allow", "user.approved", "consent", "0"),
            ("asker", "deny", "user.denied", "consent", "0"),
            (
                "guard",
                "deny",
                "policy.input_too_large",
                "max_messages",
                "0"
            ),
            ("guard", "deny", "policy.rate_limit", "rate", "1"),
        ]
    );
    assert_eq!(cells[3][6], "2026-03-10T12:00:05Z");
    // Rate denial: stored until the retry (60 s after the first admission).
    assert_eq!(cells[3][7], "2026-03-10T12:01:03Z");
    assert_eq!(cells[1][7], "never");

    let json = f.json("ls", &["--now", AT]);
    assert_eq!(json["store"], f.store.as_str());
    assert_eq!(json["now"], AT);
    let rows = decisions(&json);
    assert_eq!(rows.len(), 4);
    let rate = &rows[3];
    assert_eq!(rate["server"], "guard");
    assert!(rate["identity"].as_str().unwrap().starts_with("guard:"));
    assert_eq!(
        rate["identity"].as_str().unwrap().len(),
        "guard:".len() + 32
    );
    assert_eq!(rate["verdict"], "deny");
    assert_eq!(rate["reason"], "policy.rate_limit");
    assert_eq!(rate["statement"], "rate");
    assert_eq!(rate["represented"], 1);
    assert_eq!(rate["storedAt"], "2026-03-10T12:00:05Z");
    assert_eq!(rate["expiresAt"], "2026-03-10T12:01:03Z");
    assert_eq!(rate["expired"], false);
    assert!(rate["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(rate["current"], Value::Null);
    assert_eq!(rate["recomputable"], false);
    assert_eq!(rate["data"]["reason"], "policy.rate_limit");
    assert_eq!(rate["data"]["retryAfter"], 58);
    let long = &rows[2];
    assert_eq!(long["statement"], "max_messages");
    assert_eq!(long["recomputable"], true);
    assert_eq!(long["expiresAt"], Value::Null);
    assert_eq!(rows[0]["verdict"], "allow");
    assert_eq!(rows[0]["data"], Value::Null);
}

#[test]
fn ls_filters_combine() {
    let f = fixture();
    let servers = |json: &Value| -> Vec<(String, String)> {
        decisions(json)
            .iter()
            .map(|d| {
                (
                    d["server"].as_str().unwrap().to_owned(),
                    d["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
            .collect()
    };
    assert_eq!(
        servers(&f.json("ls", &["--server", "guard", "--now", AT])),
        pairs(&[
            ("guard", "policy.input_too_large"),
            ("guard", "policy.rate_limit")
        ])
    );
    assert_eq!(
        servers(&f.json("ls", &["--verdict", "allow", "--now", AT])),
        pairs(&[("asker", "user.approved")])
    );
    assert_eq!(
        servers(&f.json("ls", &["--reason", "user.denied", "--verdict", "deny"])),
        pairs(&[("asker", "user.denied")])
    );
    assert!(
        decisions(&f.json("ls", &["--reason", "user.denied", "--verdict", "allow"])).is_empty()
    );
    // Expired at 12:02: only the rate denial.
    assert_eq!(
        servers(&f.json("ls", &["--expired", "--now", "2026-03-10T12:02:00Z"])),
        pairs(&[("guard", "policy.rate_limit")])
    );
    assert!(decisions(&f.json("ls", &["--expired", "--now", AT])).is_empty());

    // With the policy unchanged every decision is live.
    let live = f.json("ls", &["--policy", &f.policy, "--now", AT]);
    assert!(decisions(&live).iter().all(|d| d["current"] == true));
    // After the edit, guard's are stale and asker's live.
    assert_eq!(
        servers(&f.json("ls", &["--policy", &f.edited, "--stale"])),
        pairs(&[
            ("guard", "policy.input_too_large"),
            ("guard", "policy.rate_limit")
        ])
    );
    let live = f.json("ls", &["--policy", &f.edited, "--live"]);
    assert_eq!(
        servers(&live),
        pairs(&[("asker", "user.approved"), ("asker", "user.denied")])
    );
    assert!(decisions(&live).iter().all(|d| d["current"] == true));
    let stdout = f.stdout("ls", &["--policy", &f.edited, "--now", AT]);
    assert!(stdout.lines().next().unwrap().ends_with("CURRENT"));
    assert_eq!(stdout.matches("  stale").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("  yes").count(), 2, "{stdout}");

    // --stale needs --policy; --stale and --live exclude each other.
    let stderr = f.fails(2, "ls", &["--stale"]);
    assert!(stderr.contains("--policy"), "{stderr}");
    f.fails(2, "ls", &["--policy", &f.policy, "--stale", "--live"]);
    // Nothing matching is not an error for ls.
    let stdout = f.stdout("ls", &["--server", "nobody"]);
    assert_eq!(stdout.trim(), "no stored decisions match");
}

#[test]
fn show_prints_everything_about_one_decision() {
    let f = fixture();
    let all = f.json("ls", &[]);
    let identity = decisions(&all)[3]["identity"].as_str().unwrap().to_owned();
    let stdout = f.stdout("show", &[&identity, "--policy", &f.policy, "--now", AT]);
    let field = |name: &str| -> String {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l[name.len()..].trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    assert_eq!(field("server"), "guard");
    assert_eq!(field("identity"), identity);
    assert_eq!(field("verdict"), "deny");
    assert_eq!(field("reason"), "policy.rate_limit");
    assert_eq!(field("statement"), "rate");
    assert_eq!(field("represented"), "1");
    assert!(field("digest").starts_with("sha256:"));
    assert_eq!(field("recomputable"), "no");
    assert!(field("current").starts_with("yes"));
    assert!(
        stdout.contains("stored at     2026-03-10T12:00:05Z"),
        "{stdout}"
    );
    assert!(
        stdout.contains("expires at    2026-03-10T12:01:03Z"),
        "{stdout}"
    );
    // The data JSON, pretty-printed, its lines aligned under the values.
    assert!(stdout.contains("data          {\n"), "{stdout}");
    assert!(
        stdout.contains("\n                \"retryAfter\": 58,\n"),
        "{stdout}"
    );

    let json = f.json("show", &[&identity, "--now", "2026-03-10T12:05:00Z"]);
    assert_eq!(json["identity"], identity.as_str());
    assert_eq!(json["server"], "guard");
    assert_eq!(json["statement"], "rate");
    assert_eq!(json["expired"], true);
    assert_eq!(json["current"], Value::Null);
    assert_eq!(
        json["data"],
        serde_json::json!({"reason": "policy.rate_limit", "server": "guard", "retryable": true, "retryAfter": 58})
    );

    let (code, stdout, stderr) = f.run("show", &["guard:00000000000000000000000000000000"]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(
        stderr.contains("no stored decision for identity"),
        "{stderr}"
    );
}

#[test]
fn forget_asks_for_yes_before_removing_more_than_one() {
    let f = fixture();
    // Nothing selected at all is a usage error.
    f.fails(2, "forget", &[]);
    // Two match: refused, nothing removed, the count named.
    let (code, stdout, stderr) = f.run("forget", &["--server", "guard"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("2 stored decisions match"), "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(decisions(&f.json("ls", &[])).len(), 4);
    // Nothing matches: exit 1.
    let stderr = f.fails(1, "forget", &["--reason", "no.such"]);
    assert!(stderr.contains("nothing removed"), "{stderr}");
    // One matches: removed without --yes, and said so.
    let stdout = f.stdout("forget", &["--reason", "user.denied"]);
    assert!(stdout.starts_with("removed 1 stored decision;"), "{stdout}");
    assert!(
        stdout.contains("asker") && stdout.contains("user.denied"),
        "{stdout}"
    );
    assert_eq!(decisions(&f.json("ls", &[])).len(), 3);
    // With --yes, both of guard's go, listed in JSON.
    let json = f.json("forget", &["--server", "guard", "--yes"]);
    let removed = json["removed"].as_array().unwrap();
    assert_eq!(removed.len(), 2);
    assert_eq!(removed[0]["reason"], "policy.input_too_large");
    assert_eq!(removed[1]["reason"], "policy.rate_limit");
    assert_eq!(removed[1]["represented"], 1);
    let left = f.json("ls", &[]);
    assert_eq!(decisions(&left).len(), 1);
    assert_eq!(decisions(&left)[0]["reason"], "user.approved");
    // By identity.
    let identity = decisions(&left)[0]["identity"].as_str().unwrap().to_owned();
    let json = f.json("forget", &["--identity", &identity]);
    assert_eq!(json["removed"][0]["identity"], identity.as_str());
    assert!(decisions(&f.json("ls", &[])).is_empty());
}

#[test]
fn budgets_show_spend_what_remains_and_the_reset() {
    let f = fixture();
    let stdout = f.stdout("budgets", &["--policy", &f.policy, "--now", AT]);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][..3], ["SERVER", "STATEMENT", "LIMIT"]);
    assert_eq!(
        lines[1..].to_vec(),
        [
            vec![
                "asker",
                "rate",
                "2",
                "per",
                "1m",
                "2",
                "requests",
                "1m",
                "2",
                "0",
                "2026-03-10T12:01:01Z",
                "2026-03-10T12:01:01Z"
            ],
            vec![
                "asker",
                "budget",
                "5",
                "requests",
                "per",
                "day",
                "5",
                "requests",
                "daily",
                "1",
                "4",
                "2026-03-11T00:00:00Z",
                "now"
            ],
            vec![
                "guard",
                "rate",
                "2",
                "per",
                "1m",
                "2",
                "requests",
                "1m",
                "2",
                "0",
                "2026-03-10T12:01:03Z",
                "2026-03-10T12:01:03Z"
            ],
            vec![
                "guard",
                "budget",
                "5",
                "requests",
                "per",
                "day",
                "5",
                "requests",
                "daily",
                "2",
                "3",
                "2026-03-11T00:00:00Z",
                "now"
            ],
        ]
    );

    let json = f.guard_budgets("2026-03-10T12:01:30Z");
    assert_eq!(json["now"], "2026-03-10T12:01:30Z");
    let servers = json["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["server"], "guard");
    assert!(
        servers[0]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let limits = servers[0]["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2);
    // 12:01:30: the admissions at 12:00:03 and 12:00:04 have left the minute.
    let rate = &limits[0];
    assert_eq!(rate["statement"], "rate");
    assert_eq!(rate["limit"], "2 requests");
    assert_eq!(rate["window"], "1m");
    assert_eq!(rate["max"], 2);
    assert_eq!(rate["spent"], 0);
    assert_eq!(rate["remaining"], 2);
    assert_eq!(rate["resetsAt"], Value::Null);
    assert_eq!(rate["availableAt"], Value::Null);
    let budget = &limits[1];
    assert_eq!(budget["statement"], "budget:0");
    assert_eq!(budget["limit"], "5 requests");
    assert_eq!(budget["window"], "daily");
    assert_eq!(budget["spent"], 2);
    assert_eq!(budget["remaining"], 3);
    assert_eq!(budget["resetsAt"], "2026-03-11T00:00:00Z");
    assert_eq!(budget["availableAt"], Value::Null);
    // The next day the budget is whole again.
    let json = f.guard_budgets("2026-03-11T00:00:00Z");
    assert_eq!(json["servers"][0]["limits"][1]["spent"], 0);
    assert_eq!(
        json["servers"][0]["limits"][1]["resetsAt"],
        "2026-03-12T00:00:00Z"
    );
    // --policy is required.
    f.fails(2, "budgets", &[]);
}

#[test]
fn stats_list_denials_retry_loops_and_size() {
    let f = fixture();
    let stdout = f.stdout("stats", &[]);
    // 8 rows of rate and budgets, and asker's two prompts on the consent
    // cooldown counter (`docs/spec/evaluation.md`, "Consent cooldown").
    assert!(
        stdout.contains(": 4 decisions, 10 spend rows, "),
        "{stdout}"
    );
    assert!(stdout.contains("most-denied servers"), "{stdout}");
    assert!(
        stdout.contains("highest represented counts (retry loops)"),
        "{stdout}"
    );
    let guard = stdout
        .lines()
        .find(|l| l.starts_with("guard "))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(guard, ["guard", "2", "0", "1", "0"]);

    let json = f.json("stats", &[]);
    assert_eq!(json["size"]["decisions"], 4);
    assert_eq!(json["size"]["spendRows"], 10);
    assert!(json["size"]["bytes"].as_u64().unwrap() > 0);
    let servers = json["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    // Most denied first.
    assert_eq!(servers[0]["server"], "guard");
    assert_eq!(servers[0]["denied"], 2);
    assert_eq!(servers[0]["allowed"], 0);
    assert_eq!(servers[0]["represented"], 1);
    assert_eq!(servers[0]["evicted"], 0);
    assert_eq!(servers[0]["evictedRepresented"], 0);
    assert_eq!(servers[1]["server"], "asker");
    assert_eq!(servers[1]["denied"], 1);
    assert_eq!(servers[1]["allowed"], 1);
    let loops = json["retryLoops"].as_array().unwrap();
    assert_eq!(loops.len(), 1);
    assert_eq!(loops[0]["server"], "guard");
    assert_eq!(loops[0]["reason"], "policy.rate_limit");
    assert_eq!(loops[0]["statement"], "rate");
    assert_eq!(loops[0]["represented"], 1);
    assert_eq!(loops[0]["storedAt"], "2026-03-10T12:00:05Z");
}

#[test]
fn prune_drops_expired_decisions_old_spend_and_with_a_policy_stale_ones() {
    let f = fixture();
    // Nothing has expired yet.
    let json = f.json("prune", &["--now", AT]);
    assert_eq!(json["expiredDecisions"], 0);
    assert_eq!(json["spendRows"], 0);
    assert_eq!(json["stale"], Value::Null);
    // Ten minutes on: the rate denial has expired, and the four rate spend
    // rows of both servers (kept a minute past their window) go; the
    // day's budget spend stays.
    let stdout = f.stdout("prune", &["--now", "2026-03-10T12:10:00Z"]);
    assert_eq!(
        stdout,
        "removed 1 expired decision and 4 spend rows past their retention\n"
    );
    let left = f.json("ls", &[]);
    assert_eq!(decisions(&left).len(), 3);
    let budgets = f.guard_budgets("2026-03-10T12:10:00Z");
    assert_eq!(budgets["servers"][0]["limits"][1]["spent"], 2);
    // With the edited policy, guard's remaining decision is stale: prune
    // --policy says so and deletes nothing without --yes (the policy may
    // be another one sharing the store).
    let stderr = f.fails(
        2,
        "prune",
        &["--policy", &f.edited, "--now", "2026-03-10T12:10:00Z"],
    );
    assert!(
        stderr.contains("1 stale decision in 1 server: guard (1); pass --yes"),
        "{stderr}"
    );
    assert_eq!(decisions(&f.json("ls", &[])).len(), 3, "nothing deleted");
    let json = f.json(
        "prune",
        &[
            "--policy",
            &f.edited,
            "--now",
            "2026-03-10T12:10:00Z",
            "--yes",
        ],
    );
    assert_eq!(json["expiredDecisions"], 0);
    assert_eq!(
        json["stale"],
        serde_json::json!([{"server": "guard", "removed": 1}])
    );
    let left = f.json("ls", &[]);
    assert!(decisions(&left).iter().all(|d| d["server"] == "asker"));
    assert_eq!(decisions(&left).len(), 2);
    let stdout = f.stdout("prune", &["--policy", &f.edited, "--yes"]);
    assert!(stdout.contains("removed 0 stale decisions"), "{stdout}");
    // Nothing stale: nothing to confirm, so no --yes is needed.
    let stdout = f.stdout("prune", &["--policy", &f.edited]);
    assert!(stdout.contains("removed 0 stale decisions"), "{stdout}");
}

#[test]
fn a_bad_store_spec_is_a_usage_error() {
    let f = fixture();
    let missing = f.path("none.sqlite3");
    for (spec, says) in [
        ("redis://localhost/0", "unknown store scheme `redis://`"),
        (missing.as_str(), "no decision store at"),
    ] {
        let (code, _, stderr) = store(spec, "ls", &[]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    assert!(
        !std::path::Path::new(&missing).exists(),
        "inspecting never creates a store"
    );
    let garbage = f.file("garbage", "not a database at all, not even close....");
    let (code, _, stderr) = store(&garbage, "stats", &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("corrupt"), "{stderr}");
    let stderr = f.fails(2, "ls", &["--now", "yesterday"]);
    assert!(stderr.contains("RFC 3339"), "{stderr}");
}

#[test]
fn help_documents_the_exit_codes() {
    for sub in ["ls", "show", "forget", "budgets", "stats", "prune"] {
        let (code, help, _) = mcpc(&["store", sub, "--help"]);
        assert_eq!(code, 0);
        assert!(
            help.contains(
                "Exit codes: 0 ok; 1 nothing matched (show, forget); 2 usage or store error"
            ),
            "{sub}: {help}"
        );
        assert!(help.contains("--store <SPEC>"), "{sub}: {help}");
        assert!(help.contains("--format <FORMAT>"), "{sub}: {help}");
    }
}
