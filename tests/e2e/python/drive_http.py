"""Drives ``http_server.py`` behind ``mcpc gateway`` with a client written
with the official MCP Python SDK over Streamable HTTP, and prints what
happened as one JSON object.

    python drive_http.py --mcpc PATH --policy FILE --store FILE --audit FILE --log FILE

One Python server serves every route: each route is the same upstream URL
under another server id (the route's name). Each scenario runs one or more
client sessions (each its own ``Mcp-Session-Id``) through the gateway; all
share the store. The client's sampling callback plays the user's approval
dialog and the model (``drive.py``'s ``User``).
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from drive import User

warnings.simplefilter("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = ("release-notes", "web-fetch", "chatty", "summarizer", "slow")
# Every request carries it, as a client authorised by OAuth would: the
# gateway passes it upstream and must never write it to its log or audit.
TOKEN = "mcpolicy-e2e-secret-7f3a9c"


class SlowUser(User):
    """A user whose model takes longer than the policy's deadline."""

    async def __call__(self, context, params):
        await asyncio.sleep(1.5)
        return await super().__call__(context, params)


def size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def wait_for_line(path: str, pattern: str, process: subprocess.Popen, what: str, start: int = 0) -> re.Match:
    """Waits until a line of `path` written past `start` matches `pattern`
    (the process still running)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as file:
                file.seek(start)
                for line in file:
                    match = re.search(pattern, line)
                    if match:
                        return match
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with {process.returncode} before printing {pattern!r}")
        time.sleep(0.05)
    raise SystemExit(f"{what} did not print {pattern!r} within 60 s")


class Gateway:
    """One `mcpc gateway` process in front of `upstream`."""

    def __init__(self, args, upstream: str):
        self.args = args
        self.upstream = upstream

    def __enter__(self):
        self.stderr = tempfile.NamedTemporaryFile(prefix="gateway-", suffix=".err", delete=False)
        command = [
            self.args.mcpc, "gateway",
            "--policy", self.args.policy,
            "--store", self.args.store,
            "--audit", self.args.audit,
            "--log", self.args.log,
            "--listen", "127.0.0.1:0",
        ]
        for name in ROUTES:
            command += ["--route", f"{name}={self.upstream}"]
        # The log is shared with an earlier gateway: only what this one writes.
        start = size(self.args.log)
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.stderr)
        pattern = r"listening on (http://\S+)"
        try:
            match = wait_for_line(self.args.log, pattern, self.process, "mcpc gateway", start)
        except SystemExit:
            match = wait_for_line(self.stderr.name, pattern, self.process, "mcpc gateway")
        self.base = match.group(1).rstrip("/")
        return self

    def url(self, route: str) -> str:
        return f"{self.base}/{route}/mcp"

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()
        os.unlink(self.stderr.name)
        return False


async def session(url: str, user: User, calls, tool: str = "summarise"):
    """Runs `calls` (tool arguments) through one client session; returns the tool outputs."""
    outputs = []
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write, sampling_callback=user) as client:
            await client.initialize()
            for arguments in calls:
                result = await client.call_tool(tool, arguments)
                if result.structured_content is not None:
                    outputs.append(result.structured_content)
                else:
                    outputs.append(json.loads(result.content[0].text))
    return outputs


def report_of(outputs, user: User, **more):
    return {"outputs": outputs, "prompts": user.prompts, "provider_calls": user.provider_calls, **more}


async def main():
    parser = argparse.ArgumentParser()
    for name in ("mcpc", "policy", "store", "audit", "log"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    report = {}

    server = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "http_server.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = server.stdout.readline().split()[1]
        upstream = f"http://127.0.0.1:{port}/mcp"
        with Gateway(args, upstream) as gateway:
            # The seed: the day's one request is spent, then 50 identical retries.
            user = User(approve=True)
            warm_up = {"prompt": "v1.0 changes"}
            retry = {"prompt": "v1.1 changes", "include_context": "allServers"}
            outputs = await session(gateway.url("release-notes"), user, [warm_up] + [retry] * 50)
            report["retry"] = report_of(outputs, user)

            # A new session (new Mcp-Session-Id) asks again: the store remembers.
            user = User(approve=True)
            outputs = await session(gateway.url("release-notes"), user, [retry])
            report["retry_new_session"] = report_of(outputs, user)

            # The user refuses in the client's dialog; 50 identical requests.
            user = User(approve=False)
            outputs = await session(gateway.url("web-fetch"), user, [{"prompt": "Summarise this page"}] * 50)
            report["refuse"] = report_of(outputs, user)

            # 50 requests, each one character different, over two sessions at
            # once: the server numbers its requests per session from 0, so
            # both sessions' request ids collide, and the rate is the route's.
            letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("x") + 1)]
            users = [User(approve=True), User(approve=True)]
            halves = await asyncio.gather(
                session(gateway.url("chatty"), users[0], [{"prompt": f"Summarise page {c}"} for c in letters[:25]]),
                session(gateway.url("chatty"), users[1], [{"prompt": f"Summarise page {c}"} for c in letters[25:]]),
            )
            report["variants"] = {
                "outputs": halves[0] + halves[1],
                "provider_calls": users[0].provider_calls + users[1].provider_calls,
            }

            # A request for more context than the policy gives.
            user = User(approve=True)
            outputs = await session(
                gateway.url("summarizer"), user, [{"prompt": "Summarise the session", "include_context": "allServers"}]
            )
            report["trim"] = report_of(outputs, user, seen=user.seen)

            # The model takes longer than the deadline: the gateway answers
            # the server itself when the deadline passes.
            user = SlowUser(approve=True)
            started = time.monotonic()
            outputs = await session(gateway.url("slow"), user, [{"prompt": "Take your time"}])
            report["deadline"] = report_of(outputs, user, seconds=time.monotonic() - started)

        # A new gateway on the same store: nothing it decided is forgotten.
        with Gateway(args, upstream) as gateway:
            user = User(approve=True)
            outputs = await session(gateway.url("release-notes"), user, [retry])
            report["retry_after_restart"] = report_of(outputs, user)
            user = User(approve=False)
            outputs = await session(gateway.url("web-fetch"), user, [{"prompt": "Summarise this page"}])
            report["refuse_after_restart"] = report_of(outputs, user)
    finally:
        server.kill()
        server.wait()

    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
