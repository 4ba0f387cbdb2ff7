//! The client's settings (`initializationOptions` and
//! `workspace/didChangeConfiguration`), read into the compiler's
//! [`EditorSettings`] input. Both take the same object, either bare or under
//! a `mcpolicy` key (VS Code sends its configuration section that way):
//!
//! ```json
//! { "mcpolicy": { "denyWarnings": true, "protocol": "2026-07-28",
//!                 "codeDocsUrl": "https://docs.example.org/mcpolicy/codes.html" } }
//! ```
//!
//! A setting left out keeps its value; `null` restores the default.

use std::sync::Arc;

use lsp_types::{ClientCapabilities, InitializeParams};
use mcpolicy_compiler::ide::settings::{EditorSettings, ProtocolRevision};
use mcpolicy_compiler::line_index::Encoding;
use salsa::Setter;
use serde_json::Value;

use crate::code_docs::{CodeDocs, CodesPage};
use crate::world::World;

/// The settings [`read`] knows, by the name a client sends.
pub const NAMES: &[&str] = &["denyWarnings", "protocol", "codeDocsUrl"];

/// What a settings object asks for: for each setting, `None` when it is not
/// mentioned, `Some(value)` otherwise.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// `denyWarnings`.
    pub deny_warnings: Option<bool>,
    /// `protocol`: `Some(None)` for `null`, the language's default.
    pub protocol: Option<Option<ProtocolRevision>>,
    /// `codeDocsUrl`: `Some(None)` for `null`, the built-in page.
    pub code_docs: Option<Option<CodesPage>>,
}

/// Reads a settings object; unknown keys are ignored (a client may send
/// its whole configuration), a known key with a wrong value is an error
/// naming it.
pub fn read(value: &Value) -> Result<Change, String> {
    let object = match value.get("mcpolicy") {
        Some(inner) => inner,
        None => value,
    };
    let mut change = Change::default();
    let Some(object) = object.as_object() else {
        return Ok(change);
    };
    match object.get("denyWarnings") {
        None => {}
        Some(Value::Null) => change.deny_warnings = Some(false),
        Some(Value::Bool(b)) => change.deny_warnings = Some(*b),
        Some(other) => return Err(format!("`denyWarnings` must be true or false, not {other}")),
    }
    match object.get("protocol") {
        None => {}
        Some(Value::Null) => change.protocol = Some(None),
        Some(Value::String(s)) => match ProtocolRevision::parse(s) {
            Some(revision) => change.protocol = Some(Some(revision)),
            None => {
                let known: Vec<&str> = ProtocolRevision::ALL.iter().map(|r| r.as_str()).collect();
                return Err(format!(
                    "`protocol` must be one of {} (or null), not `{s}`",
                    known.join(", ")
                ));
            }
        },
        Some(other) => return Err(format!("`protocol` must be a revision date, not {other}")),
    }
    match object.get("codeDocsUrl") {
        None => {}
        Some(Value::Null) => change.code_docs = Some(None),
        Some(Value::String(url)) => match CodesPage::parse(url) {
            Ok(page) => change.code_docs = Some(Some(page)),
            Err(why) => return Err(format!("`codeDocsUrl`: {why}")),
        },
        Some(other) => {
            return Err(format!(
                "`codeDocsUrl` must be a URL (or null), not {other}"
            ));
        }
    }
    Ok(change)
}

