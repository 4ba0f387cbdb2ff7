//! A read-only view of a JSON value ([`Json`]), implemented by serde_json's
//! [`Value`] and by the strict reader's borrowed tree, [`Node`].
//!
//! The schema check, the presentation-normal form, the canonical writer
//! and the engine's steps read a request through this view, so a request
//! read from bytes is decided from a [`Node`], whose strings borrow the
//! bytes and whose objects are vectors in document order, and never
//! becomes a `Value` tree unless a caller asks for its params as a `Map`
//! (`docs/spec/evaluation.md`, "Step 1: Validation"). A request an SDK
//! already read is decided from its `Value`. Both are held to read the
//! same documents (`runtime/tests/strict_reader.rs`), to give the same
//! canonical bytes, normal forms and keys (`identity/view_tests.rs`), and
//! the same decisions (`runtime/tests/tree_path.rs`).

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

/// What a JSON value is, with its contents borrowed.
pub(crate) enum Kind<'v, J: Json> {
    Null,
    Bool(bool),
    Number(&'v Number),
    String(&'v str),
    Array(&'v [J]),
    Object(&'v J::Object),
}

/// A JSON value that can be read, and (for the normal form, which builds
/// a changed copy of what it must change) built.
pub(crate) trait Json: Clone + Sized {
    /// Its objects.
    type Object: Object<Value = Self>;

    /// What it is.
    fn kind(&self) -> Kind<'_, Self>;

    /// A string value.
    fn from_string(text: String) -> Self;

    /// An array of `items`.
    fn from_items(items: Vec<Self>) -> Self;

    /// An object of `members`, whose keys are distinct.
    fn from_members(members: Vec<(String, Self)>) -> Self;

    /// The same value as a serde_json [`Value`].
    fn to_value(&self) -> Value;

    fn as_str(&self) -> Option<&str> {
        match self.kind() {
            Kind::String(text) => Some(text),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Self]> {
        match self.kind() {
            Kind::Array(items) => Some(items),
            _ => None,
        }
    }

    fn as_object(&self) -> Option<&Self::Object> {
        match self.kind() {
            Kind::Object(object) => Some(object),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<&Number> {
        match self.kind() {
            Kind::Number(number) => Some(number),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self.kind(), Kind::Null)
    }

    /// The member `key` of an object; `None` for a missing member and for
    /// anything not an object.
    fn get(&self, key: &str) -> Option<&Self> {
        self.as_object()?.get(key)
    }
}

/// A JSON object: members with distinct keys.
pub(crate) trait Object {
    /// Its members' values.
    type Value: Json<Object = Self>;

    fn get(&self, key: &str) -> Option<&Self::Value>;

    fn len(&self) -> usize;

    /// The members, in the object's own order (see [`Object::in_byte_order`]).
    fn members(&self) -> impl Iterator<Item = (&str, &Self::Value)>;

    /// Whether [`Object::members`] yields the keys in byte order, as
    /// serde_json's default `BTreeMap` does; document order is not.
    fn in_byte_order(&self) -> bool;

    /// The same object as a serde_json [`Map`].
    fn to_map(&self) -> Map<String, Value>;
}

impl Json for Value {
    type Object = Map<String, Value>;

    #[inline]
    fn kind(&self) -> Kind<'_, Self> {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(b) => Kind::Bool(*b),
            Value::Number(n) => Kind::Number(n),
            Value::String(s) => Kind::String(s),
            Value::Array(items) => Kind::Array(items),
            Value::Object(map) => Kind::Object(map),
        }
    }

    fn from_string(text: String) -> Self {
        Value::String(text)
    }

    fn from_items(items: Vec<Self>) -> Self {
        Value::Array(items)
    }

    fn from_members(members: Vec<(String, Self)>) -> Self {
        Value::Object(members.into_iter().collect())
    }

    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl Object for Map<String, Value> {
    type Value = Value;

    #[inline]
    fn get(&self, key: &str) -> Option<&Value> {
        Map::get(self, key)
    }

    fn len(&self) -> usize {
        Map::len(self)
    }

    fn members(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.iter().map(|(key, value)| (key.as_str(), value))
    }

    fn in_byte_order(&self) -> bool {
        crate::identity::maps_iterate_sorted()
    }

    fn to_map(&self) -> Map<String, Value> {
        self.clone()
    }
}

/// A JSON value as the strict reader's fast path reads it: strings
/// borrowed from the text unless an escape had to be decoded, objects as
/// their members in document order. serde_json's [`Number`] holds numbers
/// exactly as a [`Value`] would.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Members<'a>),
}

/// An object's members in document order; the reader refuses two keys
/// equal after NFC, so keys are distinct.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Members<'a>(pub(crate) Vec<(Cow<'a, str>, Node<'a>)>);

impl<'a> Json for Node<'a> {
    type Object = Members<'a>;

    #[inline]
    fn kind(&self) -> Kind<'_, Self> {
        match self {
            Node::Null => Kind::Null,
            Node::Bool(b) => Kind::Bool(*b),
            Node::Number(n) => Kind::Number(n),
            Node::String(s) => Kind::String(s),
            Node::Array(items) => Kind::Array(items),
            Node::Object(members) => Kind::Object(members),
        }
    }

    fn from_string(text: String) -> Self {
        Node::String(Cow::Owned(text))
    }

    fn from_items(items: Vec<Self>) -> Self {
        Node::Array(items)
    }

    fn from_members(members: Vec<(String, Self)>) -> Self {
        Node::Object(Members(
            members
                .into_iter()
                .map(|(key, value)| (Cow::Owned(key), value))
                .collect(),
        ))
    }

    fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.as_ref().to_owned()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(members) => Value::Object(members.to_map()),
        }
    }
}

impl<'a> Object for Members<'a> {
    type Value = Node<'a>;

    #[inline]
    fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn members(&self) -> impl Iterator<Item = (&str, &Node<'a>)> {
        self.0.iter().map(|(key, value)| (key.as_ref(), value))
    }

    fn in_byte_order(&self) -> bool {
        false
    }

    fn to_map(&self) -> Map<String, Value> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_ref().to_owned(), value.to_value()))
            .collect()
    }
}
