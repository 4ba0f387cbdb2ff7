//! `mcpc store verify`: the check an open does not do. Opening a store is
//! constant-time, so a damaged page is found only when an operation reads
//! it; this reads everything (`StoreAdmin::check_integrity`) and says what
//! is damaged (`docs/spec/store.md`, "Verifying a store").

use std::process::ExitCode;

use serde_json::json;

use super::output::print_json;
use super::{Access, Common, Ctx, Format};
use crate::emit;

/// The exit codes of `mcpc store verify`.
pub(super) const EXIT_CODES: &str = "Exit codes: 0 the store is sound; 1 damage found (each \
finding is printed); 2 usage error, or a store that cannot be opened at all (missing, empty, \
not a store, an older or newer schema, unreachable).";

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(args: VerifyArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Read)?;
    let integrity = match ctx.store.check_integrity() {
        Ok(integrity) => integrity,
        // A page so damaged that the read transaction itself fails is a
        // finding about this store, not a usage error.
        Err(error) if error.code() == "store.corrupt" => mcpolicy_runtime::store::Integrity {
            checks: vec!["reading the store".to_owned()],
            findings: vec![error.to_string()],
        },
        Err(error) => return Err(crate::fail(format!("{}: {error}", error.code()))),
    };
    let sound = integrity.is_sound();
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "sound": sound,
            "checks": integrity.checks,
            "findings": integrity.findings,
        })),
        Format::Human => {
            let mut out = String::new();
            for check in &integrity.checks {
                out.push_str(&format!("checked: {check}\n"));
            }
            for finding in &integrity.findings {
                out.push_str(&format!(
                    "damaged: {}\n",
                    mcpolicy_proxy::log::escape_text(finding)
                ));
            }
            let count = integrity.findings.len();
            out.push_str(&if sound {
                format!("store {}: sound\n", ctx.spec)
            } else {
                format!(
                    "store {}: {count} {} found\n",
                    ctx.spec,
                    crate::plural(count as u64, "finding", "findings")
                )
            });
            emit(&out);
        }
    }
    Ok(if sound {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
