//! The client's settings (`initializationOptions` and
//! `workspace/didChangeConfiguration`), read into the compiler's
//! [`EditorSettings`] input. Both take the same object, either bare or under
//! a `mcpolicy` key (VS Code sends its configuration section that way):
//!
//! ```json
//! { "mcpolicy": { "denyWarnings": true, "protocol": "2026-07-28" } }
//! ```
//!
//! A setting left out keeps its value; `null` restores the default.

use lsp_types::{ClientCapabilities, InitializeParams};
use mcpolicy_compiler::ide::settings::{EditorSettings, ProtocolRevision};
use mcpolicy_compiler::line_index::Encoding;
use salsa::Setter;
use serde_json::Value;

use crate::world::World;

/// What a settings object asks for: for each setting, `None` when it is not
/// mentioned, `Some(value)` otherwise.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// `denyWarnings`.
    pub deny_warnings: Option<bool>,
    /// `protocol`: `Some(None)` for `null`, the language's default.
    pub protocol: Option<Option<ProtocolRevision>>,
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
    Ok(change)
}

/// Applies a settings object to the world; every open document is checked
/// again (its diagnostics depend on the settings). An unreadable object
/// changes nothing and says why.
pub fn apply(world: &mut World, value: &Value) -> Result<(), String> {
    let change = read(value)?;
    if change == Change::default() {
        return Ok(());
    }
    let db = &mut world.db;
    let settings = match EditorSettings::try_get(db) {
        Some(settings) => settings,
        None => EditorSettings::new(db, false, None),
    };
    if let Some(deny) = change.deny_warnings
        && settings.deny_warnings(db) != deny
    {
        settings.set_deny_warnings(db).to(deny);
    }
    if let Some(protocol) = change.protocol
        && settings.protocol(db) != protocol
    {
        settings.set_protocol(db).to(protocol);
    }
    let uris: Vec<_> = world.documents.values().map(|d| d.uri.clone()).collect();
    for uri in uris {
        world.touch(&uri);
    }
    Ok(())
}

/// What the client supports, where an answer depends on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientSupport {
    /// Completion items may carry an `InsertReplaceEdit`.
    pub insert_replace: bool,
}

impl ClientSupport {
    /// Read from the `initialize` params' capabilities.
    pub fn of(capabilities: &ClientCapabilities) -> Self {
        let insert_replace = capabilities
            .text_document
            .as_ref()
            .and_then(|t| t.completion.as_ref())
            .and_then(|c| c.completion_item.as_ref())
            .and_then(|i| i.insert_replace_support)
            .unwrap_or(false);
        ClientSupport { insert_replace }
    }
}

/// A fresh world for a client with `params`: its capabilities, and the
/// settings of its `initializationOptions`, if any.
pub fn initial_world(encoding: Encoding, params: &InitializeParams) -> (World, Result<(), String>) {
    let mut world = World::new(encoding);
    world.client = ClientSupport::of(&params.capabilities);
    let options = params.initialization_options.as_ref();
    let outcome = options.map_or(Ok(()), |options| apply(&mut world, options));
    (world, outcome)
}
