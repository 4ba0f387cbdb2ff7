//! The reader differential as a property in `cargo test`
//! (`mcpolicy_fuzz::readers`; the fuzz target `reader_differential` runs
//! the same body under libFuzzer): for random smuggling scripts, every
//! client reader model frames the proxy's output exactly as the proxy
//! wrote it, and sees no sampling request that was not decided.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_reader_reads_what_the_proxy_decided(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        mcpolicy_fuzz::readers::run(&data);
    }
}

/// The smuggle of the threat model's row, spelt out: a notification whose
/// params are a whole sampling request between lone CRs, under `sampling
/// off`, for each separator a reader honours.
#[test]
fn the_lone_cr_smuggle_is_read_as_one_frame_by_every_reader() {
    for separator in ["\r", "\r\r", "\u{2028}", "\u{85}"] {
        let request = r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"x\u2028y"}}],"maxTokens":10}}"#;
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{separator}{request}{separator}}}\n"
        );
        let (out, audit) = mcpolicy_fuzz::readers::proxy("off", line.as_bytes());
        mcpolicy_fuzz::readers::check("off", &out, &audit);
    }
}
