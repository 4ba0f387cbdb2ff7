//! The rewrite itself, on text: a client configuration's stdio servers put
//! behind `mcpc proxy` and back, by exact-span edits of the JSON or JSONC
//! text (`docs/spec/clients.md`, "What `mcpc wrap` writes"). Everything the
//! edit does not touch (comments, trailing commas, layout, key order, the
//! other members of each entry) stays byte for byte.
//!
//! A wrapped entry keeps what it replaced in a member of its own,
//! `mcpcOriginal`: the source text of the original `command` and `args`
//! values, copied as they were written (comments inside them included).
//! `--undo` puts those texts back and removes the members wrap added, so
//! undo after wrap gives the original bytes; a re-wrap recognises the
//! member and starts from the original, so wrapping twice is wrapping once.

use std::ops::Range;

use jsonc_parser::ast::{Array, Object, ObjectProp, Value};
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, CommentCollectionStrategy, ParseOptions, parse_to_ast};

/// The member a wrapped entry keeps its original `command` and `args` in.
pub(crate) const ORIGINAL: &str = "mcpcOriginal";

/// The top-level members that hold servers, by the clients that use them.
pub(crate) const SERVER_MAPS: &[(&str, &str)] = &[
    (
        "mcpServers",
        "Claude Desktop, Claude Code, Cursor, Windsurf",
    ),
    ("servers", "VS Code"),
];

/// What a server entry is, as wrap sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A stdio server not behind the proxy.
    Stdio,
    /// Wrapped by `mcpc wrap` (it has an `mcpcOriginal` member).
    Wrapped,
    /// `mcpc proxy` already, written by hand: left as it is.
    ByHand,
    /// An HTTP (or SSE) server: the proxy runs stdio servers only.
    Http,
    /// Not an entry wrap understands; why.
    Unknown(String),
}

/// One server of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// Its name (the key in the server map), decoded.
    pub name: String,
    /// The server map it is in (`mcpServers` or `servers`).
    pub map: &'static str,
    pub kind: Kind,
    /// The command and arguments the client runs now, decoded (empty for
    /// HTTP and unknown entries).
    pub command: Vec<String>,
}

/// How a stdio server is put behind the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wrapping {
    /// The `mcpc` the client starts (an absolute path: a client may not
    /// search the user's `PATH`).
    pub mcpc: String,
    /// `--policy`.
    pub policy: String,
    /// `--store`.
    pub store: String,
    /// `--audit`, if any.
    pub audit: Option<String>,
}

/// Why a configuration cannot be rewritten at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigError {
    /// Not JSON or JSONC.
    Syntax(String),
    /// No server map at the top level.
    NoServers,
    /// A server map that is not an object.
    NotAnObject(&'static str),
    /// One server name twice in a map (a client would read only one).
    Duplicate(String),
    /// Two edits of one entry overlap: the entry was edited by hand into a
    /// shape wrap does not write.
    Overlap(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Syntax(error) => write!(f, "not JSON or JSONC: {error}"),
            ConfigError::NoServers => {
                let names: Vec<String> = SERVER_MAPS
                    .iter()
                    .map(|(key, clients)| format!("`{key}` ({clients})"))
                    .collect();
                write!(
                    f,
                    "no server map at the top level: expected {}",
                    names.join(" or ")
                )
            }
            ConfigError::NotAnObject(key) => write!(f, "`{key}` is not an object"),
            ConfigError::Duplicate(name) => write!(
                f,
                "server `{name}` is defined twice; a client reads only one of them, so fix the file first"
            ),
            ConfigError::Overlap(name) => write!(
                f,
                "server `{name}` was edited into a shape mcpc wrap does not write; put it back by hand"
            ),
        }
    }
}

/// What an edit puts in place of its range.
#[derive(Debug, Clone)]
enum Put {
    /// New text.
    Text(String),
    /// The source text at this range (a value wrap saved, put back).
    Copy(Range<usize>),
}

/// A text edit against the one text all edits of a rewrite are made on.
type Edit = (Range<usize>, Put);

