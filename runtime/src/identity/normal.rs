//! The presentation-normal form of a request's identity fields
//! (`docs/spec/identity.md`, "The refusal key"): what a person is shown of
//! it, each part borrowed from the request wherever it is already normal.
//! It reads the request through the JSON view ([`Json`]), so a request
//! read by the strict reader is normalised from its borrowed tree, with
//! the same result as from a [`Value`] (`identity::view_tests`).

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::json::{Json, Kind, Object};

/// The identity fields of `params` in presentation-normal form
/// (`docs/spec/identity.md`, "The refusal key"); other members are
/// left out. A field this function does not know (a policy may list
/// `maxTokens` or a member of its own) is kept as written.
pub fn presentation_normal<F: AsRef<str>>(
    params: &Map<String, Value>,
    fields: &[F],
) -> Map<String, Value> {
    normal_fields(params, fields)
        .into_iter()
        .map(|(field, value)| (field.to_owned(), value.into_owned()))
        .collect()
}

/// The fields of [`presentation_normal`], each borrowed from `params`
/// wherever it is already normal; a field listed twice appears once.
pub(super) fn normal_fields<'a, O: Object, F: AsRef<str>>(
    params: &'a O,
    fields: &'a [F],
) -> Vec<(&'a str, Cow<'a, O::Value>)> {
    let mut out: Vec<(&str, Cow<'_, O::Value>)> = Vec::with_capacity(fields.len());
    for field in fields {
        let field = field.as_ref();
        if out.iter().any(|(name, _)| *name == field) {
            continue;
        }
        let Some(value) = params.get(field) else {
            continue;
        };
        let normal = match field {
            "systemPrompt" => Some(normal_strings(value)),
            "messages" => Some(normal_messages(value)),
            "includeContext" => match value.kind() {
                // `none` is what an absent `includeContext` means.
                Kind::String("none") => None,
                _ => Some(Cow::Borrowed(value)),
            },
            "modelPreferences" => normal_preferences(value),
            _ => Some(Cow::Borrowed(value)),
        };
        if let Some(normal) = normal {
            out.push((field, normal));
        }
    }
    out
}

/// `items` normalised by `normal`: borrowed when every item is.
fn normal_items<'a, J: Json>(
    whole: &'a J,
    items: &'a [J],
    normal: impl Fn(&'a J) -> Cow<'a, J>,
) -> Cow<'a, J> {
    let mut changed: Option<Vec<J>> = None;
    for (at, item) in items.iter().enumerate() {
        let normal = normal(item);
        let same = unchanged(&normal, item);
        match &mut changed {
            None if same => {}
            None => {
                let mut out = Vec::with_capacity(items.len());
                out.extend(items[..at].iter().cloned());
                out.push(normal.into_owned());
                changed = Some(out);
            }
            Some(out) => out.push(normal.into_owned()),
        }
    }
    match changed {
        None => Cow::Borrowed(whole),
        Some(out) => Cow::Owned(J::from_items(out)),
    }
}

/// Text as a person is shown it: without Unicode default-ignorable code
/// points (zero-width spaces and joiners, the soft hyphen, variation
/// selectors, tag characters, bidirectional controls…), without leading
/// and trailing white space. Inner runs of white space are kept: a
/// terminal, a code block or a line break shows them.
pub fn presentation_text(text: &str) -> Cow<'_, str> {
    let trimmed = text.trim();
    if !holds_default_ignorable(text) {
        return Cow::Borrowed(trimmed);
    }
    let kept: String = text.chars().filter(|c| !is_default_ignorable(*c)).collect();
    let trimmed = kept.trim();
    Cow::Owned(trimmed.to_owned())
}

