//! A verified table: the only thing an [`crate::Engine`] runs.

use std::sync::Arc;

use crate::error::Error;
use crate::table::{TABLE_FORMAT, Table, TableError};

/// A compiled table that passed verification (format version, every block
/// digest, every reason reference, reserved reasons, codes within `i32`),
/// with its server patterns in NFC. Cheap to clone.
///
/// [`Table`] stays a public description of the format (the compiler builds
/// one); only a `Policy` can be run.
#[derive(Debug, Clone)]
pub struct Policy {
    table: Arc<Table>,
}

impl Policy {
    /// Parses and verifies a table file (`mcpc compile` output).
    pub fn from_json(bytes: &[u8]) -> Result<Policy, Error> {
        Ok(Policy {
            table: Arc::new(Table::from_json(bytes)?),
        })
    }

    /// Verifies a table built in memory (e.g. by the compiler) exactly as
    /// [`Policy::from_json`] verifies a file.
    pub fn verify(mut table: Table) -> Result<Policy, Error> {
        if table.format != TABLE_FORMAT {
            return Err(TableError::UnknownFormat {
                found: table.format,
            }
            .into());
        }
        table.verify()?;
        table.normalize_patterns();
        Ok(Policy {
            table: Arc::new(table),
        })
    }

    /// The verified table.
    pub fn table(&self) -> &Table {
        &self.table
    }
}

impl Policy {
    /// A table the engine derived from a verified one (only normalised).
    pub(crate) fn verified(table: Table) -> Policy {
        Policy {
            table: Arc::new(table),
        }
    }
}
