#![doc = include_str!("../README.md")]

pub mod calendar;
pub mod clock;
pub mod engine;
pub mod frame;
pub mod glob;
pub mod identity;
pub mod request;
pub mod store;
pub mod table;