fn parse(text: &str) -> Result<Value<'_>, ConfigError> {
    // JSONC as VS Code reads it: comments and trailing commas, nothing looser.
    let options = ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    let collect = CollectOptions {
        comments: CommentCollectionStrategy::Off,
        tokens: false,
    };
    let parsed =
        parse_to_ast(text, &collect, &options).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    parsed
        .value
        .ok_or_else(|| ConfigError::Syntax("the file is empty".to_owned()))
}

fn name_of<'a>(prop: &'a ObjectProp<'_>) -> &'a str {
    prop.name.as_str()
}

/// The members of `object` named `key`.
fn members<'o, 'a>(object: &'o Object<'a>, key: &str) -> Vec<&'o ObjectProp<'a>> {
    object
        .properties
        .iter()
        .filter(|p| name_of(p) == key)
        .collect()
}

/// The one member named `key`, `Ok(None)` without one, an error with two.
fn member<'o, 'a>(object: &'o Object<'a>, key: &str) -> Result<Option<&'o ObjectProp<'a>>, String> {
    match members(object, key).as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => Err(format!("`{key}` is given twice")),
    }
}

/// Every string of an array, decoded, or `None` if one element is not a string.
fn strings(array: &Array<'_>) -> Option<Vec<String>> {
    array
        .elements
        .iter()
        .map(|v| v.as_string_lit().map(|s| s.value.to_string()))
        .collect()
}

/// The server maps of a parsed configuration: (key, the map).
fn server_maps<'v, 'a>(
    root: &'v Value<'a>,
) -> Result<Vec<(&'static str, &'v Object<'a>)>, ConfigError> {
    let Value::Object(root) = root else {
        return Err(ConfigError::NoServers);
    };
    let mut maps = Vec::new();
    for (key, _) in SERVER_MAPS {
        for prop in members(root, key) {
            match &prop.value {
                Value::Object(map) => maps.push((*key, map)),
                _ => return Err(ConfigError::NotAnObject(key)),
            }
        }
    }
    if maps.is_empty() {
        return Err(ConfigError::NoServers);
    }
    for (_, map) in &maps {
        let mut seen = std::collections::HashSet::new();
        for prop in &map.properties {
            if !seen.insert(name_of(prop)) {
                return Err(ConfigError::Duplicate(name_of(prop).to_owned()));
            }
        }
    }
    Ok(maps)
}

/// Whether a command names `mcpc` (`/usr/local/bin/mcpc`, `mcpc.exe`).
fn is_mcpc(command: &str) -> bool {
    let base = command.rsplit(['/', '\\']).next().unwrap_or(command);
    base == "mcpc" || base.eq_ignore_ascii_case("mcpc.exe")
}

/// An entry's parts, once classified.
struct Parts<'o, 'a> {
    kind: Kind,
    object: Option<&'o Object<'a>>,
    command: Option<&'o ObjectProp<'a>>,
    args: Option<&'o ObjectProp<'a>>,
    original: Option<&'o ObjectProp<'a>>,
    argv: Vec<String>,
}

