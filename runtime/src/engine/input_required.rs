//! The MCP 2026-07-28 entry point: a sampling request embedded in an
//! `input_required` result, decided as a request of its own
//! (`docs/spec/evaluation.md`).

use super::*;

impl Engine {
    /// MCP 2026-07-28: decides every sampling entry of an
    /// `InputRequiredResult` (or of its `inputRequests` value) received from
    /// `server_id`, given as raw bytes so duplicate keys are caught. Entries
    /// come back in key order. A malformed result is an [`Error::Request`]
    /// whose [`Error::reply`] answers the client's pending call.
    pub fn decide_input_required(
        &self,
        server_id: &str,
        bytes: &[u8],
        ctx: &ClientContext,
    ) -> Result<Vec<InputDecision>, Error> {
        let result = request::parse_strict(bytes)?;
        Ok(frame::input_requests(&result)
            .into_iter()
            .map(|entry| {
                let outcome = if !entry.is_sampling() {
                    InputOutcome::NotSampling
                } else {
                    let mut wrapped = Map::new();
                    wrapped.insert("jsonrpc".to_owned(), Value::from("2.0"));
                    wrapped.insert("id".to_owned(), Value::from(entry.key.as_str()));
                    wrapped.insert("method".to_owned(), Value::from(jsonrpc::SAMPLING_METHOD));
                    if let Some(params) = entry.entry.get("params") {
                        wrapped.insert("params".to_owned(), params.clone());
                    }
                    match request::validate_sampling_for(
                        Value::Object(wrapped),
                        self.table().protocol,
                    ) {
                        Err(error) => InputOutcome::Invalid(error.into()),
                        Ok(request) => {
                            match self.decide_validated(server_id, request.params(), ctx) {
                                Ok(decision) => InputOutcome::Decided { request, decision },
                                Err(error) => InputOutcome::Failed(error),
                            }
                        }
                    }
                };
                InputDecision {
                    key: entry.key,
                    outcome,
                }
            })
            .collect())
    }
}

/// One entry of an MCP 2026-07-28 `inputRequests`, decided.
#[derive(Debug)]
pub struct InputDecision {
    /// The server-assigned key of the entry (for a list, its index).
    pub key: String,
    /// What happened to it.
    pub outcome: InputOutcome,
}

/// How one `inputRequests` entry was handled.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum InputOutcome {
    /// Not a sampling request (e.g. `elicitation/create`): not this runtime's business.
    NotSampling,
    /// A malformed sampling entry ([`Error::Request`]); answer the client's
    /// pending call with [`Error::reply`].
    Invalid(Error),
    /// Decided like any sampling request (its key as the id); a
    /// [`Decision::Deny`] is answered with [`Denial::local_error`].
    Decided {
        /// The validated request.
        request: SamplingRequest,
        /// What to do with it.
        decision: Decision,
    },
    /// The store failed; the entry is refused with [`Error::reply`].
    Failed(Error),
}
