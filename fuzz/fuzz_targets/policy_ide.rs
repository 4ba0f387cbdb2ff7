//! libFuzzer entry point for `policy_ide`; the body is `mcpolicy_fuzz::policy::ide`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::policy::ide(data));
