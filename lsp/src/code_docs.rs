//! What a diagnostic's code adds to it in the editor: a link to the code's
//! explanation (`codeDescription`) and the tags editors render (an unused
//! reason faded, a deprecated scope struck through).
//!
//! The links go to a page whose `#anchor`s are the codes: `docs/codes.md`
//! rendered. Which page is the `codeDocsUrl` setting (`crate::settings`),
//! kept as a salsa input ([`CodeDocs`]) so that a change to it cancels the
//! checks in flight, whose diagnostics would carry the old links. Until a
//! setting or the build names a page, diagnostics carry no link: the
//! project has no published home for the page yet, and a link to a guessed
//! one would be broken (the explanation itself is `mcpc explain CODE`, and
//! the hover over a code).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use lsp_types::{CodeDescription, DiagnosticTag, Uri};
use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::ide::docs::code_anchor;

/// The page the links go to when no setting names one: the build's
/// `MCPOLICY_CODE_DOCS_URL` if it set one (a packager who publishes the
/// page), else none, and diagnostics carry no `codeDescription`.
pub const DEFAULT_PAGE: Option<&str> = option_env!("MCPOLICY_CODE_DOCS_URL");

/// The page of code explanations, with the link of each code into it
/// (parsed once per page, not per finding: a file can have thousands).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodesPage {
    /// `None`: no page, no links.
    url: Option<String>,
    links: HashMap<Code, Uri>,
}

impl CodesPage {
    /// The page at `url`: an absolute URI without a `#fragment` (the
    /// anchors are added to it).
    pub fn parse(url: &str) -> Result<CodesPage, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("`{url}` is not a URL ({e})"))?;
        if uri.scheme().is_none() {
            return Err(format!(
                "`{url}` is not an absolute URL (it has no scheme such as https:)"
            ));
        }
        if uri.fragment().is_some() {
            return Err(format!(
                "`{url}` has a `#fragment`; name the page, its anchors are the codes"
            ));
        }
        let mut links = HashMap::new();
        for &code in Code::ALL {
            let href = format!("{url}#{}", code_anchor(code));
            let link = href
                .parse::<Uri>()
                .map_err(|e| format!("`{href}` is not a URL ({e})"))?;
            links.insert(code, link);
        }
        Ok(CodesPage {
            url: Some(url.to_owned()),
            links,
        })
    }

    /// No page: diagnostics carry no link.
    pub fn none() -> CodesPage {
        CodesPage {
            url: None,
            links: HashMap::new(),
        }
    }

    /// The default page, [`DEFAULT_PAGE`], or none. Should the build have
    /// set a page that is not a URL, its diagnostics carry no link rather
    /// than a broken one.
    pub fn built_in() -> Arc<CodesPage> {
        static BUILT_IN: LazyLock<Arc<CodesPage>> = LazyLock::new(|| {
            Arc::new(
                DEFAULT_PAGE
                    .and_then(|url| CodesPage::parse(url).ok())
                    .unwrap_or_else(CodesPage::none),
            )
        });
        Arc::clone(&BUILT_IN)
    }

    /// The page's URL, as the setting gave it; `None` for no page.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// The link to `code`'s section of the page, as the LSP wants it.
    pub fn description(&self, code: Code) -> Option<CodeDescription> {
        self.links
            .get(&code)
            .map(|href| CodeDescription { href: href.clone() })
    }
}

/// The page the diagnostics of this session link to; absent until a
/// setting names one ([`page`] then gives [`CodesPage::built_in`]).
#[salsa::input(singleton, debug)]
pub struct CodeDocs {
    /// The page.
    #[returns(ref)]
    pub page: Arc<CodesPage>,
}

/// The page the diagnostics link to now.
pub fn page(db: &dyn salsa::Database) -> Arc<CodesPage> {
    match CodeDocs::try_get(db) {
        Some(docs) => Arc::clone(docs.page(db)),
        None => CodesPage::built_in(),
    }
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

    /// Without a page named at build time, no diagnostic links anywhere
    /// (there is no published page to link to); with one, every code links
    /// to its anchor in it.
    #[test]
    fn the_built_in_page_links_every_code_only_when_the_build_names_one() {
        let page = CodesPage::built_in();
        assert_eq!(page.url(), DEFAULT_PAGE);
        for code in Code::ALL {
            let href = page.description(*code).map(|d| d.href.as_str().to_owned());
            let expected =
                DEFAULT_PAGE.map(|url| format!("{url}#{}", code.as_str().to_ascii_lowercase()));
            assert_eq!(href, expected, "{code}");
        }
    }

    #[test]
    fn a_page_must_be_an_absolute_url_without_a_fragment() {
        for bad in [
            "",
            "docs/codes.md",
            "https://example.org/codes#top",
            "https://exa mple.org/",
        ] {
            assert!(CodesPage::parse(bad).is_err(), "{bad:?} accepted");
        }
        let page =
            CodesPage::parse("https://docs.example.org/mcpolicy/codes.html").expect("a page");
        assert_eq!(
            page.description(Code::E0203).expect("a link").href.as_str(),
            "https://docs.example.org/mcpolicy/codes.html#e0203"
        );
        assert!(CodesPage::parse("file:///usr/share/doc/mcpolicy/codes.html").is_ok());
    }
}
