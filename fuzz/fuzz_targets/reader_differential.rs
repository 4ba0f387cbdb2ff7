//! libFuzzer entry point for `reader_differential`; the body is
//! `mcpolicy_fuzz::readers::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::readers::run(data));