/// Whether `text` holds an [`is_default_ignorable`] character. Every such
/// character's UTF-8 form begins with one of [`IGNORABLE_LEADS`]; ASCII is
/// skipped eight bytes at a time, and only a character that begins with
/// such a lead is decoded and looked up (prose with accents and dashes is
/// nearly all skipped). `identity::tests` holds the leads to the property,
/// and `runtime/tests/presentation_normal.rs` this scan to the one that
/// decodes every character.
fn holds_default_ignorable(text: &str) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let bytes = text.as_bytes();
    // Always at a character's first byte.
    let mut at = 0;
    while at < bytes.len() {
        if let Some(word) = bytes[at..].first_chunk::<8>() {
            let high = u64::from_le_bytes(*word) & HIGH;
            if high == 0 {
                at += 8;
                continue;
            }
            // On to the first byte that is not ASCII: a character's first.
            at += (high.trailing_zeros() / 8) as usize;
        }
        let Some(c) = text.get(at..).and_then(|rest| rest.chars().next()) else {
            break;
        };
        if IGNORABLE_LEADS[usize::from(bytes[at])] && is_default_ignorable(c) {
            return true;
        }
        at += c.len_utf8();
    }
    false
}

/// The lead bytes of the UTF-8 forms of [`is_default_ignorable`]'s
/// characters: U+00AD (`C2`), U+034F (`CD`), U+061C (`D8`), U+115F–U+180F
/// (`E1`), U+200B–U+206F (`E2`), U+3164 (`E3`), U+FE00–U+FFF8 (`EF`),
/// U+1BCA0–U+1D17A (`F0`) and U+E0000–U+E0FFF (`F3`).
pub(crate) const IGNORABLE_LEADS: [bool; 256] = {
    let mut leads = [false; 256];
    let mut i = 0;
    let bytes = [0xC2, 0xCD, 0xD8, 0xE1, 0xE2, 0xE3, 0xEF, 0xF0, 0xF3];
    while i < bytes.len() {
        leads[bytes[i]] = true;
        i += 1;
    }
    leads
};

/// Unicode's `Default_Ignorable_Code_Point` property
/// (`DerivedCoreProperties.txt`, Unicode 15.1 and 16.0): characters a
/// renderer shows as nothing.
pub fn is_default_ignorable(c: char) -> bool {
    const RANGES: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x061C, 0x061C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ];
    let c = u32::from(c);
    c >= 0xAD
        && RANGES
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    Ordering::Less
                } else if lo > c {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            })
            .is_ok()
}

/// Every string in `value` as [`presentation_text`] (keys kept as
/// written); borrowed when every string already is.
fn normal_strings<J: Json>(value: &J) -> Cow<'_, J> {
    match value.kind() {
        Kind::String(text) => match presentation_text(text) {
            Cow::Borrowed(same) if same.len() == text.len() => Cow::Borrowed(value),
            other => Cow::Owned(J::from_string(other.into_owned())),
        },
        Kind::Array(items) => normal_items(value, items, normal_strings),
        Kind::Object(map) => {
            normal_members(value, map, |_| true, |_, item| Some(normal_strings(item)))
        }
        _ => Cow::Borrowed(value),
    }
}

/// The members of `map` that `keep` keeps, each normalised by `normal`
/// (`None`: left out): borrowed when every member is kept and unchanged.
/// A changed copy keeps the object's own member order: the canonical
/// writer orders members itself, so no order is imposed here.
fn normal_members<'a, J: Json>(
    whole: &'a J,
    map: &'a J::Object,
    keep: impl Fn(&str) -> bool,
    normal: impl Fn(&str, &'a J) -> Option<Cow<'a, J>>,
) -> Cow<'a, J> {
    // Collected only from the first change on: a member already normal,
    // nearly all of them, costs no allocation.
    let mut changed: Option<Vec<(String, J)>> = None;
    for (at, (key, item)) in map.members().enumerate() {
        let normal = if keep(key) { normal(key, item) } else { None };
        let same = normal
            .as_ref()
            .is_some_and(|normal| unchanged(normal, item));
        let out = match &mut changed {
            None if same => continue,
            None => changed.insert(
                map.members()
                    .take(at)
                    .map(|(key, item)| (key.to_owned(), item.clone()))
                    .collect(),
            ),
            Some(out) => out,
        };
        if let Some(normal) = normal {
            out.push((key.to_owned(), normal.into_owned()));
        }
    }
    match changed {
        None => Cow::Borrowed(whole),
        Some(out) => Cow::Owned(J::from_members(out)),
    }
}

/// Whether `normal` is `original` itself, unchanged (a normaliser may
/// also borrow a part of its input, which is a change of shape).
#[allow(
    clippy::ptr_arg,
    reason = "whether the Cow borrows is the question asked"
)]
fn unchanged<J: Json>(normal: &Cow<'_, J>, original: &J) -> bool {
    matches!(normal, Cow::Borrowed(same) if std::ptr::eq(*same, original))
}

