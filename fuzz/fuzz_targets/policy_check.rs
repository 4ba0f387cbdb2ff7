//! libFuzzer entry point for `policy_check`; the body is `mcpolicy_fuzz::policy::check`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::policy::check(data));
