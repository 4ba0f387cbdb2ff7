"""The adapter contract (tests/cases/adapters/scenarios.json, read its
"about"): every scenario runs through `mcpolicy.mcp.PolicySampling`, called
as the `mcp` SDK's `ClientSession` calls a sampling callback, and every
expectation is checked. The Node and rmcp adapters run the same file."""

import asyncio
import json
from typing import Any

import pytest
from mcp import types
from mcp.client.session import ClientRequestContext

from conftest import ADAPTER_CASES
from mcpolicy import Engine, Policy, Store
from mcpolicy.mcp import ConsentRequest, PolicySampling

CONTRACT = json.loads((ADAPTER_CASES / "scenarios.json").read_text())
TABLE = ADAPTER_CASES / CONTRACT["table"]


class Client:
    """One client process: an engine on the scenario's store, the user's
    consent function and model, and what each of them saw."""

    def __init__(self, scenario: dict, tmp_path) -> None:
        self.scenario = scenario
        self.path = tmp_path / "decisions.sqlite3"
        self.memory = Store.memory() if scenario["store"] == "memory" else None
        self.open()
        self.step: dict = {}
        self.asked = False
        self.called = False
        self.seen: dict[str, Any] | None = None

    def open(self) -> None:
        store = self.memory if self.memory is not None else Store.sqlite(str(self.path))
        engine = Engine(Policy.from_path(str(TABLE)), store)
        self.sampling = PolicySampling(
            engine,
            self.scenario["server"],
            self.model,
            consent=self.consent,
            usage=lambda _result: self.step["model"]["usageTokens"],
        )

    def consent(self, request: ConsentRequest) -> bool:
        assert request.server_id == self.scenario["server"]
        self.asked = True
        return self.step["consent"]

    async def model(self, _context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.called = True
        self.seen = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        await asyncio.sleep(self.step["model"].get("delayMs", 0) / 1000)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="ok"),
            model="test-model",
            stop_reason="endTurn",
        )

    async def run(self, number: int, step: dict) -> Any:
        if step.get("reopen"):
            self.open()
        self.step, self.asked, self.called, self.seen = step, False, False, None
        params = types.CreateMessageRequestParams.model_validate(step["request"])
        context = ClientRequestContext(session=None, request_id=number)  # type: ignore[arg-type]
        return await self.sampling(context, params)


def check(client: Client, step: dict, outcome: Any, where: str) -> None:
    expect = step["expect"]
    assert client.asked == expect["asked"], f"{where}: consent asked"
    assert client.called == expect["called"], f"{where}: sampling callback called"
    for key, value in expect.get("params", {}).items():
        assert client.seen is not None and client.seen.get(key) == value, f"{where}: params.{key}: {client.seen}"
    if "error" in expect:
        error = expect["error"]
        assert isinstance(outcome, types.ErrorData), f"{where}: expected an error, got {outcome!r}"
        assert outcome.code == error["code"], f"{where}: code {outcome.code}"
        data = outcome.data
        assert isinstance(data, dict), f"{where}: error.data {data!r}"
        assert data["reason"] == error["reason"], f"{where}: reason {data['reason']}"
        if "retryable" in error:
            assert data["retryable"] == error["retryable"], f"{where}: retryable"
        if "timing" in error:
            assert error["timing"] in data, f"{where}: {error['timing']} missing from {data}"
    else:
        assert isinstance(outcome, types.CreateMessageResult), f"{where}: expected a result, got {outcome!r}"
        assert outcome.meta == expect["meta"], f"{where}: _meta {outcome.meta}"


@pytest.mark.parametrize("scenario", CONTRACT["scenarios"], ids=lambda s: s["name"])
def test_scenario(scenario: dict, tmp_path) -> None:
    async def run() -> None:
        client = Client(scenario, tmp_path)
        for number, step in enumerate(scenario["steps"]):
            outcome = await client.run(number, step)
            check(client, step, outcome, f"{scenario['name']} step {number}")

    asyncio.run(run())


def test_every_scenario_of_the_contract_is_run() -> None:
    """The contract is not empty and names the table this runner loads."""
    assert CONTRACT["table"] == "policy.table.json"
    assert len(CONTRACT["scenarios"]) >= 8
