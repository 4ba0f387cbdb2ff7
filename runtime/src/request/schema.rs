//! MCP's `CreateMessageRequest` params, per revision, as data: each member
//! with the published JSON Schema's type, enumeration and required members
//! (`docs/spec/evaluation.md`, "Step 1: Validation"). The shapes follow
//! `schema/<revision>/schema.json` of the MCP specification, keyword for
//! keyword (`type`, `const`, `enum`, `required`, `items`, `anyOf`,
//! `minimum`/`maximum`, `additionalProperties`); `format` is an annotation
//! there, and is not checked here either. Every object is open, as the
//! schema's are: a member it does not name may hold anything.
//!
//! Where this is stricter than the schema, `docs/spec/evaluation.md` says
//! so, and `runtime/tests/request_schema.rs` (the differential test against
//! the published schema with Python's `jsonschema`) holds exactly those
//! differences.

use super::{RequestError, describe, quote};
use crate::json::{Json, Kind, Object};
use crate::table::ProtocolRevision;

/// What a JSON value must be.
pub(super) enum Shape {
    /// Anything (`{}` or `additionalProperties: true`).
    Any,
    String,
    Boolean,
    Number,
    /// A number with no fraction (JSON Schema's `integer`: `2.0` is one).
    Integer,
    /// `maxTokens`: an integer of at least 1 (stricter than the schema's
    /// `integer`), at most `u64::MAX`, and at most 2^53 when written with a
    /// fraction or an exponent.
    PositiveInteger,
    /// A string or an integer (`ProgressToken`).
    StringOrInteger,
    /// A number from 0 to 1 (`minimum: 0, maximum: 1`).
    UnitInterval,
    /// A string equal to this one (`const`), described by the second.
    Const(&'static str, &'static str),
    /// A string among these (`enum`), described by the second.
    Enum(&'static [&'static str], &'static str),
    /// An array of items of this shape.
    Array(&'static Shape, &'static str),
    /// An object.
    Object(&'static ObjectShape),
    /// One of these objects, told apart by their `type` constant (an
    /// `anyOf` of content blocks: each branch requires its own `type`, so
    /// a value can match only the branch its `type` names).
    Tagged(&'static [&'static ObjectShape], &'static str),
    /// Any of these shapes (`anyOf` without a tag).
    AnyOf(&'static [&'static Shape], &'static str),
    /// One value of this shape, or an array of them (a message's content
    /// from 2025-11-25 on).
    OneOrMany(&'static Shape, &'static str),
    /// 2026-07-28's `JSONValue` as its JSON Schema writes it: a string, an
    /// integer, a boolean, or an array or object of such values (no null,
    /// no number with a fraction).
    JsonValue,
}

/// An object: its known members, which of them are required, and what any
/// other member must be (`None`: anything).
pub(super) struct ObjectShape {
    /// The `type` constant that names it in a [`Shape::Tagged`].
    tag: Option<&'static str>,
    /// What it is, for messages.
    what: &'static str,
    members: &'static [(&'static str, Shape)],
    required: &'static [&'static str],
    others: Option<&'static Shape>,
}

impl Shape {
    fn expected(&self) -> &'static str {
        match self {
            Shape::Any => "any value",
            Shape::String => "a string",
            Shape::Boolean => "a boolean",
            Shape::Number => "a number",
            Shape::Integer => "an integer",
            Shape::PositiveInteger => "a positive integer",
            Shape::StringOrInteger => "a string or an integer",
            Shape::UnitInterval => "a number from 0 to 1",
            Shape::Const(_, what)
            | Shape::Enum(_, what)
            | Shape::Array(_, what)
            | Shape::Tagged(_, what)
            | Shape::AnyOf(_, what)
            | Shape::OneOrMany(_, what) => what,
            Shape::Object(object) => object.what,
            Shape::JsonValue => {
                "a string, an integer, a boolean, or an array or object of them (no null, no fraction)"
            }
        }
    }
}

