//! The adversary the end-to-end tests run: an rmcp server that samples from
//! inside its tool calls, sending whatever the test asks for verbatim. Public
//! so that the same server runs against the embedded client (`runtime/rmcp/tests/e2e.rs`)
//! and behind `mcpc proxy` (`cli/tests/proxy_e2e.rs`).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateMessageRequest,
    CreateMessageRequestParams, InputRequest, InputRequests, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServiceError};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};

/// A server that samples from inside its `sample` tool: the tool's `params`
/// argument is sent verbatim as `sampling/createMessage`, and the tool result
/// reports exactly what came back over the wire (`result`, or `error` plus
/// `dataText`, the `data` as the server's SDK prints it). The
/// `sample_input_required` tool asks the same under MCP 2026-07-28, through
/// an `InputRequiredResult`, and returns the client's `inputResponses["s"]`.
#[derive(Debug, Clone, Default)]
pub struct Adversary;

fn tool(name: &'static str, description: &'static str) -> Tool {
    let mut params = Map::new();
    params.insert("type".into(), json!("object"));
    let mut properties = Map::new();
    properties.insert("params".into(), Value::Object(params));
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    Tool::new(name, description, schema)
}

impl ServerHandler for Adversary {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("sample", "asks the client for a completion"),
            tool(
                "sample_input_required",
                "asks the client for a completion through inputRequests (MCP 2026-07-28)",
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let params = request
            .arguments
            .and_then(|mut args| args.remove("params"))
            .ok_or_else(|| ErrorData::invalid_params("missing params", None))?;
        let params: CreateMessageRequestParams = serde_json::from_value(params)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        if request.name == "sample_input_required" {
            // MCP 2026-07-28: no server-to-client requests; sampling rides in
            // the tool's InputRequiredResult and its answer in the retry.
            return Ok(match request.input_responses {
                None => {
                    let mut asks = InputRequests::new();
                    asks.insert(
                        "s".into(),
                        InputRequest::CreateMessage(CreateMessageRequest::new(params)),
                    );
                    InputRequiredResult::new(Some(asks), Some("round-1".into())).into()
                }
                Some(answers) => {
                    CallToolResult::structured(json!({"result": answers.get("s")})).into()
                }
            });
        }
        let outcome = match context.peer.create_message(params).await {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(result) => json!({ "result": result }),
                Err(error) => json!({ "transport": error.to_string() }),
            },
            Err(ServiceError::McpError(error)) => json!({
                "error": {"code": error.code.0, "message": error.message, "data": error.data},
                // `data` as the bytes the server's SDK would print.
                "dataText": serde_json::to_string(&error.data).unwrap_or_default(),
            }),
            Err(other) => json!({ "transport": other.to_string() }),
        };
        Ok(CallToolResult::structured(outcome).into())
    }
}
