//! The random-edit harness shared by the tests that compare the editor's
//! per-piece analyses with a whole-file one (`per_block_check.rs`,
//! `per_piece_features.rs`): the policies edited, what edits insert, and how
//! an edit is applied.

use proptest::prelude::ProptestConfig;

#[path = "../../examples/gen_policy.rs"]
#[allow(dead_code)]
pub mod gen_policy;

pub fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

pub fn examples() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut texts: Vec<String> = ["team-gateway", "cost-capped", "ci-agent", "personal-laptop"]
        .iter()
        .map(|name| {
            std::fs::read_to_string(root.join(format!("examples/{name}.mcpolicy"))).unwrap()
        })
        .collect();
    texts.push(gen_policy::generate(gen_policy::Options {
        servers: 40,
        seed: 7,
        globs_percent: 20,
    }));
    texts
}

/// What edits insert: what changes a block's findings, what every block
/// reads (protocol, reasons declared or removed), what breaks structure.
pub const SNIPPETS: &[&str] = &[
    "",
    "x",
    "\n",
    "{",
    "}",
    "\"",
    "# c\n",
    "\nprotocol 2025-06-18\n",
    "\nprotocol 2026-07-28\n",
    "\nreason acme.new { retryable false; ttl forever }\n",
    "reason ",
    " as acme.new",
    " as policy.rate_limit",
    "\n  tools on\n",
    "\n  max_context thisServer\n",
    "\n  sampling off\n",
    "\n  max_tokens 0\n",
    "\n  max_tokens 5\n",
    "\nserver \"team-*\" {\n  budget 5 tokens per day as acme.offline\n}\n",
    "\ndefaults {\n  rate 1 per 1s\n}\n",
    "😀",
    // Suppressions: the file-level rules read the statements of a block
    // that holds one (`db::analyze_pieces`).
    "\n  # mcpolicy: allow W0604\n",
    "\n# mcpolicy: allow W0410, W0305 -- why\n",
    " # mcpolicy: allow W0604",
    "\n  # mcpolicy: nothing\n",
    // `tools` sharing a reason (E0413): read from effective blocks.
    "\n  tools off as acme.new\n",
    "\n  tools off as policy.rate_limit\n",
];

/// Replaces `len` chars at about `at` of `text` by `insert`.
pub fn edited(text: &str, at: f64, len: usize, insert: &str) -> String {
    let mut start = (text.len() as f64 * at) as usize;
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let end = text[start..]
        .char_indices()
        .nth(len)
        .map_or(text.len(), |(i, _)| start + i);
    let mut out = text.to_owned();
    out.replace_range(start..end, insert);
    out
}
