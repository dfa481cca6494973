//! The operator's confirmation for `latchclaw approve`: a person at the
//! terminal, never anything a model wrote.

use crate::channels::{Approval, Approver, TtyApprover};
use crate::error::{Error, Result};
use crate::memory::PendingApproval;

/// Asks on the terminal whether pending approval `id` may be approved.
pub fn confirm(id: &str, p: &PendingApproval) -> Result<()> {
    let risk = crate::security::Risk::parse(&p.risk).unwrap_or(crate::security::Risk::High);
    let d = crate::security::Decision::ask(
        risk,
        format!(
            "pending approval {id} in conversation {}: {}",
            p.conversation_id, p.reason
        ),
    );
    match TtyApprover.ask(&p.tool, &d, &p.arguments) {
        Approval::Approved => Ok(()),
        Approval::Unavailable(_) => Err(Error::usage(
            "approving needs a terminal to confirm on, or --yes typed by the operator",
        )),
        Approval::Denied(why) => Err(Error::usage(format!("not approved: {why}"))),
    }
}