/// Where a checked value stands, as a chain on the stack: its JSON path is
/// written out only for an error, so a valid request costs no allocation
/// per member checked.
#[derive(Clone, Copy)]
enum At<'a> {
    /// The checked object's own path (`$.params`).
    Root(&'a str),
    /// A member of the value at the parent.
    Member(&'a At<'a>, &'a str),
    /// An element of the array at the parent.
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    /// The path, as [`member_path`] and `[index]` write it.
    fn path(&self) -> String {
        match *self {
            At::Root(root) => root.to_owned(),
            At::Member(parent, name) => member_path(&parent.path(), name),
            At::Index(parent, index) => format!("{}[{index}]", parent.path()),
        }
    }
}

/// Checks `value` against `shape`; the error names the innermost member
/// that is wrong, by its JSON path.
fn check<J: Json>(shape: &Shape, value: &J, at: &At<'_>) -> Result<(), RequestError> {
    let wrong = || {
        Err(RequestError::InvalidParams {
            path: at.path(),
            expected: shape.expected(),
            found: Some(describe(value)),
        })
    };
    let ok = match shape {
        Shape::Any => true,
        Shape::String => value.as_str().is_some(),
        Shape::Boolean => matches!(value.kind(), Kind::Bool(_)),
        Shape::Number => value.as_number().is_some(),
        Shape::Integer => is_integer(value),
        Shape::PositiveInteger => super::as_non_negative_integer(value).is_some_and(|n| n > 0),
        Shape::StringOrInteger => value.as_str().is_some() || is_integer(value),
        Shape::UnitInterval => value
            .as_number()
            .and_then(serde_json::Number::as_f64)
            .is_some_and(|p| (0.0..=1.0).contains(&p)),
        Shape::Const(constant, _) => value.as_str() == Some(constant),
        Shape::Enum(values, _) => value.as_str().is_some_and(|s| values.contains(&s)),
        Shape::Array(item, _) => {
            let Some(items) = value.as_array() else {
                return wrong();
            };
            for (index, element) in items.iter().enumerate() {
                check(item, element, &At::Index(at, index))?;
            }
            true
        }
        Shape::Object(object) => {
            let Some(members) = value.as_object() else {
                return wrong();
            };
            return check_object(object, members, at);
        }
        Shape::Tagged(branches, _) => {
            let Some(members) = value.as_object() else {
                return wrong();
            };
            let tag = members.get("type").and_then(J::as_str);
            let Some(branch) = branches.iter().find(|b| b.tag.is_some() && b.tag == tag) else {
                return Err(RequestError::InvalidParams {
                    path: At::Member(at, "type").path(),
                    expected: shape.expected(),
                    found: members.get("type").map(|tag| describe(tag)),
                });
            };
            return check_object(branch, members, at);
        }
        Shape::AnyOf(branches, _) => branches
            .iter()
            .any(|branch| check(branch, value, at).is_ok()),
        Shape::OneOrMany(item, _) => {
            if let Some(items) = value.as_array() {
                for (index, element) in items.iter().enumerate() {
                    check(item, element, &At::Index(at, index))?;
                }
                true
            } else if value.as_object().is_some() {
                return check(item, value, at);
            } else {
                false
            }
        }
        Shape::JsonValue => json_value(value),
    };
    if ok { Ok(()) } else { wrong() }
}

/// The most members an [`ObjectShape`] names: its constructors assert it,
/// so a shape with more does not compile.
const MAX_MEMBERS: usize = 24;

fn check_object<O: Object>(
    object: &ObjectShape,
    members: &O,
    at: &At<'_>,
) -> Result<(), RequestError> {
    // One walk of the object's members finds the known ones (an object
    // holds few, and the names differ in length or first byte, so most
    // comparisons end at once), instead of a lookup in the map for every
    // member the shape names. The checks then run in the shape's order, so
    // the error reported is the same.
    let mut present: [Option<&O::Value>; MAX_MEMBERS] = [None; MAX_MEMBERS];
    let mut others = false;
    for (name, value) in members.members() {
        match object.members.iter().position(|(known, _)| *known == name) {
            Some(index) => present[index] = Some(value),
            None => others = true,
        }
    }
    for ((name, shape), value) in object.members.iter().zip(present) {
        match value {
            Some(value) => check(shape, value, &At::Member(at, name))?,
            None if object.required.contains(name) => {
                return Err(RequestError::InvalidParams {
                    path: At::Member(at, name).path(),
                    expected: shape.expected(),
                    found: None,
                });
            }
            None => {}
        }
    }
    if let (Some(shape), true) = (object.others, others) {
        // In byte order, as a `Map` holds them: the first wrong member
        // reported is the same whichever tree the request was read into.
        let mut unknown: Vec<(&str, &O::Value)> = members
            .members()
            .filter(|(name, _)| !object.members.iter().any(|(known, _)| known == name))
            .collect();
        if !members.in_byte_order() {
            unknown.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        for (name, value) in unknown {
            check(shape, value, &At::Member(at, name))?;
        }
    }
    Ok(())
}

/// JSON Schema's `integer`: any number whose value has no fraction.
fn is_integer<J: Json>(value: &J) -> bool {
    match value.kind() {
        Kind::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

fn json_value<J: Json>(value: &J) -> bool {
    match value.kind() {
        Kind::String(_) | Kind::Bool(_) => true,
        Kind::Number(_) => is_integer(value),
        Kind::Array(items) => items.iter().all(json_value),
        Kind::Object(members) => members.members().all(|(_, value)| json_value(value)),
        Kind::Null => false,
    }
}

/// `path.name`, or `path["name"]` for a name that is not a plain identifier
/// (the paths of [`super::Path`]).
pub(super) fn member_path(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if plain {
        format!("{path}.{name}")
    } else {
        format!("{path}[{}]", quote(name))
    }
}

/// The params of `sampling/createMessage` under `revision`.
pub(super) fn params(revision: ProtocolRevision) -> &'static ObjectShape {
    match revision {
        ProtocolRevision::V2025_06_18 => &PARAMS_2025_06_18,
        ProtocolRevision::V2025_11_25 => &PARAMS_2025_11_25,
        ProtocolRevision::V2026_07_28 => &PARAMS_2026_07_28,
    }
}

const fn object(
    what: &'static str,
    members: &'static [(&'static str, Shape)],
    required: &'static [&'static str],
) -> ObjectShape {
    assert!(
        members.len() <= MAX_MEMBERS,
        "a shape names more members than check_object holds"
    );
    ObjectShape {
        tag: None,
        what,
        members,
        required,
        others: None,
    }
}