fn classify<'o, 'a>(value: &'o Value<'a>) -> Parts<'o, 'a> {
    let unknown = |why: String| Parts {
        kind: Kind::Unknown(why),
        object: None,
        command: None,
        args: None,
        original: None,
        argv: Vec::new(),
    };
    let Value::Object(object) = value else {
        return unknown("the entry is not an object".to_owned());
    };
    let found = (|| {
        Ok::<_, String>((
            member(object, "command")?,
            member(object, "args")?,
            member(object, "type")?,
            member(object, ORIGINAL)?,
        ))
    })();
    let (command, args, kind, original) = match found {
        Ok(found) => found,
        Err(why) => return unknown(why),
    };
    let http = ["url", "serverUrl", "httpUrl"]
        .iter()
        .any(|key| !members(object, key).is_empty());
    let kind_text = kind.map(|k| k.value.as_string_lit().map(|s| s.value.to_string()));
    match kind_text {
        Some(None) => return unknown("`type` is not a string".to_owned()),
        Some(Some(t)) if t != "stdio" => {
            return Parts {
                kind: if ["http", "sse", "streamable-http", "streamableHttp"].contains(&t.as_str())
                {
                    Kind::Http
                } else {
                    Kind::Unknown(format!("`type` is `{t}`, not `stdio`"))
                },
                ..unknown(String::new())
            };
        }
        _ => {}
    }
    let Some(command) = command else {
        return Parts {
            kind: if http {
                Kind::Http
            } else {
                Kind::Unknown("no `command` and no `url`".to_owned())
            },
            ..unknown(String::new())
        };
    };
    let Some(program) = command.value.as_string_lit() else {
        return unknown("`command` is not a string".to_owned());
    };
    let arguments = match args.map(|a| &a.value) {
        None => Vec::new(),
        Some(Value::Array(array)) => match strings(array) {
            Some(list) => list,
            None => return unknown("`args` is not a list of strings".to_owned()),
        },
        Some(_) => return unknown("`args` is not a list".to_owned()),
    };
    let mut argv = vec![program.value.to_string()];
    argv.extend(arguments);
    let kind = if original.is_some() {
        Kind::Wrapped
    } else if is_mcpc(&argv[0]) && argv.get(1).is_some_and(|a| a == "proxy") {
        Kind::ByHand
    } else {
        Kind::Stdio
    };
    Parts {
        kind,
        object: Some(object),
        command: Some(command),
        args,
        original,
        argv,
    }
}

/// Every server of the configuration `text`, in file order.
pub(crate) fn servers(text: &str) -> Result<Vec<Server>, ConfigError> {
    let (body, _) = split_bom(text);
    let root = parse(body)?;
    let mut out = Vec::new();
    for (map, object) in server_maps(&root)? {
        for prop in &object.properties {
            let parts = classify(&prop.value);
            out.push(Server {
                name: name_of(prop).to_owned(),
                map,
                kind: parts.kind,
                command: parts.argv,
            });
        }
    }
    Ok(out)
}

/// A leading byte order mark, which the parser does not take, and the rest.
fn split_bom(text: &str) -> (&str, usize) {
    match text.strip_prefix('\u{feff}') {
        Some(rest) => (rest, '\u{feff}'.len_utf8()),
        None => (text, 0),
    }
}

fn source<'t>(text: &'t str, value: &impl Ranged) -> &'t str {
    let range = value.range();
    &text[range.start..range.end]
}

fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The separator before a member added after `anchor`'s value: a newline
/// (the file's own, `\r\n` or `\n`) and the indentation of the line the
/// entry's `command` key starts, when that key starts its line; else a space.
fn separator(text: &str, command_key: usize) -> String {
    let line_start = text[..command_key].rfind('\n').map_or(0, |i| i + 1);
    let indent = &text[line_start..command_key];
    if line_start == 0 || !indent.chars().all(|c| c == ' ' || c == '\t') {
        return " ".to_owned();
    }
    let newline = if text[..line_start].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    format!("{newline}{indent}")
}

/// Where removing `prop` from `object` starts and ends: from the end of the
/// member before it (so its own comma and separator go with it), or, for
/// the first member, up to the next member's start.
fn removal(object: &Object<'_>, prop: &ObjectProp<'_>) -> Range<usize> {
    let index = object
        .properties
        .iter()
        .position(|p| std::ptr::eq(p, prop))
        .unwrap_or(0);
    let end = prop.range.end;
    match index.checked_sub(1).and_then(|i| object.properties.get(i)) {
        Some(before) => before.range.end..end,
        None => match object.properties.get(index + 1) {
            Some(next) => prop.range.start..next.range.start,
            None => prop.range.start..end,
        },
    }
}

fn span(value: &impl Ranged) -> Range<usize> {
    let range = value.range();
    range.start..range.end
}

