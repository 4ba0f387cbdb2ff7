"""End to end with the official `mcp` SDK: a server on the SDK whose tool
samples with `ctx.session.create_message` (tests/e2e/python/server.py, run
over stdio), and a `ClientSession` whose sampling callback is
`PolicySampling` over the adapter contract's table
(tests/cases/adapters/policy.mcpolicy, one server block per behaviour)."""

import asyncio
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from conftest import ADAPTER_CASES, REPO
from mcpolicy import Engine, Policy, Store
from mcpolicy.mcp import ConsentRequest, PolicySampling

warnings.simplefilter("ignore")  # sampling is deprecated in 2026-07-28; these tests use it on purpose

SERVER = REPO / "tests" / "e2e" / "python" / "server.py"
POLICY = Policy.from_path(str(ADAPTER_CASES / "policy.table.json"))


class User:
    """The client's model and consent dialog, counting what they did."""

    def __init__(self, approve: bool = True) -> None:
        self.approve = approve
        self.asked: list[ConsentRequest] = []
        self.seen: list[dict[str, Any]] = []

    async def model(self, _context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.seen.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        return types.CreateMessageResult.model_validate(
            {
                "role": "assistant",
                "content": {"type": "text", "text": "Done."},
                "model": "fake-model",
                "stopReason": "endTurn",
                "_meta": {"usage": {"inputTokens": 30, "outputTokens": 12}},
            }
        )

    async def consent(self, request: ConsentRequest) -> bool:
        self.asked.append(request)
        return self.approve


async def session(engine: Engine, server_id: str, user: User, calls: list[dict]) -> list[dict]:
    """One client session with the server: the tool's outputs, one per call."""
    sampling = PolicySampling(engine, server_id, user.model, consent=user.consent)
    server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    outputs = []
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, sampling_callback=sampling) as client:
            await client.initialize()
            for arguments in calls:
                result = await client.call_tool("summarise", arguments)
                if result.structured_content is not None:
                    outputs.append(result.structured_content)
                else:
                    outputs.append(json.loads(result.content[0].text))
    return outputs


def run(engine: Engine, server_id: str, user: User, calls: list[dict]) -> list[dict]:
    return asyncio.run(session(engine, server_id, user, calls))


def memory_engine() -> Engine:
    return Engine(POLICY, Store.memory())


def test_allow_runs_the_request_as_sent() -> None:
    user = User()
    [output] = run(memory_engine(), "open", user, [{"prompt": "v1.2 notes", "max_tokens": 300}])
    result = output["result"]
    assert result["content"]["text"] == "Done."
    assert result["_meta"] == {"usage": {"inputTokens": 30, "outputTokens": 12}}
    assert user.seen[0]["maxTokens"] == 300 and user.seen[0]["systemPrompt"] == "You write release notes."
    assert user.asked == []


def test_trim_narrows_what_the_model_sees_and_annotates_the_result() -> None:
    user = User()
    calls = [{"prompt": "the repository", "include_context": "allServers", "max_tokens": 9000}]
    [output] = run(memory_engine(), "summarizer", user, calls)
    assert (user.seen[0]["includeContext"], user.seen[0]["maxTokens"]) == ("thisServer", 256)
    meta = output["result"]["_meta"]
    assert meta["context"] == {"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"}
    assert meta["maxTokens"] == {"requested": 9000, "applied": 256, "reason": "policy.max_tokens"}
    assert meta["usage"] == {"inputTokens": 30, "outputTokens": 12}


def test_deny_answers_the_frames_error_and_never_runs() -> None:
    user = User()
    outputs = run(memory_engine(), "closed", user, [{"prompt": "hello"}] * 3)
    for output in outputs:
        error = output["error"]
        assert error["code"] == -32010
        assert (error["data"]["reason"], error["data"]["retryable"]) == ("policy.sampling_disabled", False)
    assert user.seen == []


def test_consent_refused_is_remembered_and_approved_is_remembered(tmp_path: Path) -> None:
    path = str(tmp_path / "decisions.sqlite3")
    refusing = User(approve=False)
    outputs = run(Engine(POLICY, Store.sqlite(path)), "asked", refusing, [{"prompt": "read my mail"}] * 3)
    assert [o["error"]["code"] for o in outputs] == [-1, -1, -1]
    assert {o["error"]["data"]["reason"] for o in outputs} == {"user.denied"}
    assert len(refusing.asked) == 1 and refusing.seen == []
    assert refusing.asked[0].server_id == "asked"

    # A new client on the same store: still refused without asking; another
    # request is asked for once, approved, and then runs without asking.
    approving = User(approve=True)
    calls = [{"prompt": "read my mail"}, {"prompt": "my calendar"}, {"prompt": "my calendar"}]
    outputs = run(Engine(POLICY, Store.sqlite(path)), "asked", approving, calls)
    assert outputs[0]["error"]["data"]["reason"] == "user.denied"
    assert [o["result"]["content"]["text"] for o in outputs[1:]] == ["Done.", "Done."]
    assert len(approving.asked) == 1 and len(approving.seen) == 2


def test_a_budget_holds_across_a_client_restart_on_the_same_sqlite_file(tmp_path: Path) -> None:
    path = str(tmp_path / "decisions.sqlite3")
    user = User()
    [first] = run(Engine(POLICY, Store.sqlite(path)), "daily", user, [{"prompt": "first"}])
    assert "result" in first
    [second] = run(Engine(POLICY, Store.sqlite(path)), "daily", user, [{"prompt": "second"}])
    assert second["error"]["data"]["reason"] == "policy.budget_exhausted"
    assert "resetsAt" in second["error"]["data"]
    assert len(user.seen) == 1


# MCP 2026-07-28: the installed SDK (mcp 2.3.0) negotiates it over stdio
# (`Client(..., mode="auto")` probes `server/discover`), and a server that
# samples through a resolver then sends the request as an `inputRequests`
# entry; the SDK's driver hands each entry to the same sampling callback
# (docs/spec/evaluation.md, "MCP 2026-07-28: `inputRequests`"). A denied
# entry is the caller's local error, with the denial's code, message and data.

SERVER_2026 = Path(__file__).resolve().parent / "server_2026.py"


async def modern_call(server_id: str, user: User) -> tuple[str, Any]:
    """One `summarise` call on a 2026-07-28 connection: the version and the
    tool's output, or the MCPError the call raised."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    sampling = PolicySampling(memory_engine(), server_id, user.model, consent=user.consent)
    server = StdioServerParameters(command=sys.executable, args=[str(SERVER_2026)])
    async with Client(server, sampling_callback=sampling, mode="auto") as client:
        version = client.protocol_version
        try:
            result = await client.call_tool("summarise", {"prompt": "the changes"})
        except MCPError as error:
            return version, error.error
        return version, json.loads(result.content[0].text)


def test_2026_07_28_input_requests_are_trimmed_through_the_adapter() -> None:
    user = User()
    version, output = asyncio.run(modern_call("summarizer", user))
    assert version == "2026-07-28"
    assert (user.seen[0]["includeContext"], user.seen[0]["maxTokens"]) == ("thisServer", 256)
    meta = output["result"]["_meta"]
    assert meta["maxTokens"] == {"requested": 9000, "applied": 256, "reason": "policy.max_tokens"}


def test_2026_07_28_a_denied_input_request_is_the_callers_error() -> None:
    user = User()
    version, error = asyncio.run(modern_call("closed", user))
    assert version == "2026-07-28"
    assert isinstance(error, types.ErrorData) and error.code == -32010
    assert error.data["reason"] == "policy.sampling_disabled"
    assert user.seen == []
