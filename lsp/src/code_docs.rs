//! What a diagnostic's code adds to it in the editor: a link to the code's
//! explanation (`codeDescription`) and the tags editors render (an unused
//! reason faded, a deprecated scope struck through).

use std::collections::HashMap;
use std::sync::LazyLock;

use lsp_types::{CodeDescription, DiagnosticTag, Uri};
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::ide::docs::code_anchor;

/// Where `docs/codes.md` is published: the workspace's `repository` (root
/// `Cargo.toml`) followed by `/blob/main/docs/codes.md`, the path a
/// GitHub- or GitLab-style host serves the file at on the main branch.
pub const CODES_PAGE: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/codes.md");

/// The link to `code`'s section of `docs/codes.md`.
pub fn href(code: Code) -> String {
    format!("{CODES_PAGE}#{}", code_anchor(code))
}

/// `href` as the LSP wants it (`None` only if the repository URL in
/// `Cargo.toml` is not a URI). Parsed once per code, not per finding: a
/// file can have thousands.
pub fn description(code: Code) -> Option<CodeDescription> {
    static LINKS: LazyLock<HashMap<Code, Uri>> = LazyLock::new(|| {
        Code::ALL
            .iter()
            .filter_map(|&code| href(code).parse::<Uri>().ok().map(|uri| (code, uri)))
            .collect()
    });
    LINKS
        .get(&code)
        .map(|href| CodeDescription { href: href.clone() })
}

/// `Unnecessary` on findings about text that does nothing (an unused
/// reason, a statement with no effect, a server block no request reaches),
/// which editors fade; `Deprecated` on a deprecated context scope.
pub fn tags(code: Code) -> Option<Vec<DiagnosticTag>> {
    match code {
        Code::W0410 | Code::W0604 | Code::E0302 => Some(vec![DiagnosticTag::UNNECESSARY]),
        Code::W0601 => Some(vec![DiagnosticTag::DEPRECATED]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_link_into_the_codes_page() {
        for code in Code::ALL {
            let description = description(*code).expect("a URI");
            assert!(
                description.href.as_str().ends_with(&format!(
                    "docs/codes.md#{}",
                    code.as_str().to_ascii_lowercase()
                )),
                "{}",
                description.href.as_str()
            );
        }
    }
}
