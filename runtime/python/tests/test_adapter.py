"""`PolicySampling` where the scenarios of the contract do not reach: the
callback failing, being cancelled, refusing for the user; the consent
function failing or missing; the default usage hook
(docs/spec/evaluation.md, "Step 9: Consent" and "After the decision")."""

import asyncio
from typing import Any

import pytest
from mcp import types
from mcp.client.session import ClientRequestContext

from mcpolicy import Engine, ManualClock, Policy, Store
from mcpolicy.mcp import PolicySampling, UsageUnknown, usage_from_meta

NOON = 1_767_268_800_000


def params(text: str, max_tokens: int) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams.model_validate(
        {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}
    )


def result(meta: dict | None = None) -> types.CreateMessageResult:
    return types.CreateMessageResult.model_validate(
        {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m", "_meta": meta}
    )


CONTEXT = ClientRequestContext(session=None, request_id=1)  # type: ignore[arg-type]


@pytest.fixture
def engine(table_bytes: bytes) -> Engine:
    return Engine(Policy.from_json(table_bytes), Store.memory(), ManualClock(NOON))


async def fits(engine: Engine, max_tokens: int) -> bool:
    """Whether a request of `max_tokens` fits the `tokens` server's budget (1000 a day)."""

    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        return result({"usage": {"totalTokens": 0}})

    outcome = await PolicySampling(engine, "tokens", model)(CONTEXT, params(f"probe {max_tokens}", max_tokens))
    return isinstance(outcome, types.CreateMessageResult)


def test_a_failing_callback_settles_what_it_reports(engine: Engine) -> None:
    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        raise RuntimeError("provider down") from UsageUnknown("billed", usage_tokens=100)

    async def run() -> None:
        with pytest.raises(RuntimeError):
            await PolicySampling(engine, "tokens", model)(CONTEXT, params("a", 600))
        # 100 counted, not the 600 reserved: 900 more fit, 901 would not.
        assert not await fits(engine, 901)
        assert await fits(engine, 900)

    asyncio.run(run())


def test_a_failing_callback_without_usage_counts_the_whole_reservation(engine: Engine) -> None:
    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        raise RuntimeError("provider down")

    async def run() -> None:
        with pytest.raises(RuntimeError):
            await PolicySampling(engine, "tokens", model)(CONTEXT, params("a", 600))
        assert not await fits(engine, 401)
        assert await fits(engine, 400)

    asyncio.run(run())


def test_a_cancelled_callback_is_settled_and_the_cancellation_goes_on(engine: Engine) -> None:
    started = asyncio.Event()

    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        started.set()
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    async def run() -> None:
        call = asyncio.create_task(PolicySampling(engine, "tokens", model)(CONTEXT, params("a", 600)))
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert not await fits(engine, 401)
        assert await fits(engine, 400)

    asyncio.run(run())


def test_usage_reported_in_meta_settles_the_budget(engine: Engine) -> None:
    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        return result({"usage": {"inputTokens": 30, "outputTokens": 20}})

    async def run() -> None:
        outcome = await PolicySampling(engine, "tokens", model)(CONTEXT, params("a", 600))
        assert isinstance(outcome, types.CreateMessageResult)
        assert not await fits(engine, 951)
        assert await fits(engine, 950)

    asyncio.run(run())


def test_usage_from_meta_reads_total_or_input_plus_output() -> None:
    assert usage_from_meta(result({"usage": {"totalTokens": 7}})) == 7
    assert usage_from_meta(result({"usage": {"inputTokens": 3, "outputTokens": 4}})) == 7
    assert usage_from_meta(result({"usage": {"inputTokens": "3"}})) is None
    assert usage_from_meta(result(None)) is None


def test_a_callback_answering_the_users_refusal_stores_it(engine: Engine) -> None:
    calls = []

    async def model(_c: Any, _p: Any) -> types.ErrorData:
        calls.append(1)
        return types.ErrorData(code=-1, message="User rejected sampling request")

    async def run() -> None:
        sampling = PolicySampling(engine, "open", model)
        for _ in range(2):
            outcome = await sampling(CONTEXT, params("a", 10))
            assert isinstance(outcome, types.ErrorData)
            assert (outcome.code, outcome.data["reason"]) == (-1, "user.denied")
        assert len(calls) == 1

    asyncio.run(run())


def test_consent_that_fails_abandons_the_prompt(engine: Engine) -> None:
    asked = []

    def consent(_request: Any) -> bool:
        asked.append(1)
        raise RuntimeError("dialog crashed")

    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        raise AssertionError("not reached")

    async def run() -> None:
        sampling = PolicySampling(engine, "asked", model, consent=consent)
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await sampling(CONTEXT, params("a", 10))
        assert len(asked) == 2  # abandoned: nothing stored, asked again

    asyncio.run(run())


def test_without_a_consent_function_a_prompt_is_abandoned_not_refused(engine: Engine) -> None:
    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        raise AssertionError("not reached")

    async def run() -> None:
        outcome = await PolicySampling(engine, "asked", model)(CONTEXT, params("a", 10))
        assert isinstance(outcome, types.ErrorData) and outcome.code == types.INTERNAL_ERROR
        approving = PolicySampling(engine, "asked", lambda _c, _p: result(), consent=lambda _r: True)
        assert isinstance(await approving(CONTEXT, params("a", 10)), types.CreateMessageResult)

    asyncio.run(run())


def test_an_invalid_request_is_answered_with_its_error(engine: Engine) -> None:
    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        raise AssertionError("not reached")

    async def run() -> None:
        bad = types.CreateMessageRequestParams.model_validate({"messages": [], "maxTokens": 0})
        outcome = await PolicySampling(engine, "open", model)(CONTEXT, bad)
        assert isinstance(outcome, types.ErrorData) and outcome.code == -32602

    asyncio.run(run())


def test_a_prompt_cancelled_while_the_user_decides_is_abandoned(engine: Engine) -> None:
    showing = asyncio.Event()
    asked = []

    async def consent(_request: Any) -> bool:
        asked.append(1)
        showing.set()
        await asyncio.sleep(60)
        return True

    async def model(_c: Any, _p: Any) -> types.CreateMessageResult:
        return result()

    async def run() -> None:
        sampling = PolicySampling(engine, "asked", model, consent=consent)
        call = asyncio.create_task(sampling(CONTEXT, params("a", 10)))
        await showing.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Abandoned, not refused: the same request is asked for again.
        answering = PolicySampling(engine, "asked", model, consent=lambda _r: True)
        assert isinstance(await answering(CONTEXT, params("a", 10)), types.CreateMessageResult)
        assert len(asked) == 1

    asyncio.run(run())
