//! `workspace/didChangeConfiguration`: the settings of `lsp/README.md`
//! ("Settings"), read by `crate::settings`.

use lsp_types::DidChangeConfigurationParams;

use crate::world::World;

/// Applies the new settings; every open document is checked again. An
/// unreadable setting changes nothing and is returned for the log.
pub fn handle(world: &mut World, params: DidChangeConfigurationParams) -> Result<(), String> {
    crate::settings::apply(world, &params.settings)
        .map_err(|why| format!("settings not applied: {why}"))
}
