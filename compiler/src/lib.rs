//! mcpolicy compiler