/// The edits that undo a wrapped entry, or why it cannot be undone.
fn undo_edits(parts: &Parts<'_, '_>) -> Result<Vec<Edit>, String> {
    let (Some(object), Some(command), Some(original)) =
        (parts.object, parts.command, parts.original)
    else {
        return Err("not wrapped".to_owned());
    };
    let Value::Object(saved) = &original.value else {
        return Err(format!("`{ORIGINAL}` is not an object"));
    };
    let saved_command = member(saved, "command")?
        .filter(|c| c.value.as_string_lit().is_some())
        .ok_or_else(|| format!("`{ORIGINAL}` has no `command` string"))?;
    let saved_args = member(saved, "args")?;
    let mut edits = vec![(span(&command.value), Put::Copy(span(&saved_command.value)))];
    match (saved_args, parts.args) {
        (Some(saved), Some(args)) => {
            edits.push((span(&args.value), Put::Copy(span(&saved.value))));
        }
        (None, Some(args)) => edits.push((removal(object, args), Put::Text(String::new()))),
        (Some(_), None) => return Err("its `args` were removed after wrapping".to_owned()),
        (None, None) => {}
    }
    edits.push((removal(object, original), Put::Text(String::new())));
    Ok(edits)
}

/// The edits that put a stdio entry behind the proxy.
fn wrap_edits(text: &str, name: &str, parts: &Parts<'_, '_>, how: &Wrapping) -> Vec<Edit> {
    let Some(command) = parts.command else {
        return Vec::new();
    };
    let mut new_args: Vec<String> = ["proxy", "--policy", &how.policy, "--server-id", name]
        .iter()
        .map(|s| json_string(s))
        .collect();
    new_args.extend([json_string("--store"), json_string(&how.store)]);
    if let Some(audit) = &how.audit {
        new_args.extend([json_string("--audit"), json_string(audit)]);
    }
    new_args.push(json_string("--"));
    // The original strings as written (their escapes kept).
    new_args.push(source(text, &command.value).to_owned());
    if let Some(Value::Array(array)) = parts.args.map(|a| &a.value) {
        new_args.extend(array.elements.iter().map(|e| source(text, e).to_owned()));
    }
    let new_args = format!("[{}]", new_args.join(", "));
    let mut saved = format!("{{\"command\": {}", source(text, &command.value));
    if let Some(args) = parts.args {
        saved.push_str(&format!(", \"args\": {}", source(text, &args.value)));
    }
    saved.push('}');
    let sep = separator(text, command.range.start);
    let original = format!(",{sep}{}: {saved}", json_string(ORIGINAL));
    let cv = command.value.range();
    let mut edits = vec![(cv.start..cv.end, Put::Text(json_string(&how.mcpc)))];
    match parts.args {
        Some(args) => {
            let av = args.value.range();
            edits.push((av.start..av.end, Put::Text(new_args)));
            edits.push((av.end..av.end, Put::Text(original)));
        }
        None => edits.push((
            cv.end..cv.end,
            Put::Text(format!(",{sep}\"args\": {new_args}{original}")),
        )),
    }
    edits
}

/// Applies `edits`, all made against `text`; `Err` if two overlap.
fn apply(text: &str, mut edits: Vec<Edit>) -> Result<String, ()> {
    edits.sort_by_key(|(range, _)| (range.start, range.end));
    if edits.windows(2).any(|pair| pair[0].0.end > pair[1].0.start) {
        return Err(());
    }
    let mut out = String::with_capacity(text.len() + 256 * edits.len());
    let mut at = 0;
    for (range, put) in edits {
        out.push_str(text.get(at..range.start).ok_or(())?);
        match put {
            Put::Text(new) => out.push_str(&new),
            Put::Copy(from) => out.push_str(text.get(from).ok_or(())?),
        }
        at = range.end;
    }
    out.push_str(text.get(at..).ok_or(())?);
    Ok(out)
}

/// What happened to one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Its name.
    pub name: String,
    /// Its server map.
    pub map: &'static str,
    /// What it was before the rewrite.
    pub kind: Kind,
    /// Whether the rewrite changed it.
    pub changed: bool,
    /// Why an entry of its kind was not rewritten, when it was not.
    pub skipped: Option<String>,
}

