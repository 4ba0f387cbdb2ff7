//! The runtime's public API, held by a snapshot (`public_api.txt`): a test
//! fails when a public item is added, removed or changes its signature.
//! Regenerate after a deliberate change with
//! `UPDATE_EXPECT=1 cargo test -p mcpolicy-runtime --test public_api`, and
//! update the list in `runtime/README.md`.
//!
//! Why this mechanism: it must run in plain `cargo test`, offline, on the
//! stable toolchain. rustdoc's JSON output (what `cargo public-api` reads)
//! needs a nightly toolchain; compiling a file that uses every item catches
//! removals but not additions. So the test reads `runtime/src` with `syn`,
//! walks the module tree from `lib.rs` as the compiler resolves it (public
//! modules, and items re-exported from private ones), and writes one line
//! per public item: its signature, its public fields and variants, the
//! methods of its inherent impls, the traits it implements, and the
//! attributes that are part of a contract (`derive`, `non_exhaustive`,
//! `doc(hidden)`, a `cfg(feature = …)` that gates the item).
//!
//! Items a `macro_rules!` writes are tokens to `syn`. Two more walks list
//! them: `macro_items` reads the body of each of the crate's macros for the
//! `pub` items, fields and methods it writes (lines `macro …`), and
//! `declared_statements` runs the statement declaration
//! (`for_each_statement!`) through a callback of this test's own, one line
//! per field of `table::EffectiveBlock` and per variant of
//! `engine::Statement` with its type, defaults, keyword, step and order
//! (lines `declared …`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Fields, ImplItem, Item, TraitItem, UseTree, Visibility};

/// Every module of the crate: its path (`crate::engine`) and items.
struct Crate {
    modules: BTreeMap<String, Vec<Item>>,
}

fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.to_token_stream().to_string().contains("test"))
}

fn load(path: &Path, module: &str, modules: &mut BTreeMap<String, Vec<Item>>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dir = if path.ends_with("lib.rs") || path.ends_with("mod.rs") {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        path.with_extension("")
    };
    let mut items = Vec::new();
    for item in file.items {
        if let Item::Mod(m) = &item {
            if is_test_only(&m.attrs) {
                continue;
            }
            let child = format!("{module}::{}", m.ident);
            match &m.content {
                Some((_, inline)) => {
                    modules.insert(child, inline.clone());
                }
                None => {
                    let flat = dir.join(format!("{}.rs", m.ident));
                    let nested = dir.join(m.ident.to_string()).join("mod.rs");
                    let file: PathBuf = if flat.exists() { flat } else { nested };
                    load(&file, &child, modules);
                }
            }
        }
        items.push(item);
    }
    modules.insert(module.to_owned(), items);
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// Tokens as text, with the spaces `to_string` puts around punctuation removed
/// where Rust writes none (cosmetic only: the snapshot stays deterministic).
fn text(tokens: impl ToTokens) -> String {
    tidy(tokens.to_token_stream().to_string())
}

/// [`text`] of tokens already rendered by `to_string`.
fn tidy(mut s: String) -> String {
    for (from, to) in [
        (" ,", ","),
        (" ;", ";"),
        (" :: ", "::"),
        (":: ", "::"),
        (" ::", "::"),
        ("& ", "&"),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" [", "["),
        ("[ ", "["),
        (" ]", "]"),
        (" :", ":"),
        ("' ", "'"),
        ("# ", "#"),
        ("! ", "!"),
        (" .", "."),
        ("$ ", "$"),
    ] {
        s = s.replace(from, to);
    }
    s.replace("->", " -> ")
        .replace("  ", " ")
        .replace(" { }", "")
        .replace("(mut ", "(")
        .replace(", mut ", ", ")
        .replace(",)", ")")
        .replace(",>", ">")
}

/// The attributes that are part of an item's contract.
fn contract_attrs(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| {
            let rendered = text(a);
            a.path().is_ident("derive")
                || a.path().is_ident("non_exhaustive")
                || a.path().is_ident("repr")
                || (a.path().is_ident("doc") && rendered.contains("hidden"))
                // Items a feature gates, `bench` above all: not an API.
                || (a.path().is_ident("cfg") && rendered.contains("feature"))
        })
        .map(|a| format!("{} ", text(a)))
        .collect()
}