/// Applies a settings object to the world; whether a setting took another
/// value. Then every open document is checked again (its diagnostics
/// depend on the settings). An unreadable object changes nothing and says
/// why.
pub fn apply(world: &mut World, value: &Value) -> Result<bool, String> {
    let change = read(value)?;
    if change == Change::default() {
        return Ok(false);
    }
    let mut changed = false;
    let db = &mut world.db;
    let settings = match EditorSettings::try_get(db) {
        Some(settings) => settings,
        None => EditorSettings::new(db, false, None),
    };
    if let Some(deny) = change.deny_warnings
        && settings.deny_warnings(db) != deny
    {
        settings.set_deny_warnings(db).to(deny);
        changed = true;
    }
    if let Some(protocol) = change.protocol
        && settings.protocol(db) != protocol
    {
        settings.set_protocol(db).to(protocol);
        changed = true;
    }
    if let Some(page) = change.code_docs {
        let page = page.map_or_else(CodesPage::built_in, Arc::new);
        if *crate::code_docs::page(db) != *page {
            match CodeDocs::try_get(db) {
                Some(docs) => {
                    docs.set_page(db).to(page);
                }
                None => {
                    CodeDocs::new(db, page);
                }
            }
            changed = true;
        }
    }
    let uris: Vec<_> = world.documents.values().map(|d| d.uri.clone()).collect();
    for uri in uris {
        world.touch(&uri);
    }
    Ok(changed)
}

/// The settings the findings of a document depend on, as text: a pulled
/// report's result id includes them, so that a client whose settings
/// changed is never answered `unchanged` with a report made under the old
/// ones.
pub fn fingerprint(db: &dyn salsa::Database) -> String {
    let (deny, protocol) = match EditorSettings::try_get(db) {
        Some(settings) => (settings.deny_warnings(db), settings.protocol(db)),
        None => (false, None),
    };
    let protocol = protocol.map_or("default", |p| p.as_str());
    format!(
        "denyWarnings={deny} protocol={protocol} codeDocsUrl={}",
        crate::code_docs::page(db).url().unwrap_or("null")
    )
}

/// What the client supports, where an answer depends on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientSupport {
    /// Completion items may carry an `InsertReplaceEdit`.
    pub insert_replace: bool,
    /// The client accepts `workspace/diagnostic/refresh`
    /// (`workspace.diagnostics.refreshSupport`): a client that pulls is
    /// asked to pull again when the settings change the findings.
    pub diagnostic_refresh: bool,
}

impl ClientSupport {
    /// Read from the `initialize` params' capabilities; `raw` is those
    /// params as sent, for what lsp-types does not read.
    pub fn of(capabilities: &ClientCapabilities, raw: &Value) -> Self {
        let insert_replace = capabilities
            .text_document
            .as_ref()
            .and_then(|t| t.completion.as_ref())
            .and_then(|c| c.completion_item.as_ref())
            .and_then(|i| i.insert_replace_support)
            .unwrap_or(false);
        // The protocol spells it `workspace.diagnostics`; lsp-types 0.97
        // reads `workspace.diagnostic`, which no client sends. Both count.
        let diagnostic_refresh = raw
            .pointer("/capabilities/workspace/diagnostics/refreshSupport")
            .and_then(Value::as_bool)
            .or_else(|| {
                capabilities
                    .workspace
                    .as_ref()
                    .and_then(|w| w.diagnostic.as_ref())
                    .and_then(|d| d.refresh_support)
            })
            .unwrap_or(false);
        ClientSupport {
            insert_replace,
            diagnostic_refresh,
        }
    }
}

/// A fresh world for a client with `params` (`raw` as sent): its
/// capabilities, and the settings of its `initializationOptions`, if any.
pub fn initial_world(
    encoding: Encoding,
    params: &InitializeParams,
    raw: &Value,
) -> (World, Result<(), String>) {
    let mut world = World::new(encoding);
    world.client = ClientSupport::of(&params.capabilities, raw);
    let options = params.initialization_options.as_ref();
    let outcome = options.map_or(Ok(()), |options| apply(&mut world, options).map(drop));
    (world, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name in [`NAMES`] is read (a wrong value is an error naming
    /// it), and nothing else is: a known key left out of the list fails.
    #[test]
    fn names_are_the_settings_read() {
        for name in NAMES {
            let why = read(&serde_json::json!({ *name: 42 })).expect_err(name);
            assert!(why.contains(&format!("`{name}`")), "{why}");
        }
        let unknown = serde_json::json!({ "denyWarning": 42, "codeDocsURL": 42 });
        assert_eq!(read(&unknown), Ok(Change::default()));
    }
}