const fn block(
    tag: &'static str,
    what: &'static str,
    members: &'static [(&'static str, Shape)],
    required: &'static [&'static str],
) -> ObjectShape {
    assert!(
        members.len() <= MAX_MEMBERS,
        "a shape names more members than check_object holds"
    );
    ObjectShape {
        tag: Some(tag),
        what,
        members,
        required,
        others: None,
    }
}

/// An object with nothing known about its members (`_meta`, `input`, …).
static OBJECT: ObjectShape = object("an object", &[], &[]);
const META: (&str, Shape) = ("_meta", Shape::Object(&OBJECT));

static ROLE: Shape = Shape::Enum(&["user", "assistant"], "\"user\" or \"assistant\"");
static STRING: Shape = Shape::String;

static ANNOTATIONS: ObjectShape = object(
    "an annotations object",
    &[
        (
            "audience",
            Shape::Array(&ROLE, "an array of \"user\" or \"assistant\""),
        ),
        ("priority", Shape::UnitInterval),
        ("lastModified", Shape::String),
    ],
    &[],
);
const ANNOTATED: (&str, Shape) = ("annotations", Shape::Object(&ANNOTATIONS));

static TEXT: ObjectShape = block(
    "text",
    "a text content block",
    &[
        ("type", Shape::Const("text", "\"text\"")),
        ("text", Shape::String),
        ANNOTATED,
        META,
    ],
    &["type", "text"],
);
static IMAGE: ObjectShape = block(
    "image",
    "an image content block",
    &[
        ("type", Shape::Const("image", "\"image\"")),
        ("data", Shape::String),
        ("mimeType", Shape::String),
        ANNOTATED,
        META,
    ],
    &["type", "data", "mimeType"],
);
static AUDIO: ObjectShape = block(
    "audio",
    "an audio content block",
    &[
        ("type", Shape::Const("audio", "\"audio\"")),
        ("data", Shape::String),
        ("mimeType", Shape::String),
        ANNOTATED,
        META,
    ],
    &["type", "data", "mimeType"],
);
static TOOL_USE: ObjectShape = block(
    "tool_use",
    "a tool_use content block",
    &[
        ("type", Shape::Const("tool_use", "\"tool_use\"")),
        ("id", Shape::String),
        ("name", Shape::String),
        ("input", Shape::Object(&OBJECT)),
        META,
    ],
    &["type", "id", "name", "input"],
);

static ICON: ObjectShape = object(
    "an icon object",
    &[
        ("src", Shape::String),
        ("mimeType", Shape::String),
        ("sizes", Shape::Array(&STRING, "an array of strings")),
        (
            "theme",
            Shape::Enum(&["light", "dark"], "\"light\" or \"dark\""),
        ),
    ],
    &["src"],
);
static ICONS: Shape = Shape::Object(&ICON);
const ICON_LIST: (&str, Shape) = ("icons", Shape::Array(&ICONS, "an array of icon objects"));

