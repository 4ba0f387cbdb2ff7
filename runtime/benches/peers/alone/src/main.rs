//! One round of mcpolicy's timings for the peers binary, in a build of its
//! own (`src/lib.rs` says why): every pair decided fresh on a new memory
//! store, then the denied pairs again (replays of the stored denials),
//! after a warm-up pass on another store. Prints `FRESH_NS REPLAY_NS` and
//! how many pairs were allowed, for the peers binary to check.

use mcpolicy_peers_alone::{
    REQUESTS, mcpolicy_decide, mcpolicy_engine, mcpolicy_policy, pairs, request_bytes, rules,
    time_per_pair,
};
use mcpolicy_runtime::engine::ClientContext;

fn main() {
    let rules = rules();
    let requests: Vec<Vec<u8>> = (0..REQUESTS).map(request_bytes).collect();
    let policy = mcpolicy_policy(&rules);
    let ctx = ClientContext::with_sampling_context(true);
    let pairs = pairs();
    // Warm-up, as the peers binary's agreement pass warms its engine.
    let warm = mcpolicy_engine(&policy);
    let allowed: Vec<bool> = pairs
        .iter()
        .map(|&(s, r)| mcpolicy_decide(&warm, &rules[s].id, &requests[r], &ctx))
        .collect();
    let denied: Vec<(usize, usize)> = pairs
        .iter()
        .zip(&allowed)
        .filter(|(_, allowed)| !**allowed)
        .map(|(pair, _)| *pair)
        .collect();
    let engine = mcpolicy_engine(&policy);
    let fresh = time_per_pair(&pairs, |s, r| {
        mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
    });
    let replay = time_per_pair(&denied, |s, r| {
        mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
    });
    let allowed = allowed.iter().filter(|a| **a).count();
    println!("{fresh:.1} {replay:.1} {allowed}");
}
