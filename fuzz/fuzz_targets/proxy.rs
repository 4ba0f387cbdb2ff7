//! libFuzzer entry point for `proxy`; the body is `mcpolicy_fuzz::proxy::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::proxy::run(data));