fn fields(fields: &Fields, all: bool) -> String {
    let shown: Vec<String> = fields
        .iter()
        .filter(|f| all || is_pub(&f.vis))
        .map(|f| {
            let name = f
                .ident
                .as_ref()
                .map(|i| format!("{i}: "))
                .unwrap_or_default();
            format!("{}{name}{}", contract_attrs(&f.attrs), text(&f.ty))
        })
        .collect();
    let hidden = fields.iter().any(|f| !all && !is_pub(&f.vis));
    let rest = if hidden { ", .." } else { "" };
    match fields {
        Fields::Named(_) if shown.is_empty() => " { .. }".to_owned(),
        Fields::Unnamed(_) if shown.is_empty() => "(..)".to_owned(),
        Fields::Named(_) => format!(" {{ {}{rest} }}", shown.join(", ")),
        Fields::Unnamed(_) => format!("({}{rest})", shown.join(", ")),
        Fields::Unit => String::new(),
    }
}

/// The last identifier of an impl's self type (`Arc<S>` → `Arc`).
fn self_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        other => text(other),
    }
}

impl Crate {
    fn new() -> Crate {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
        let mut modules = BTreeMap::new();
        load(&root, "crate", &mut modules);
        Crate { modules }
    }

    /// Modules reachable from outside: `crate`, then `pub mod`s of those.
    fn public_modules(&self) -> BTreeSet<String> {
        let mut public = BTreeSet::from(["crate".to_owned()]);
        let mut stack = vec!["crate".to_owned()];
        while let Some(module) = stack.pop() {
            for item in &self.modules[&module] {
                if let Item::Mod(m) = item
                    && is_pub(&m.vis)
                    && !is_test_only(&m.attrs)
                {
                    let child = format!("{module}::{}", m.ident);
                    public.insert(child.clone());
                    stack.push(child);
                }
            }
        }
        public
    }

