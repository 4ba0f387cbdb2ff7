"""The engine through the binding: decisions as Python objects with their
frames (docs/spec/frames.md), the transitions after a decision
(docs/spec/evaluation.md, "After the decision") and errors with stable codes."""

import json

import pytest

from mcpolicy import Denial, Engine, Error, Grant, ManualClock, PendingConsent, Policy, Store

HELLO = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hello"}}], "maxTokens": 100}
NOON = 1_767_268_800_000  # 2026-01-01T12:00:00Z


@pytest.fixture
def engine(table_bytes: bytes) -> Engine:
    return Engine(Policy.from_json(table_bytes), Store.memory(), ManualClock(NOON))


def test_an_allow_is_a_grant_with_the_params_as_sent(engine: Engine) -> None:
    grant = engine.decide("open", HELLO, id=7)
    assert isinstance(grant, Grant)
    assert (grant.kind, grant.is_trim, grant.meta, grant.id) == ("allow", False, None, 7)
    assert grant.params() == HELLO
    assert grant.deadline_ms == 10_000
    assert grant.annotate({"model": "m"}) == {"model": "m"}
    grant.complete(42)
    assert grant.settled


def test_a_trim_narrows_the_params_and_annotates_the_result(engine: Engine) -> None:
    grant = engine.decide("summarizer", {**HELLO, "maxTokens": 9000, "includeContext": "allServers"})
    assert isinstance(grant, Grant) and grant.kind == "trim"
    assert grant.params()["maxTokens"] == 256
    assert grant.params()["includeContext"] == "thisServer"
    meta = grant.meta
    assert meta["maxTokens"] == {"requested": 9000, "applied": 256, "reason": "policy.max_tokens"}
    # `_meta` keys the model already set are kept (docs/spec/frames.md, "Trim annotations").
    result = grant.annotate({"model": "m", "_meta": {"maxTokens": "own"}})
    assert result["_meta"]["maxTokens"] == "own"
    assert result["_meta"]["context"] == meta["context"]


def test_a_denial_carries_its_frame_as_bytes_and_as_error_data(engine: Engine) -> None:
    denial = engine.decide("closed", HELLO, id="req-1")
    assert isinstance(denial, Denial)
    assert (denial.code, denial.reason, denial.retryable) == (-32010, "policy.sampling_disabled", False)
    frame = json.loads(denial.reply())
    assert frame["id"] == "req-1"
    assert frame["error"] == denial.error_data()
    assert json.loads(denial.reply(id=9))["id"] == 9
    assert denial.error_data()["data"]["reason"] == "policy.sampling_disabled"
    again = engine.decide("closed", HELLO)
    assert isinstance(again, Denial) and again.replayed


def test_consent_refused_is_stored_and_approved_is_remembered(engine: Engine) -> None:
    pending = engine.decide("asked", HELLO)
    assert isinstance(pending, PendingConsent) and pending.kind == "needs_consent"
    assert pending.params() == HELLO
    denial = pending.refuse()
    assert (denial.code, denial.reason, denial.recorded) == (-1, "user.denied", True)
    assert isinstance(engine.decide("asked", HELLO), Denial)

    other = {**HELLO, "messages": [{"role": "user", "content": {"type": "text", "text": "Other"}}]}
    pending = engine.decide("asked", other)
    assert isinstance(pending, PendingConsent)
    grant = pending.approve()
    assert isinstance(grant, Grant)
    grant.complete(1)
    replayed = engine.decide("asked", other)
    assert isinstance(replayed, Grant) and replayed.replayed


def test_an_abandoned_prompt_decides_nothing(engine: Engine) -> None:
    pending = engine.decide("asked", HELLO)
    assert isinstance(pending, PendingConsent)
    pending.abandon()
    assert isinstance(engine.decide("asked", HELLO), PendingConsent)


