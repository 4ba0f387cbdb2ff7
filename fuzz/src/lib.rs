//! The bodies of mcpolicy's fuzz targets, as plain functions over bytes.
//!
//! Each target is a `fn(&[u8])` that panics when an invariant breaks. The
//! libFuzzer binaries in `fuzz_targets/` (built by `fuzz/run.sh` with
//! coverage instrumentation) call them, and so does `tests/replay.rs`, which
//! runs every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`
//! through the same function in `cargo test --workspace`: a crash once found
//! stays a regression test without libFuzzer. See `fuzz/README.md`.

pub mod bytes;
pub mod lsp;
pub mod policy;
pub mod proxy;
pub mod readers;
pub mod request;

/// A fuzz target: its name (the binary, the corpus directory) and its body.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The binary's name and the directory under `corpus/` and `regressions/`.
    pub name: &'static str,
    /// Panics when an invariant breaks.
    pub run: fn(&[u8]),
}

/// Every target, in the order `fuzz/run.sh` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "policy_check",
        run: policy::check,
    },
    Target {
        name: "policy_ide",
        run: policy::ide,
    },
    Target {
        name: "policy_fmt",
        run: policy::fmt,
    },
    Target {
        name: "request",
        run: request::run,
    },
    Target {
        name: "proxy",
        run: proxy::run,
    },
    Target {
        name: "reader_differential",
        run: readers::run,
    },
    Target {
        name: "lsp_transport",
        run: lsp::run,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}