    /// Every inherent method, trait impl line, keyed by self type name.
    fn impls(&self) -> (BTreeMap<String, Vec<String>>, BTreeMap<String, Vec<String>>) {
        let mut methods: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut traits: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for items in self.modules.values() {
            for item in items {
                let Item::Impl(imp) = item else { continue };
                if is_test_only(&imp.attrs) {
                    continue;
                }
                let name = self_name(&imp.self_ty);
                match &imp.trait_ {
                    Some((_, path, _)) => {
                        let mut head = imp.clone();
                        head.items.clear();
                        head.attrs.clear();
                        let line = text(&head);
                        // Listed under the type, and under the trait (for
                        // impls on types from elsewhere: `Arc<S>`, `Vec<u8>`).
                        let trait_name = path
                            .segments
                            .last()
                            .map(|s| format!("trait {}", s.ident))
                            .unwrap_or_default();
                        traits.entry(trait_name).or_default().push(line.clone());
                        traits.entry(name).or_default().push(line);
                    }
                    None => {
                        for member in &imp.items {
                            match member {
                                ImplItem::Fn(f) if is_pub(&f.vis) => {
                                    methods.entry(name.clone()).or_default().push(format!(
                                        "{}{}",
                                        contract_attrs(&f.attrs),
                                        text(&f.sig)
                                    ));
                                }
                                ImplItem::Const(c) if is_pub(&c.vis) => {
                                    methods.entry(name.clone()).or_default().push(format!(
                                        "const {}: {}",
                                        c.ident,
                                        text(&c.ty)
                                    ));
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
        (methods, traits)
    }

    /// The item named `name` in `module`, if the crate defines one there.
    fn find(&self, module: &str, name: &str) -> Option<&Item> {
        self.modules
            .get(module)?
            .iter()
            .find(|item| item_name(item).as_deref() == Some(name))
    }
}

fn item_name(item: &Item) -> Option<String> {
    Some(match item {
        Item::Fn(f) => f.sig.ident.to_string(),
        Item::Struct(s) => s.ident.to_string(),
        Item::Enum(e) => e.ident.to_string(),
        Item::Trait(t) => t.ident.to_string(),
        Item::Const(c) => c.ident.to_string(),
        Item::Static(s) => s.ident.to_string(),
        Item::Type(t) => t.ident.to_string(),
        _ => return None,
    })
}

/// The lines describing one item at `path`.
fn render(
    path: &str,
    item: &Item,
    methods: &BTreeMap<String, Vec<String>>,
    traits: &BTreeMap<String, Vec<String>>,
    out: &mut Vec<String>,
) {
    let type_lines = |name: &str, out: &mut Vec<String>| {
        for m in methods.get(name).into_iter().flatten() {
            out.push(format!("{path}::{m}"));
        }
        for t in traits.get(name).into_iter().flatten() {
            out.push(format!("{path}: {t}"));
        }
    };
    match item {
        Item::Fn(f) => out.push(format!(
            "{}{path}: {}",
            contract_attrs(&f.attrs),
            text(&f.sig)
        )),
        Item::Const(c) => out.push(format!("{path}: const {}", text(&c.ty))),
        Item::Static(s) => out.push(format!("{path}: static {}", text(&s.ty))),
        Item::Type(t) => out.push(format!("{path}: type = {}", text(&t.ty))),
        Item::Struct(s) => {
            out.push(format!(
                "{}{path}: struct{}{}",
                contract_attrs(&s.attrs),
                text(&s.generics),
                fields(&s.fields, false)
            ));
            type_lines(&s.ident.to_string(), out);
        }
        Item::Enum(e) => {
            out.push(format!(
                "{}{path}: enum{}",
                contract_attrs(&e.attrs),
                text(&e.generics)
            ));
            for v in &e.variants {
                let discriminant = v
                    .discriminant
                    .as_ref()
                    .map(|(_, d)| format!(" = {}", text(d)))
                    .unwrap_or_default();
                out.push(format!(
                    "{path}::{}{}{}{discriminant}",
                    contract_attrs(&v.attrs),
                    v.ident,
                    fields(&v.fields, true)
                ));
            }
            type_lines(&e.ident.to_string(), out);
        }
        Item::Trait(t) => {
            let mut head = t.clone();
            head.items.clear();
            head.attrs.clear();
            out.push(format!(
                "{}{path}: {}",
                contract_attrs(&t.attrs),
                text(&head)
            ));
            for member in &t.items {
                match member {
                    TraitItem::Fn(f) => {
                        let provided = if f.default.is_some() {
                            " (provided)"
                        } else {
                            ""
                        };
                        out.push(format!("{path}::{}{provided}", text(&f.sig)));
                    }
                    TraitItem::Type(ty) => out.push(format!("{path}::type {}", ty.ident)),
                    TraitItem::Const(c) => out.push(format!("{path}::const {}", c.ident)),
                    _ => {}
                }
            }
            for line in traits
                .get(&format!("trait {}", t.ident))
                .into_iter()
                .flatten()
            {
                out.push(format!("{path}: {line}"));
            }
        }
        _ => {}
    }
}

/// Flattens a `use` tree into (target path, name it is known by).
fn uses(tree: &UseTree, prefix: &str, out: &mut Vec<(String, String)>) {
    match tree {
        UseTree::Path(p) => uses(&p.tree, &format!("{prefix}{}::", p.ident), out),
        UseTree::Name(n) => out.push((format!("{prefix}{}", n.ident), n.ident.to_string())),
        UseTree::Rename(r) => out.push((format!("{prefix}{}", r.ident), r.rename.to_string())),
        UseTree::Group(g) => {
            for t in &g.items {
                uses(t, prefix, out);
            }
        }
        UseTree::Glob(_) => out.push((format!("{prefix}*"), "*".to_owned())),
    }
}

/// A `use` path made absolute from `module`.
fn absolute(module: &str, path: &str) -> String {
    if let Some(rest) = path.strip_prefix("crate::") {
        format!("crate::{rest}")
    } else if let Some(rest) = path.strip_prefix("self::") {
        format!("{module}::{rest}")
    } else if let Some(rest) = path.strip_prefix("super::") {
        let parent = module.rsplit_once("::").map_or("crate", |(p, _)| p);
        format!("{parent}::{rest}")
    } else {
        format!("{module}::{path}")
    }
}

fn public_api() -> String {
    let krate = Crate::new();
    let public = krate.public_modules();
    let (methods, traits) = krate.impls();
    let mut out = Vec::new();
    for module in &public {
        out.push(format!("mod {module}"));
        for item in &krate.modules[module] {
            let vis = match item {
                Item::Fn(f) => &f.vis,
                Item::Struct(s) => &s.vis,
                Item::Enum(e) => &e.vis,
                Item::Trait(t) => &t.vis,
                Item::Const(c) => &c.vis,
                Item::Static(s) => &s.vis,
                Item::Type(t) => &t.vis,
                Item::Use(u) => &u.vis,
                // Items generated from the statement declaration: named
                // here, and listed one by one by `macro_items` and
                // `declared_statements`.
                Item::Macro(m)
                    if m.mac.path.is_ident("for_each_statement")
                        || m.mac
                            .path
                            .segments
                            .last()
                            .is_some_and(|s| s.ident == "for_each_statement") =>
                {
                    out.push(format!("{module}: {}", m.mac.to_token_stream()));
                    continue;
                }
                _ => continue,
            };
            if !is_pub(vis) {
                continue;
            }
            if let Item::Use(u) = item {
                let mut targets = Vec::new();
                uses(&u.tree, "", &mut targets);
                for (target, name) in targets {
                    let target = absolute(module, &target);
                    let (target_module, target_name) =
                        target.rsplit_once("::").unwrap_or(("crate", &target));
                    let path = format!("{module}::{name}");
                    match krate.find(target_module, target_name) {
                        // Re-exported from a private module: its whole description.
                        Some(found) if !public.contains(target_module) => {
                            render(&path, found, &methods, &traits, &mut out);
                        }
                        _ => out.push(format!("{path}: pub use {target}")),
                    }
                }
                continue;
            }
            let name = item_name(item).unwrap_or_default();
            render(
                &format!("{module}::{name}"),
                item,
                &methods,
                &traits,
                &mut out,
            );
        }
    }
    out.extend(macro_items(&krate, &methods, &traits));
    out.extend(declared_statements());
    out.join("\n") + "\n"
}

/// The public items a `macro_rules!` of the crate writes, which `syn`
/// sees only as tokens: every `pub` item, field and method in the macro's
/// body, with the `impl` it sits in and its contract attributes, as
/// written there (metavariables included). Listed under the module that
/// defines the macro (`block_of_statements` in `crate::table`,
/// `deciding_statements` in `crate::engine`), each line starting `macro`.
/// The fields and variants a `$(…)*` repeats are the declaration's entries,
/// which `declared_statements` lists.
fn macro_items(
    krate: &Crate,
    methods: &BTreeMap<String, Vec<String>>,
    traits: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (module, items) in &krate.modules {
        for item in items {
            let Item::Macro(m) = item else { continue };
            if !m.mac.path.is_ident("macro_rules") {
                continue;
            }
            let Some(name) = &m.ident else { continue };
            let buffer = syn::buffer::TokenBuffer::new2(m.mac.tokens.clone());
            let mut found = Vec::new();
            scan(buffer.begin(), "", &mut found);
            for line in found {
                out.push(format!("macro {module}::{name}: {line}"));
                // A type the macro declares: the methods and traits that
                // plain impls outside it give the type.
                let declared = line
                    .split_once("pub struct ")
                    .or_else(|| line.split_once("pub enum "))
                    .filter(|(_, rest)| !rest.contains(' '));
                if let Some((_, ty)) = declared {
                    let path = format!("{module}::{ty}");
                    for m in methods.get(ty).into_iter().flatten() {
                        out.push(format!("{path}::{m}"));
                    }
                    for t in traits.get(ty).into_iter().flatten() {
                        out.push(format!("{path}: {t}"));
                    }
                }
            }
        }
    }
    out
}

/// Walks tokens for `pub` heads (up to a `{…}` group, `;` or `,`), and the
/// `impl` heads they sit in, into `out`.
fn scan(mut cursor: syn::buffer::Cursor, within: &str, out: &mut Vec<String>) {
    let mut attrs: Vec<String> = Vec::new();
    while let Some((_, next)) = cursor.token_tree() {
        let word = cursor.ident().map(|(i, _)| i.to_string());
        if cursor.punct().is_some_and(|(p, _)| p.as_char() == '#')
            && let Some((attr, after)) = next.token_tree()
        {
            let attr = tidy(format!("#{attr}"));
            if ["#[derive", "#[non_exhaustive", "#[repr", "#[serde", "#[cfg"]
                .iter()
                .any(|p| attr.starts_with(p))
            {
                attrs.push(attr);
            }
            cursor = after;
            continue;
        }
        match word.as_deref() {
            Some(head @ ("pub" | "impl")) => {
                // The head: tokens to the body, a `;` or a `,`.
                let mut words = Vec::new();
                let mut at = cursor;
                let mut body = None;
                while let Some((t, after)) = at.token_tree() {
                    let rendered = t.to_string();
                    if rendered.starts_with('{') {
                        body = at.any_group().map(|(inside, _, _, _)| inside);
                        at = after;
                        break;
                    }
                    if rendered == ";" || rendered == "," {
                        at = after;
                        break;
                    }
                    words.push(rendered);
                    at = after;
                }
                let line = tidy(words.join(" "));
                if head == "pub" {
                    let attrs = attrs.iter().map(|a| format!("{a} ")).collect::<String>();
                    out.push(format!("{within}{attrs}{line}"));
                }
                if let Some(inside) = body {
                    scan(inside, &format!("{line}: "), out);
                }
                attrs.clear();
                cursor = at;
            }
            _ => {
                if let Some((inside, _, _, after)) = cursor.any_group() {
                    scan(inside, within, out);
                    cursor = after;
                } else {
                    cursor = next;
                }
                attrs.clear();
            }
        }
    }
}

/// The statement declaration itself, read through a callback of this
/// test's own (`for_each_statement!` calls it as it calls the runtime's):
/// each entry's `EffectiveBlock` field with its type, attributes, built-in
/// and applied defaults, and for a statement that decides, its
/// `engine::Statement` variant, keyword, step and order. The test fails to
/// compile when an entry takes a shape the callbacks do not read.
fn declared_statements() -> Vec<String> {
    macro_rules! declared {
        (decides { $($decides:tt)* } alerts { $($alerts:tt)* }) => {{
            let mut out = Vec::new();
            declared!(@entries out, $($decides)* $($alerts)*);
            out
        }};
        (@entries $out:ident, $(
            $(#[doc = $doc:literal])*
            $variant:ident $(($index:ty))? {
                keyword: $keyword:literal,
                $(#[$attr:meta])*
                field: $field:ident: $ty:ty = $default:expr,
                $(applied: $applied:expr,)?
                reason: $reason:expr,
                $(step: $step:ident,)?
                $(order: $order:literal,)?
            }
        )*) => {$(
            $out.push(tidy(format!(
                "declared crate::table::EffectiveBlock::{}: {}{} = {}{}",
                stringify!($field),
                concat!($("#[", stringify!($attr), "] ",)*),
                stringify!($ty),
                stringify!($default),
                concat!($("; applied: ", stringify!($applied))?),
            ).split_whitespace().collect::<Vec<_>>().join(" ")));
            let index: &str = concat!("" $(, "(", stringify!($index), ")")?);
            $($out.push(tidy(format!(
                "declared crate::engine::Statement::{}{}: `{}`, step {}, order {}, reason {}",
                stringify!($variant),
                index,
                $keyword,
                stringify!($step),
                $order,
                stringify!($reason),
            )));)?
            let _ = index;
        )*};
    }
    mcpolicy_runtime::for_each_statement!(declared)
}

#[test]
fn the_public_api_is_the_snapshot() {
    expect_test::expect_file!["public_api.txt"].assert_eq(&public_api());
}