def test_a_deadline_miss_is_the_deadline_denial_and_is_replayed(engine: Engine) -> None:
    grant = engine.decide("slow", HELLO)
    assert isinstance(grant, Grant) and grant.deadline_ms == 200
    denial = grant.deadline_missed()
    assert (denial.code, denial.reason) == (-32010, "policy.deadline")
    assert isinstance(engine.decide("slow", HELLO), Denial)


def test_a_token_budget_counts_the_reported_usage(table_bytes: bytes) -> None:
    clock = ManualClock(NOON)
    engine = Engine(Policy.from_json(table_bytes), Store.memory(), clock)
    engine.decide("tokens", {**HELLO, "maxTokens": 600}).complete(900)
    refused = engine.decide("tokens", {**HELLO, "maxTokens": 200})
    assert isinstance(refused, Denial) and refused.reason == "policy.budget_exhausted"
    assert refused.timing[0] == "resetsAt"
    clock.advance(24 * 3600 * 1000)
    assert isinstance(engine.decide("tokens", {**HELLO, "maxTokens": 200}), Grant)


def test_a_grant_is_settled_once(engine: Engine) -> None:
    grant = engine.decide("open", HELLO)
    grant.complete(1)
    with pytest.raises(Error) as caught:
        grant.complete(1)
    assert caught.value.code == "binding.consumed"
    with pytest.raises(Error):
        grant.deadline_missed()


@pytest.mark.parametrize(
    ("params", "code", "jsonrpc_code"),
    [
        (b"{", "request.parse_error", -32700),
        (b'{"messages": [], "maxTokens": 1, "maxTokens": 2}', "request.invalid_request", -32600),
        ({"messages": "nope", "maxTokens": 1}, "request.invalid_params", -32602),
        ({**HELLO, "maxTokens": -1}, "request.invalid_params", -32602),
    ],
)
def test_an_invalid_request_is_an_error_with_a_stable_code_and_its_reply(
    engine: Engine, params, code: str, jsonrpc_code: int
) -> None:
    with pytest.raises(Error) as caught:
        engine.decide("open", params, id=3)
    error = caught.value
    assert (error.code, error.jsonrpc_code) == (code, jsonrpc_code)
    assert json.loads(error.reply)["error"]["code"] == jsonrpc_code


def test_nan_is_refused_before_it_reaches_the_engine(engine: Engine) -> None:
    with pytest.raises(ValueError):
        engine.decide("open", {**HELLO, "temperature": float("nan")})


def test_a_bad_table_is_refused_with_its_code(table_bytes: bytes, tmp_path) -> None:
    table = json.loads(table_bytes)
    table["format"] = "mcpolicy-table/99"
    with pytest.raises(Error) as caught:
        Policy.from_json(json.dumps(table))
    assert caught.value.code.startswith("table.")
    with pytest.raises(Error) as caught:
        Policy.from_path(str(tmp_path / "missing.json"))
    assert caught.value.code == "table.unreadable"


def test_a_store_that_cannot_open_is_an_error_with_its_code(tmp_path) -> None:
    (tmp_path / "not-a-store.sqlite3").write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(Error) as caught:
        Store.sqlite(str(tmp_path / "not-a-store.sqlite3"))
    assert caught.value.code.startswith("store.")


def test_a_decision_without_an_id_replies_with_a_null_id(engine: Engine) -> None:
    denial = engine.decide("closed", HELLO)
    assert json.loads(denial.reply())["id"] is None
    grant = engine.decide("open", HELLO)
    assert grant.id is None


def test_a_whole_message_is_decided_with_its_own_id(engine: Engine) -> None:
    message = json.dumps({"jsonrpc": "2.0", "id": "m-1", "method": "sampling/createMessage", "params": HELLO})
    denial = engine.decide_message("closed", message.encode())
    assert isinstance(denial, Denial) and json.loads(denial.reply())["id"] == "m-1"
    with pytest.raises(Error) as caught:
        engine.decide_message("closed", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}')
    assert caught.value.code == "request.invalid_request"