/// Rewrites `text`, `per_entry` giving each entry's edits (or why none).
/// All edits are made against the one parse of `text`; an entry's edits
/// stay inside its map, so entries never overlap one another.
fn rewrite(
    text: &str,
    mut per_entry: impl FnMut(&str, &str, &Parts<'_, '_>) -> Result<Vec<Edit>, String>,
) -> Result<(String, Vec<Outcome>), ConfigError> {
    let (body, bom) = split_bom(text);
    let root = parse(body)?;
    let mut all = Vec::new();
    let mut outcomes = Vec::new();
    for (map, object) in server_maps(&root)? {
        for prop in &object.properties {
            let name = name_of(prop);
            let parts = classify(&prop.value);
            let (edits, skipped) = match per_entry(body, name, &parts) {
                Ok(edits) => (edits, None),
                Err(why) => (Vec::new(), Some(why)),
            };
            // The entry's own edits must not overlap (a shape edited by hand).
            apply(body, edits.clone()).map_err(|()| ConfigError::Overlap(name.to_owned()))?;
            outcomes.push(Outcome {
                name: name.to_owned(),
                map,
                kind: parts.kind.clone(),
                changed: !edits.is_empty(),
                skipped,
            });
            all.extend(edits);
        }
    }
    let out = apply(body, all).map_err(|()| ConfigError::Overlap(String::new()))?;
    Ok((format!("{}{out}", &text[..bom]), outcomes))
}

/// `text` with every wrapped entry put back as it was.
pub(crate) fn undo(text: &str) -> Result<(String, Vec<Outcome>), ConfigError> {
    rewrite(text, |_, _, parts| match &parts.kind {
        Kind::Wrapped => undo_edits(parts),
        Kind::Unknown(why) => Err(why.clone()),
        _ => Ok(Vec::new()),
    })
}

