//! libFuzzer entry point for `request`; the body is `mcpolicy_fuzz::request::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::request::run(data));
