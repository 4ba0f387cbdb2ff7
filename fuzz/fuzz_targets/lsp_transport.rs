//! libFuzzer entry point for `lsp_transport`; the body is `mcpolicy_fuzz::lsp::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpolicy_fuzz::lsp::run(data));
