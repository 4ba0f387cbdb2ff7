//! Where mcpolicy's time from bytes goes, phase by phase, on the peers
//! bench's own requests (`docs/performance.md`, "Against Cedar and Rego"):
//! each phase timed alone over the same 13,000 (server, request) pairs, in
//! this build of mcpolicy alone. Prints the median of seven passes per
//! phase, in ns per request.
//!
//! ```sh
//! cargo run --release --manifest-path runtime/benches/peers/Cargo.toml -p mcpolicy-peers-alone --bin phases
//! ```
//!
//! With an argument, only the phases whose label starts with it, timed over
//! 200 passes (for `perf record`).

use std::hint::black_box;
use std::time::Instant;

use mcpolicy_peers_alone::{
    REQUESTS, SERVERS, mcpolicy_decide, mcpolicy_engine, mcpolicy_policy, median, request_bytes,
    rules,
};
use mcpolicy_runtime::engine::ClientContext;
use mcpolicy_runtime::request::{self, Limits};
use sha2::{Digest, Sha256};

/// Pairs per pass: every server with every request, as the peers bench.
const PAIRS: usize = SERVERS * REQUESTS;

fn main() {
    let only = std::env::args().nth(1);
    let passes = if only.is_some() { 200 } else { 7 };
    let time = |label: &str, f: &mut dyn FnMut(usize)| {
        if only.as_deref().is_some_and(|only| !label.starts_with(only)) {
            return;
        }
        let mut per_pass: Vec<f64> = (0..passes)
            .map(|_| {
                let start = Instant::now();
                for i in 0..PAIRS {
                    f(i);
                }
                start.elapsed().as_nanos() as f64 / PAIRS as f64
            })
            .collect();
        println!("{label:<44} {:>8.0} ns", median(&mut per_pass));
    };

    let rules = rules();
    let requests: Vec<Vec<u8>> = (0..REQUESTS).map(request_bytes).collect();
    let mean = requests.iter().map(Vec::len).sum::<usize>() / REQUESTS;
    println!("{REQUESTS} requests, {mean} bytes on average; median of {passes} passes");
    let policy = mcpolicy_policy(&rules);
    let protocol = policy.table().protocol;
    let limits = Limits::default();
    let ctx = ClientContext::with_sampling_context(true);
    let bytes = |i: usize| &requests[i % REQUESTS];
    let server = |i: usize| &rules[(i / REQUESTS) % SERVERS].id;
    let parsed: Vec<_> = requests
        .iter()
        .map(|r| request::parse_sampling_for(r, &limits, protocol).expect("a valid request"))
        .collect();
    let engine = mcpolicy_engine(&policy);
    // Every pair decided once: what follows finds its denials stored.
    for i in 0..PAIRS {
        mcpolicy_decide(&engine, server(i), bytes(i), &ctx);
    }

    time("SHA-256 of the request bytes", &mut |i| {
        black_box(Sha256::digest(bytes(i)));
    });
    time("strict parse (parse_strict)", &mut |i| {
        black_box(request::parse_strict(bytes(i)).is_ok());
    });
    time("strict parse, serde_json's reader alone", &mut |i| {
        black_box(request::parse_strict_serde(bytes(i), &limits).is_ok());
    });
    time("parse and validate (parse_sampling_for)", &mut |i| {
        black_box(request::parse_sampling_for(bytes(i), &limits, protocol).is_ok());
    });
    time("a parsed request cloned and dropped", &mut |i| {
        black_box(parsed[i % REQUESTS].clone());
    });
    time("refusal key (Engine::identity)", &mut |i| {
        black_box(engine.identity(server(i), parsed[i % REQUESTS].params()));
    });
    time("decide a parsed request (decide_request)", &mut |i| {
        black_box(
            engine
                .decide_request(server(i), &parsed[i % REQUESTS], &ctx)
                .is_ok(),
        );
    });
    time("decide from bytes (Engine::decide)", &mut |i| {
        black_box(mcpolicy_decide(&engine, server(i), bytes(i), &ctx));
    });
}