/// `messages`: each message's `role` and `content` (its `_meta` and any
/// member the schema does not define left out); a content list of one
/// block is that block.
fn normal_messages<J: Json>(value: &J) -> Cow<'_, J> {
    let Kind::Array(messages) = value.kind() else {
        return normal_strings(value);
    };
    normal_items(value, messages, |message| match message.kind() {
        Kind::Object(map) => normal_members(
            message,
            map,
            |key| matches!(key, "role" | "content"),
            |key, item| {
                Some(match key {
                    "role" => normal_strings(item),
                    _ => normal_content(item),
                })
            },
        ),
        _ => normal_strings(message),
    })
}

/// A message's `content`: one block, or a list of blocks.
fn normal_content<J: Json>(value: &J) -> Cow<'_, J> {
    match value.kind() {
        Kind::Array([block]) => normal_block(block),
        Kind::Array(blocks) => normal_items(value, blocks, normal_block),
        _ => normal_block(value),
    }
}

/// One content block: the members of its `type` that carry what the model
/// or the user sees (MCP schema `TextContent`, `ImageContent`,
/// `AudioContent`, `ToolUseContent`, `ToolResultContent`,
/// `EmbeddedResource`, `ResourceLink`). `_meta`, `annotations`, the
/// correlation ids of tool use (`id`, `toolUseId`) and members the schema
/// does not define are left out; `isError: false` is the default. A block
/// of a type this runtime does not know keeps every member but `_meta` and
/// `annotations`.
fn normal_block<J: Json>(value: &J) -> Cow<'_, J> {
    let Kind::Object(block) = value.kind() else {
        return normal_strings(value);
    };
    let kept: &[&str] = match block.get("type").and_then(J::as_str) {
        Some("text") => &["type", "text"],
        Some("image" | "audio") => &["type", "data", "mimeType"],
        Some("tool_use") => &["type", "name", "input"],
        Some("tool_result") => &["type", "content", "structuredContent", "isError"],
        Some("resource") => &["type", "resource"],
        Some("resource_link") => &["type", "uri", "name", "title", "description", "mimeType"],
        _ => &[],
    };
    normal_members(
        value,
        block,
        |key| {
            if kept.is_empty() {
                !matches!(key, "_meta" | "annotations")
            } else {
                kept.contains(&key)
            }
        },
        |key, item| match key {
            "content" if kept.contains(&"isError") => Some(match item.kind() {
                Kind::Array(blocks) => normal_items(item, blocks, normal_block),
                _ => normal_block(item),
            }),
            "isError" if matches!(item.kind(), Kind::Bool(false)) => None,
            "resource" => Some(match item.kind() {
                Kind::Object(resource) => normal_members(
                    item,
                    resource,
                    |k| matches!(k, "uri" | "mimeType" | "text" | "blob"),
                    |_, v| Some(normal_strings(v)),
                ),
                _ => normal_strings(item),
            }),
            _ => Some(normal_strings(item)),
        },
    )
}

/// `modelPreferences`: the hints' names, in order. The priorities are
/// left out (the user is shown no number, and two priorities a rounding
/// apart would otherwise be two requests), and so are `_meta` and members
/// the schema does not define. `hints: []` and `{}` are what an absent
/// field means: `None`.
fn normal_preferences<J: Json>(value: &J) -> Option<Cow<'_, J>> {
    let Kind::Object(preferences) = value.kind() else {
        return Some(normal_strings(value));
    };
    let given = preferences.get("hints")?;
    let hints = match given.kind() {
        Kind::Array([]) => return None,
        Kind::Array(hints) => normal_items(given, hints, |hint| match hint.kind() {
            Kind::Object(map) => normal_members(
                hint,
                map,
                |key| key == "name",
                |_, name| Some(normal_strings(name)),
            ),
            _ => normal_strings(hint),
        }),
        _ => normal_strings(given),
    };
    if preferences.len() == 1 && unchanged(&hints, given) {
        return Some(Cow::Borrowed(value));
    }
    Some(Cow::Owned(J::from_members(vec![(
        "hints".to_owned(),
        hints.into_owned(),
    )])))
}
