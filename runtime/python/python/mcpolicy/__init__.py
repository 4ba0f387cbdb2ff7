"""The mcpolicy runtime for Python MCP clients.

``Policy`` is a compiled table (``mcpc compile policy.mcpolicy -o
policy.table.json``), ``Store`` where decisions and spend live (memory,
SQLite, PostgreSQL), ``Engine`` decides a server's
``sampling/createMessage`` params into a ``Grant`` (allow or trim), a
``Denial`` or a ``PendingConsent``. ``mcpolicy.mcp.PolicySampling`` wraps the
sampling callback of the official ``mcp`` SDK's ``ClientSession`` with all of
it. The engine is the Rust runtime's (``runtime/README.md``): the same
decisions, frames and identities byte for byte.
"""

from ._mcpolicy import (
    Denial,
    Engine,
    Error,
    Grant,
    ManualClock,
    PendingConsent,
    Policy,
    Store,
    __version__,
    request_identity,
)

Decision = Grant | Denial | PendingConsent

__all__ = [
    "Decision",
    "Denial",
    "Engine",
    "Error",
    "Grant",
    "ManualClock",
    "PendingConsent",
    "Policy",
    "Store",
    "__version__",
    "request_identity",
]
