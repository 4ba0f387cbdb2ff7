//! JSON-RPC 2.0 error codes and the MCP method names this runtime knows,
//! defined once: request validation, frames and embedders use these.
//! (`docs/spec/frames.md`, "Codes".)

/// The text is not JSON (or not acceptable JSON: invalid UTF-8, a lone
/// surrogate, nesting too deep).
pub const PARSE_ERROR: i32 = -32700;
/// Not a valid request object: duplicate keys, a wrong envelope or method,
/// or over the size limit.
pub const INVALID_REQUEST: i32 = -32600;
/// Invalid method parameters.
pub const INVALID_PARAMS: i32 = -32602;
/// Internal error: the decision store failed and the request is refused
/// (fail closed).
pub const INTERNAL_ERROR: i32 = -32603;
/// MCP: the user rejected the request (a client's answer to a sampling
/// request it was asked to show).
pub const USER_REJECTED: i32 = -1;

/// The MCP method this runtime decides.
pub const SAMPLING_METHOD: &str = "sampling/createMessage";
