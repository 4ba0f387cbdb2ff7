#![doc = include_str!("../README.md")]

pub mod alert;
mod calendar;
pub mod clock;
pub mod engine;
mod error;
pub mod frame;
mod glob;
pub mod identity;
mod json;
pub mod jsonrpc;
mod policy;
pub mod request;
mod statements;
pub mod store;
pub mod table;

pub use engine::Engine;
pub use error::Error;
pub use policy::Policy;
