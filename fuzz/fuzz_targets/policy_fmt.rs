//! libFuzzer entry point for `policy_fmt`; the body is `mcpolicy_fuzz::policy::fmt`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::policy::fmt(data));