static RESOURCE_LINK: ObjectShape = block(
    "resource_link",
    "a resource_link content block",
    &[
        ("type", Shape::Const("resource_link", "\"resource_link\"")),
        ("name", Shape::String),
        ("uri", Shape::String),
        ("title", Shape::String),
        ("description", Shape::String),
        ("mimeType", Shape::String),
        ("size", Shape::Integer),
        ICON_LIST,
        ANNOTATED,
        META,
    ],
    &["type", "name", "uri"],
);
static TEXT_RESOURCE: Shape = Shape::Object(&TEXT_RESOURCE_OBJECT);
static TEXT_RESOURCE_OBJECT: ObjectShape = object(
    "text resource contents",
    &[
        ("uri", Shape::String),
        ("text", Shape::String),
        ("mimeType", Shape::String),
        META,
    ],
    &["uri", "text"],
);
static BLOB_RESOURCE: Shape = Shape::Object(&BLOB_RESOURCE_OBJECT);
static BLOB_RESOURCE_OBJECT: ObjectShape = object(
    "blob resource contents",
    &[
        ("uri", Shape::String),
        ("blob", Shape::String),
        ("mimeType", Shape::String),
        META,
    ],
    &["uri", "blob"],
);
static EMBEDDED_RESOURCE: ObjectShape = block(
    "resource",
    "a resource content block",
    &[
        ("type", Shape::Const("resource", "\"resource\"")),
        (
            "resource",
            Shape::AnyOf(
                &[&TEXT_RESOURCE, &BLOB_RESOURCE],
                "text resource contents (uri, text) or blob resource contents (uri, blob)",
            ),
        ),
        ANNOTATED,
        META,
    ],
    &["type", "resource"],
);
static CONTENT_BLOCK: Shape = Shape::Tagged(
    &[&TEXT, &IMAGE, &AUDIO, &RESOURCE_LINK, &EMBEDDED_RESOURCE],
    "a content block of type \"text\", \"image\", \"audio\", \"resource_link\" or \"resource\"",
);
const fn tool_result(structured: Shape) -> [(&'static str, Shape); 6] {
    [
        ("type", Shape::Const("tool_result", "\"tool_result\"")),
        ("toolUseId", Shape::String),
        (
            "content",
            Shape::Array(&CONTENT_BLOCK, "an array of content blocks"),
        ),
        ("isError", Shape::Boolean),
        ("structuredContent", structured),
        META,
    ]
}
static TOOL_RESULT_2025_11_25: ObjectShape = block(
    "tool_result",
    "a tool_result content block",
    &tool_result(Shape::Object(&OBJECT)),
    &["type", "toolUseId", "content"],
);
static TOOL_RESULT_2026_07_28: ObjectShape = block(
    "tool_result",
    "a tool_result content block",
    &tool_result(Shape::Any),
    &["type", "toolUseId", "content"],
);

static MESSAGE_2025_06_18: ObjectShape = object(
    "a message object (role, content)",
    &[
        (
            "role",
            Shape::Enum(&["user", "assistant"], "\"user\" or \"assistant\""),
        ),
        (
            "content",
            Shape::Tagged(
                &[&TEXT, &IMAGE, &AUDIO],
                "a content block of type \"text\", \"image\" or \"audio\"",
            ),
        ),
    ],
    &["role", "content"],
);
static SAMPLING_BLOCK_2025_11_25: Shape = Shape::Tagged(
    &[&TEXT, &IMAGE, &AUDIO, &TOOL_USE, &TOOL_RESULT_2025_11_25],
    "a content block of type \"text\", \"image\", \"audio\", \"tool_use\" or \"tool_result\"",
);
static SAMPLING_BLOCK_2026_07_28: Shape = Shape::Tagged(
    &[&TEXT, &IMAGE, &AUDIO, &TOOL_USE, &TOOL_RESULT_2026_07_28],
    "a content block of type \"text\", \"image\", \"audio\", \"tool_use\" or \"tool_result\"",
);
const CONTENT_EXPECTED: &str = "a content block of type \"text\", \"image\", \"audio\", \"tool_use\" or \"tool_result\", or an array of them";
static MESSAGE_2025_11_25: ObjectShape = object(
    "a message object (role, content)",
    &[
        (
            "role",
            Shape::Enum(&["user", "assistant"], "\"user\" or \"assistant\""),
        ),
        (
            "content",
            Shape::OneOrMany(&SAMPLING_BLOCK_2025_11_25, CONTENT_EXPECTED),
        ),
        META,
    ],
    &["role", "content"],
);
static MESSAGE_2026_07_28: ObjectShape = object(
    "a message object (role, content)",
    &[
        (
            "role",
            Shape::Enum(&["user", "assistant"], "\"user\" or \"assistant\""),
        ),
        (
            "content",
            Shape::OneOrMany(&SAMPLING_BLOCK_2026_07_28, CONTENT_EXPECTED),
        ),
        META,
    ],
    &["role", "content"],
);

static HINT: Shape = Shape::Object(&HINT_OBJECT);
static HINT_OBJECT: ObjectShape = object("an object", &[("name", Shape::String)], &[]);
static MODEL_PREFERENCES: ObjectShape = object(
    "an object",
    &[
        ("hints", Shape::Array(&HINT, "an array of objects")),
        ("costPriority", Shape::UnitInterval),
        ("speedPriority", Shape::UnitInterval),
        ("intelligencePriority", Shape::UnitInterval),
    ],
    &[],
);
static TOOL_CHOICE: ObjectShape = object(
    "an object",
    &[(
        "mode",
        Shape::Enum(
            &["auto", "required", "none"],
            "one of \"auto\", \"required\", \"none\"",
        ),
    )],
    &[],
);
static TOOL_ANNOTATIONS: ObjectShape = object(
    "a tool annotations object",
    &[
        ("title", Shape::String),
        ("readOnlyHint", Shape::Boolean),
        ("destructiveHint", Shape::Boolean),
        ("idempotentHint", Shape::Boolean),
        ("openWorldHint", Shape::Boolean),
    ],
    &[],
);
static PROPERTY_SCHEMAS: ObjectShape = ObjectShape {
    tag: None,
    what: "an object of objects",
    members: &[],
    required: &[],
    others: Some(&Shape::Object(&OBJECT)),
};
static TOOL_SCHEMA_2025_11_25: ObjectShape = object(
    "a JSON Schema object with \"type\": \"object\"",
    &[
        ("type", Shape::Const("object", "\"object\"")),
        ("properties", Shape::Object(&PROPERTY_SCHEMAS)),
        ("required", Shape::Array(&STRING, "an array of strings")),
        ("$schema", Shape::String),
    ],
    &["type"],
);
static EXECUTION: ObjectShape = object(
    "an object",
    &[(
        "taskSupport",
        Shape::Enum(
            &["forbidden", "optional", "required"],
            "one of \"forbidden\", \"optional\", \"required\"",
        ),
    )],
    &[],
);
static TOOL_2025_11_25_OBJECT: ObjectShape = object(
    "a tool object (name, inputSchema)",
    &[
        ("name", Shape::String),
        ("title", Shape::String),
        ("description", Shape::String),
        ("inputSchema", Shape::Object(&TOOL_SCHEMA_2025_11_25)),
        ("outputSchema", Shape::Object(&TOOL_SCHEMA_2025_11_25)),
        ICON_LIST,
        ("annotations", Shape::Object(&TOOL_ANNOTATIONS)),
        ("execution", Shape::Object(&EXECUTION)),
        META,
    ],
    &["name", "inputSchema"],
);
static TOOL_2025_11_25: Shape = Shape::Object(&TOOL_2025_11_25_OBJECT);
static INPUT_SCHEMA_2026_07_28: ObjectShape = object(
    "a JSON Schema object with \"type\": \"object\"",
    &[
        ("type", Shape::Const("object", "\"object\"")),
        ("$schema", Shape::String),
    ],
    &["type"],
);
static OUTPUT_SCHEMA_2026_07_28: ObjectShape =
    object("a JSON Schema object", &[("$schema", Shape::String)], &[]);
static TOOL_2026_07_28_OBJECT: ObjectShape = object(
    "a tool object (name, inputSchema)",
    &[
        ("name", Shape::String),
        ("title", Shape::String),
        ("description", Shape::String),
        ("inputSchema", Shape::Object(&INPUT_SCHEMA_2026_07_28)),
        ("outputSchema", Shape::Object(&OUTPUT_SCHEMA_2026_07_28)),
        ICON_LIST,
        ("annotations", Shape::Object(&TOOL_ANNOTATIONS)),
        META,
    ],
    &["name", "inputSchema"],
);
static TOOL_2026_07_28: Shape = Shape::Object(&TOOL_2026_07_28_OBJECT);

static TASK: ObjectShape = object("an object", &[("ttl", Shape::Integer)], &[]);
static REQUEST_META_2025_11_25: ObjectShape = object(
    "an object",
    &[("progressToken", Shape::StringOrInteger)],
    &[],
);
static JSON_OBJECT: ObjectShape = ObjectShape {
    tag: None,
    what: "an object",
    members: &[],
    required: &[],
    others: Some(&Shape::JsonValue),
};

const INCLUDE_CONTEXT: (&str, Shape) = (
    "includeContext",
    Shape::Enum(
        &["none", "thisServer", "allServers"],
        "one of \"none\", \"thisServer\", \"allServers\"",
    ),
);
const MAX_TOKENS: (&str, Shape) = ("maxTokens", Shape::PositiveInteger);
const SYSTEM_PROMPT: (&str, Shape) = ("systemPrompt", Shape::String);
const TEMPERATURE: (&str, Shape) = ("temperature", Shape::Number);
const STOP_SEQUENCES: (&str, Shape) = (
    "stopSequences",
    Shape::Array(&STRING, "an array of strings"),
);
const PREFERENCES: (&str, Shape) = ("modelPreferences", Shape::Object(&MODEL_PREFERENCES));
const CHOICE: (&str, Shape) = ("toolChoice", Shape::Object(&TOOL_CHOICE));
const TOOLS_2025_11_25: (&str, Shape) = (
    "tools",
    Shape::Array(&TOOL_2025_11_25, "an array of tool objects"),
);

static MESSAGES_2025_06_18: Shape = Shape::Object(&MESSAGE_2025_06_18);
static MESSAGES_2025_11_25: Shape = Shape::Object(&MESSAGE_2025_11_25);
static MESSAGES_2026_07_28: Shape = Shape::Object(&MESSAGE_2026_07_28);

/// 2025-06-18. Stricter than its schema, which does not name them: `_meta`
/// is an object (as in every revision's base protocol), and `tools` and
/// `toolChoice`, which the policy reads under every revision (step 4), are
/// held to their 2025-11-25 definition.
static PARAMS_2025_06_18: ObjectShape = object(
    "an object",
    &[
        (
            "messages",
            Shape::Array(&MESSAGES_2025_06_18, "an array of message objects"),
        ),
        MAX_TOKENS,
        SYSTEM_PROMPT,
        INCLUDE_CONTEXT,
        TEMPERATURE,
        STOP_SEQUENCES,
        ("metadata", Shape::Object(&OBJECT)),
        PREFERENCES,
        TOOLS_2025_11_25,
        CHOICE,
        META,
    ],
    &["messages", "maxTokens"],
);
static PARAMS_2025_11_25: ObjectShape = object(
    "an object",
    &[
        (
            "messages",
            Shape::Array(&MESSAGES_2025_11_25, "an array of message objects"),
        ),
        MAX_TOKENS,
        SYSTEM_PROMPT,
        INCLUDE_CONTEXT,
        TEMPERATURE,
        STOP_SEQUENCES,
        ("metadata", Shape::Object(&OBJECT)),
        PREFERENCES,
        TOOLS_2025_11_25,
        CHOICE,
        ("task", Shape::Object(&TASK)),
        ("_meta", Shape::Object(&REQUEST_META_2025_11_25)),
    ],
    &["messages", "maxTokens"],
);
/// 2026-07-28. Stricter than its schema, which does not name it: `_meta`
/// is an object.
static PARAMS_2026_07_28: ObjectShape = object(
    "an object",
    &[
        (
            "messages",
            Shape::Array(&MESSAGES_2026_07_28, "an array of message objects"),
        ),
        MAX_TOKENS,
        SYSTEM_PROMPT,
        INCLUDE_CONTEXT,
        TEMPERATURE,
        STOP_SEQUENCES,
        ("metadata", Shape::Object(&JSON_OBJECT)),
        PREFERENCES,
        (
            "tools",
            Shape::Array(&TOOL_2026_07_28, "an array of tool objects"),
        ),
        CHOICE,
        META,
    ],
    &["messages", "maxTokens"],
);

/// Checks a params object under `revision`.
pub(super) fn check_params<O: Object>(
    params: &O,
    revision: ProtocolRevision,
    at: &str,
) -> Result<(), RequestError> {
    check_object(self::params(revision), params, &At::Root(at))
}
