//! The typed path: rmcp's params, already parsed, to the runtime's validated
//! [`SamplingRequest`], with no envelope and no bytes in between.

use mcpolicy_runtime::request::{self, RequestError, SamplingRequest};
use mcpolicy_runtime::table::ProtocolRevision;
use rmcp::model::CreateMessageRequestParams;
use serde_json::{Map, Number, Value};

/// The request the engine decides for rmcp's `params`, validated as MCP
/// `revision` defines them ([`request::validate_params_for`]); pass the
/// table's (`engine.policy().table().protocol`).
///
/// The identity is canonical over the params (`docs/spec/identity.md`), so
/// this path and the bytes path (`Engine::decide` on the frame the server
/// sent) give the same identity for every member rmcp keeps as the server
/// wrote it: `tests/typed_path.rs` checks it. Two things rmcp's types do
/// not keep, and this function cannot restore:
///
/// - unknown members (a content block's extra fields, say) are dropped by
///   rmcp before the handler runs, so they are not hashed;
/// - `temperature`, the three `modelPreferences` priorities and a content
///   block's `annotations.priority` are `f32` in rmcp, and
///   `serde_json::to_value` widens an `f32` to the `f64` it equals
///   (`0.3` becomes `0.30000001192092896`). Each number that is exactly an
///   `f32` is therefore written back as that `f32`'s shortest decimal, which
///   is what rmcp writes on the wire and what every peer writing `0.3`
///   meant. A server that wrote more digits than an `f32` holds has them
///   narrowed by rmcp, on this path only.
pub fn typed_request(
    params: &CreateMessageRequestParams,
    revision: ProtocolRevision,
) -> Result<SamplingRequest, RequestError> {
    let value = serde_json::to_value(params).map_err(|err| RequestError::InvalidParams {
        path: "$.params".into(),
        expected: "params serde_json can represent",
        found: Some(err.to_string()),
    })?;
    let Value::Object(mut params) = value else {
        return Err(RequestError::InvalidParams {
            path: "$.params".into(),
            expected: "an object",
            found: None,
        });
    };
    narrow_widened_floats(&mut params);
    request::validate_params_for(params, revision)
}

/// Every float in `params` that is exactly an `f32`, as the shortest decimal
/// of that `f32` read back as an `f64`.
fn narrow_widened_floats(params: &mut Map<String, Value>) {
    let mut stack: Vec<&mut Value> = params.values_mut().collect();
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(number) => {
                if let Some(narrowed) = as_f32_decimal(number) {
                    *number = narrowed;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(members) => stack.extend(members.values_mut()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
}

/// `number` as its `f32`'s shortest decimal when it is a float that an
/// `f32` holds exactly and that decimal is another `f64`; `None` otherwise.
fn as_f32_decimal(number: &Number) -> Option<Number> {
    if number.is_i64() || number.is_u64() {
        return None;
    }
    let wide = number.as_f64()?;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the narrowing is the point; it is undone below when exact"
    )]
    let narrow = wide as f32;
    if f64::from(narrow) != wide {
        return None;
    }
    // `Display` for `f32` writes the shortest decimal that reads back as
    // this `f32` (as ryu, rmcp's serialiser, does).
    let decimal: f64 = narrow.to_string().parse().ok()?;
    (decimal != wide)
        .then(|| Number::from_f64(decimal))
        .flatten()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    #![expect(deprecated, reason = "sampling is what is under test")]

    use rmcp::model::{ModelPreferences, SamplingMessage};
    use serde_json::json;

    use super::*;

    #[test]
    fn an_f32_member_is_hashed_as_written_on_the_wire() {
        let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hi")], 10)
            .with_temperature(0.3)
            .with_model_preferences(ModelPreferences::new().with_cost_priority(0.7));
        let request = typed_request(&params, ProtocolRevision::default()).unwrap();
        let wire: Value = serde_json::from_slice(&serde_json::to_vec(&params).unwrap()).unwrap();
        assert_eq!(request.params()["temperature"], json!(0.3));
        assert_eq!(
            request.params()["modelPreferences"]["costPriority"],
            json!(0.7)
        );
        assert_eq!(Value::Object(request.into_params()), wire);
    }

    #[test]
    fn integers_and_exact_halves_are_left_alone() {
        for text in ["1", "0.5", "0.25", "-3", "1e300"] {
            let number: Number = serde_json::from_str(text).unwrap();
            assert_eq!(as_f32_decimal(&number), None, "{text}");
        }
    }
}