/// `text` with every stdio entry behind the proxy: an entry wrapped before
/// is first put back as it was, so wrapping again with other settings
/// rewrites it, and wrapping twice is wrapping once.
pub(crate) fn wrap(text: &str, how: &Wrapping) -> Result<(String, Vec<Outcome>), ConfigError> {
    let before = servers(text)?;
    let (original, undone) = undo(text)?;
    let (wrapped, mut outcomes) = rewrite(&original, |body, name, parts| match &parts.kind {
        Kind::Stdio => Ok(wrap_edits(body, name, parts, how)),
        Kind::Http => Err("an HTTP server: mcpc proxy runs stdio servers".to_owned()),
        Kind::ByHand => Err("already runs mcpc proxy (written by hand)".to_owned()),
        Kind::Unknown(why) => Err(why.clone()),
        Kind::Wrapped => Err("still wrapped after undo".to_owned()),
    })?;
    // Report against the file as it was: an entry is changed when its
    // text differs from before, and a wrapped one stays `Wrapped`.
    let after = servers(&wrapped)?;
    for (((outcome, old), new), undone) in outcomes.iter_mut().zip(&before).zip(&after).zip(undone)
    {
        outcome.kind = old.kind.clone();
        outcome.changed = old.command != new.command;
        if undone.skipped.is_some() {
            outcome.skipped = undone.skipped;
        }
    }
    Ok((wrapped, outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value as Json;

    /// The value a client reads.
    fn to_json(value: &Value<'_>) -> Json {
        match value {
            Value::StringLit(s) => Json::from(s.value.to_string()),
            Value::NumberLit(n) => serde_json::from_str(n.value).expect("a number"),
            Value::BooleanLit(b) => Json::from(b.value),
            Value::NullKeyword(_) => Json::Null,
            Value::Array(a) => Json::Array(a.elements.iter().map(to_json).collect()),
            Value::Object(o) => Json::Object(
                o.properties
                    .iter()
                    .map(|p| (name_of(p).to_owned(), to_json(&p.value)))
                    .collect(),
            ),
        }
    }

    fn how(policy: &str) -> Wrapping {
        Wrapping {
            mcpc: "/usr/local/bin/mcpc".to_owned(),
            policy: policy.to_owned(),
            store: "/var/lib/mcpolicy/decisions.sqlite3".to_owned(),
            audit: None,
        }
    }

    /// How a generated configuration is laid out.
    #[derive(Debug, Clone)]
    struct Layout {
        newline: &'static str,
        indent: &'static str,
        /// JSONC: comments and trailing commas.
        jsonc: bool,
        /// Which server map (`mcpServers` or `servers`).
        map: &'static str,
    }

    fn layout() -> impl Strategy<Value = Layout> {
        (
            prop::sample::select(vec!["\n", "\r\n", ""]),
            prop::sample::select(vec!["  ", "    ", "\t"]),
            any::<bool>(),
            prop::sample::select(vec!["mcpServers", "servers"]),
        )
            .prop_map(|(newline, indent, jsonc, map)| Layout {
                newline,
                indent: if newline.is_empty() { " " } else { indent },
                jsonc,
                map,
            })
    }

    fn string() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "npx",
            "-y",
            "@acme/notes@2",
            "uvx",
            "C:\\Program Files\\x.exe",
            "a \"quoted\" arg",
            "é",
            "${input:token}",
            "",
            "--",
            "mcpc",
            "proxy",
            "/usr/bin/node",
        ])
        .prop_map(str::to_owned)
    }

    /// One entry: its members as (key, JSON text), in order.
    fn entry() -> impl Strategy<Value = Vec<(String, String)>> {
        let stdio = (
            string(),
            prop::option::of(prop::collection::vec(string(), 0..4)),
            prop::option::of(prop::collection::btree_map("[A-Z_]{1,6}", string(), 0..3)),
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(command, args, env, typed, order)| {
                let q = |s: &str| Json::from(s).to_string();
                let mut members = vec![("command".to_owned(), q(&command))];
                if let Some(args) = args {
                    let items: Vec<String> = args.iter().map(|a| q(a)).collect();
                    members.push(("args".to_owned(), format!("[{}]", items.join(", "))));
                }
                if let Some(env) = env {
                    let items: Vec<String> = env
                        .iter()
                        .map(|(k, v)| format!("{}: {}", q(k), q(v)))
                        .collect();
                    members.push(("env".to_owned(), format!("{{{}}}", items.join(", "))));
                }
                if typed {
                    members.push(("type".to_owned(), q("stdio")));
                }
                let n = members.len();
                members.rotate_left(usize::from(order) % n);
                members
            });
        let http = prop::sample::select(vec!["url", "serverUrl"])
            .prop_map(|key| vec![(key.to_owned(), "\"https://mcp.example.com/mcp\"".to_owned())]);
        prop_oneof![4 => stdio, 1 => http]
    }

    fn render(servers: &[(String, Vec<(String, String)>)], layout: &Layout) -> String {
        let Layout {
            newline: nl,
            indent: i,
            jsonc,
            map,
        } = layout;
        let comment = |text: &str| {
            if *jsonc {
                format!(" /* {text} */")
            } else {
                String::new()
            }
        };
        let trailing = if *jsonc { "," } else { "" };
        let mut out = format!("{{{nl}{i}\"{map}\": {{");
        for (n, (name, members)) in servers.iter().enumerate() {
            let sep = if n == 0 { "" } else { "," };
            out.push_str(&format!(
                "{sep}{}{nl}{i}{i}{}: {{",
                comment("next"),
                Json::from(name.as_str())
            ));
            for (m, (key, value)) in members.iter().enumerate() {
                let sep = if m == 0 { "" } else { "," };
                let value = if *jsonc && key == "args" {
                    // A comment inside the array, which undo must keep.
                    value.replacen('[', "[ /* args */", 1)
                } else {
                    value.clone()
                };
                out.push_str(&format!("{sep}{nl}{i}{i}{i}\"{key}\": {value}"));
            }
            out.push_str(&format!("{trailing}{nl}{i}{i}}}"));
        }
        let trailing = if servers.is_empty() { "" } else { trailing };
        out.push_str(&format!("{trailing}{nl}{i}}}{nl}}}{nl}"));
        out
    }

    fn config() -> impl Strategy<Value = String> {
        (
            prop::collection::btree_map("[a-z][a-z.\\- é]{0,8}", entry(), 0..5),
            layout(),
        )
            .prop_map(|(servers, layout)| {
                let servers: Vec<_> = servers.into_iter().collect();
                render(&servers, &layout)
            })
    }

    fn cases() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(512);
        ProptestConfig {
            cases,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(cases())]

        /// Undo after wrap gives the original bytes; wrapping twice is
        /// wrapping once; a re-wrap with other settings is a wrap with those.
        #[test]
        fn wrap_then_undo_is_the_identity_and_wrap_is_idempotent(text in config()) {
            let (wrapped, _) = wrap(&text, &how("/p/one.mcpolicy")).expect("wraps");
            let (undone, _) = undo(&wrapped).expect("undoes");
            prop_assert_eq!(&undone, &text);
            let (twice, outcomes) = wrap(&wrapped, &how("/p/one.mcpolicy")).expect("wraps again");
            prop_assert_eq!(&twice, &wrapped);
            prop_assert!(outcomes.iter().all(|o| !o.changed), "{:?}", outcomes);
            let (other, _) = wrap(&wrapped, &how("/p/two.mcpolicy")).expect("rewraps");
            let (direct, _) = wrap(&text, &how("/p/two.mcpolicy")).expect("wraps");
            prop_assert_eq!(other, direct);
            prop_assert_eq!(undo(&text).expect("undoes").0, text);
        }

        /// Read as a client reads it, every stdio server runs the proxy with
        /// its name as the server id and its own command after `--`; every
        /// other member of every entry is as it was.
        #[test]
        fn a_wrapped_server_runs_its_own_command_behind_the_proxy(text in config()) {
            let (wrapped, _) = wrap(&text, &how("/p/one.mcpolicy")).expect("wraps");
            let strict = |t: &str| to_json(&parse(split_bom(t).0).expect("parses"));
            let (before, after) = (strict(&text), strict(&wrapped));
            let map = if before.get("servers").is_some() { "servers" } else { "mcpServers" };
            let (before, after) = (&before[map], &after[map]);
            for (name, old) in before.as_object().expect("map") {
                let new = &after[name];
                let Some(command) = old.get("command").and_then(Json::as_str) else {
                    prop_assert_eq!(new, old);
                    continue;
                };
                let old_args: Vec<Json> = old.get("args").and_then(Json::as_array).cloned().unwrap_or_default();
                let by_hand = command == "mcpc" && old_args.first() == Some(&Json::from("proxy"));
                if by_hand {
                    prop_assert_eq!(new, old);
                    continue;
                }
                prop_assert_eq!(&new["command"], "/usr/local/bin/mcpc");
                let mut expected: Vec<Json> = ["proxy", "--policy", "/p/one.mcpolicy", "--server-id", name,
                    "--store", "/var/lib/mcpolicy/decisions.sqlite3", "--", command]
                    .iter().map(|s| Json::from(*s)).collect();
                expected.extend(old_args);
                prop_assert_eq!(&new["args"], &Json::from(expected));
                for (key, value) in old.as_object().expect("entry") {
                    if key != "command" && key != "args" {
                        prop_assert_eq!(&new[key], value, "{}", key);
                    }
                }
            }
        }
    }

    #[test]
    fn a_broken_file_is_refused_with_a_reason() {
        for (text, says) in [
            ("", "empty"),
            ("{ \"mcpServers\": { \"a\": {}, ", "JSON"),
            ("{ \"other\": {} }", "`mcpServers`"),
            ("{ \"servers\": [] }", "not an object"),
            (
                "{ \"servers\": { \"a\": {\"command\": \"x\"}, \"a\": {\"command\": \"y\"} } }",
                "twice",
            ),
            ("{ 'servers': {} }", "JSON"),
        ] {
            let error = wrap(text, &how("/p")).expect_err(text).to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
