//! The README's `mcpc eval` example, run for real: the request file it shows
//! is the one checked into `examples/requests/`, and the output and exit
//! codes it shows are what `mcpc eval` prints. Once the README carries the
//! example (it names `examples/requests/commit-message.json`), its block
//! must be exactly this transcript.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const REQUEST: &str = "examples/requests/commit-message.json";

/// A terminal's view of one command: the command, what it wrote to stderr,
/// then to stdout, then its exit code.
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .expect("mcpc runs");
    format!(
        "$ mcpc {}\n{}{}$ echo $?\n{}\n",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        out.status.code().expect("exit code")
    )
}

fn transcript() -> String {
    let request = std::fs::read_to_string(root().join(REQUEST)).expect("request file");
    let eval = |consent: &str| {
        run(&[
            "eval",
            "examples/personal-laptop.mcpolicy",
            "--server",
            "git",
            "--request",
            REQUEST,
            "--consent",
            consent,
        ])
    };
    format!(
        "$ cat {REQUEST}\n{request}{}{}{}",
        eval("pending"),
        eval("approve"),
        eval("deny")
    )
}

/// What the README shows (`README.md`, "The command line").
const EXPECTED: &str = r#"$ cat examples/requests/commit-message.json
{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"Write a commit message for the staged diff"}}],"maxTokens":4000}}
$ mcpc eval examples/personal-laptop.mcpolicy --server git --request examples/requests/commit-message.json --consent pending
consent required for git:2f17c43481fa7a53f36b3a8f99d88e8a (answer with --consent approve|deny)
{"consent":"required","identity":"git:2f17c43481fa7a53f36b3a8f99d88e8a","server":"git"}
$ echo $?
0
$ mcpc eval examples/personal-laptop.mcpolicy --server git --request examples/requests/commit-message.json --consent approve
trim, deadline 60000 ms, result _meta {"maxTokens":{"applied":512,"reason":"policy.max_tokens","requested":4000}}
{"id":7,"jsonrpc":"2.0","method":"sampling/createMessage","params":{"maxTokens":512,"messages":[{"content":{"text":"Write a commit message for the staged diff","type":"text"},"role":"user"}]}}
$ echo $?
0
$ mcpc eval examples/personal-laptop.mcpolicy --server git --request examples/requests/commit-message.json --consent deny
deny user.denied (not retryable)
{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"Sampling denied: the user declined the request from server 'git'","data":{"reason":"user.denied","server":"git","retryable":false}}}
$ echo $?
1
"#;

#[test]
fn the_readme_eval_example_is_what_mcpc_prints() {
    assert_eq!(transcript(), EXPECTED);
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    if readme.contains(REQUEST) {
        assert!(
            readme.contains(EXPECTED),
            "README.md's eval example differs from what mcpc prints:\n{EXPECTED}"
        );
    }
}
