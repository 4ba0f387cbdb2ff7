"""The PostgreSQL store through the binding (runtime/postgres): two engines
on one store are one fleet, sharing counters and decisions
(docs/spec/store.md). Needs a cluster at MCPOLICY_TEST_POSTGRES; skipped
without one unless MCPOLICY_REQUIRE_POSTGRES=1 (CI), where it fails."""

import os
import uuid

import pytest

from conftest import require
from mcpolicy import Denial, Engine, Error, Grant, PendingConsent, Policy, Store

HELLO = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hello"}}], "maxTokens": 100}
SPEC = os.environ.get("MCPOLICY_TEST_POSTGRES")

if SPEC is None and not require("MCPOLICY_REQUIRE_POSTGRES"):
    pytest.skip("no MCPOLICY_TEST_POSTGRES", allow_module_level=True)


@pytest.fixture
def schema() -> str:
    assert SPEC is not None, "MCPOLICY_REQUIRE_POSTGRES=1 but MCPOLICY_TEST_POSTGRES is not set"
    return f"py_{uuid.uuid4().hex[:16]}"


def test_two_engines_on_one_postgres_store_share_the_budget_and_the_refusals(table_bytes: bytes, schema: str) -> None:
    policy = Policy.from_json(table_bytes)
    first = Engine(policy, Store.postgres(SPEC, schema=schema))
    second = Engine(policy, Store.postgres(SPEC, schema=schema))
    assert Store.postgres(SPEC, schema=schema).kind == "postgres"

    grant = first.decide("daily", HELLO)
    assert isinstance(grant, Grant)
    grant.complete(10)
    spent = second.decide("daily", {**HELLO, "maxTokens": 5})
    assert isinstance(spent, Denial) and spent.reason == "policy.budget_exhausted"

    pending = first.decide("asked", HELLO)
    assert isinstance(pending, PendingConsent)
    pending.refuse()
    replayed = second.decide("asked", HELLO)
    assert isinstance(replayed, Denial) and replayed.reason == "user.denied" and replayed.replayed


def test_an_unreachable_postgres_store_is_an_error_with_its_code() -> None:
    with pytest.raises(Error) as caught:
        Store.postgres("postgres://nobody@127.0.0.1:1/none?connect_timeout=1", call_timeout_ms=500)
    assert caught.value.code == "store.unavailable"
