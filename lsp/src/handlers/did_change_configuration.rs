//! `workspace/didChangeConfiguration`: the settings of `lsp/README.md`
//! ("Settings"), read by `crate::settings`.
//!
//! A client that pulls diagnostics is pushed none, so it would go on
//! showing findings made under the old settings: when a setting took
//! another value and the client accepts it, the server asks it to pull
//! again (`workspace/diagnostic/refresh`).

use lsp_server::{Request, RequestId};
use lsp_types::DidChangeConfigurationParams;
use lsp_types::request::{Request as _, WorkspaceDiagnosticRefresh};

use crate::world::World;

/// Applies the new settings; every open document is checked again. The
/// `workspace/diagnostic/refresh` request to send the client, if any. An
/// unreadable setting changes nothing and is returned for the log.
pub fn handle(
    world: &mut World,
    params: DidChangeConfigurationParams,
) -> Result<Option<Request>, String> {
    let changed = crate::settings::apply(world, &params.settings)
        .map_err(|why| format!("settings not applied: {why}"))?;
    let refresh = changed && world.pull_diagnostics && world.client.diagnostic_refresh;
    Ok(refresh.then(|| {
        // An id never used before in this session.
        let id = RequestId::from(format!("mcpolicy-lsp/refresh/{}", world.next_result_id()));
        Request::new(
            id,
            WorkspaceDiagnosticRefresh::METHOD.to_owned(),
            serde_json::Value::Null,
        )
    }))
}
