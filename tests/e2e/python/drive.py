"""Drives ``server.py`` behind ``mcpc proxy`` with a client written with the
official MCP Python SDK, and prints what happened as one JSON object.

    python drive.py --mcpc PATH --policy FILE --store FILE --audit FILE --log FILE

Every scenario is one proxied session (one proxy process, one server
process) under its own server id; all share the store. The client's
sampling callback plays the user's approval dialog and the model: it counts
the prompts it showed and the completions it ran.
"""

import argparse
import asyncio
import json
import os
import sys
import warnings

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

warnings.simplefilter("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))


class User:
    """The client's approval dialog and model."""

    def __init__(self, approve: bool):
        self.approve = approve
        self.prompts = 0
        self.provider_calls = 0
        self.seen = []

    async def __call__(self, context, params: types.CreateMessageRequestParams):
        self.prompts += 1
        self.seen.append(params.model_dump(by_alias=True, exclude_none=True, mode="json"))
        if not self.approve:
            return types.ErrorData(code=-1, message="User rejected sampling request")
        self.provider_calls += 1
        return types.CreateMessageResult.model_validate(
            {
                "role": "assistant",
                "content": {"type": "text", "text": "Done."},
                "model": "fake-model",
                "stopReason": "endTurn",
                "_meta": {"usage": {"inputTokens": 30, "outputTokens": 12}},
            }
        )


async def session(args, server_id: str, user: User, calls):
    """Runs `calls` (tool arguments) through one proxied session; returns the tool outputs."""
    proxy = StdioServerParameters(
        command=args.mcpc,
        args=[
            "proxy",
            "--policy", args.policy,
            "--store", args.store,
            "--server-id", server_id,
            "--audit", args.audit,
            "--log", args.log,
            "--",
            sys.executable, os.path.join(HERE, "server.py"),
        ],
    )
    outputs = []
    async with stdio_client(proxy) as (read, write):
        async with ClientSession(read, write, sampling_callback=user) as client:
            await client.initialize()
            for arguments in calls:
                result = await client.call_tool("summarise", arguments)
                if result.structured_content is not None:
                    outputs.append(result.structured_content)
                else:
                    outputs.append(json.loads(result.content[0].text))
    return outputs


async def main():
    parser = argparse.ArgumentParser()
    for name in ("mcpc", "policy", "store", "audit", "log"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    report = {}

    # The seed: the day's one request is spent, then 50 identical retries.
    user = User(approve=True)
    warm_up = {"prompt": "v1.0 changes"}
    retry = {"prompt": "v1.1 changes", "include_context": "allServers"}
    outputs = await session(args, "release-notes", user, [warm_up] + [retry] * 50)
    report["retry"] = {"outputs": outputs, "prompts": user.prompts, "provider_calls": user.provider_calls}

    # The user refuses in the client's dialog; 50 identical requests.
    user = User(approve=False)
    outputs = await session(args, "web-fetch", user, [{"prompt": "Summarise this page"}] * 50)
    report["refuse"] = {"outputs": outputs, "prompts": user.prompts, "provider_calls": user.provider_calls}

    # 50 requests, each one character different.
    letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("x") + 1)]
    user = User(approve=True)
    outputs = await session(args, "chatty", user, [{"prompt": f"Summarise page {c}"} for c in letters])
    report["variants"] = {"outputs": outputs, "prompts": user.prompts, "provider_calls": user.provider_calls}

    # A request for more context than the policy gives.
    user = User(approve=True)
    outputs = await session(args, "summarizer", user, [{"prompt": "Summarise the session", "include_context": "allServers"}])
    report["trim"] = {"outputs": outputs, "seen": user.seen, "prompts": user.prompts}

    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
