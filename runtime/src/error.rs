//! The crate's one error type.

use serde_json::Value;

use crate::frame::{self, DenialData};
use crate::jsonrpc;
use crate::request::RequestError;
use crate::store::StoreError;
use crate::table::TableError;

/// Why the runtime could not decide, or refused its input. Every case has
/// a reply ([`Error::reply`]): the request is refused, never let through
/// (fail closed).
///
/// The variants carry the detail types of the parts they come from:
/// [`StoreError`] is what a [`crate::store::DecisionStore`] implementation
/// returns, [`TableError`] what table verification found, [`RequestError`]
/// what request validation found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The decision store failed while deciding for `server`.
    #[error("decision store failed: {source}")]
    Store {
        /// The server whose request was being decided (named in the reply's `data`).
        server: String,
        /// What the store reported.
        #[source]
        source: StoreError,
    },
    /// A table was refused: it cannot become a [`crate::Policy`].
    #[error(transparent)]
    Table(#[from] TableError),
    /// Bytes that should have been a request or a result are not valid
    /// (e.g. a malformed MCP 2026-07-28 `InputRequiredResult`).
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl Error {
    pub(crate) fn store(server: &str, source: StoreError) -> Error {
        Error::Store {
            server: server.to_owned(),
            source,
        }
    }

    /// The JSON-RPC code of [`Error::reply`]: -32603 for a store failure or
    /// a refused table, the validation code (-32700, -32600, -32602) for a
    /// refused request.
    pub fn code(&self) -> i32 {
        match self {
            Error::Request(error) => error.code(),
            Error::Store { .. } | Error::Table(_) => jsonrpc::INTERNAL_ERROR,
        }
    }

    /// The message of [`Error::reply`].
    pub fn message(&self) -> String {
        match self {
            // Never the store's own text: it names the operator's database
            // or file (`docs/spec/frames.md`, "Store failures"); the caller
            // logs `self` for the operator.
            Error::Store { .. } => frame::STORE_UNAVAILABLE_MESSAGE.to_owned(),
            Error::Request(error) => error.to_string(),
            Error::Table(error) => error.to_string(),
        }
    }

    /// The `data` of [`Error::reply`]: for a store failure, reason
    /// `runtime.store_unavailable`, the server, `retryable: true` (the store
    /// may recover); none otherwise.
    pub fn data(&self) -> Option<DenialData> {
        match self {
            Error::Store { server, .. } => Some(DenialData::store_unavailable(server)),
            Error::Request(_) | Error::Table(_) => None,
        }
    }

    /// The JSON-RPC error response refusing the request (or, for MCP
    /// 2026-07-28, the client's own pending call) with this `id`.
    pub fn reply(&self, id: Option<&Value>) -> Vec<u8> {
        let data = self.data().map(|data| data.to_json());
        frame::error_response(id, self.code(), &self.message(), data.as_deref()).into_bytes()
    }
}
