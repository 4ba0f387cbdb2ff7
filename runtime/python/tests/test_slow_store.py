"""The event loop never waits on the store: while another process holds an
SQLite store's write lock (the store waits for it, docs/spec/store.md),
other asyncio tasks keep running, and other Python threads run during a
blocking `decide` (the GIL is released).

The lock is held by another process: SQLite's locks are POSIX locks, which
a process never sees itself holding, and this process would hold it through
Python's own SQLite library, not the store's."""

import asyncio
import subprocess
import sys
import threading
import time

from mcp import types
from mcp.client.session import ClientRequestContext

from mcpolicy import Engine, Grant, Policy, Store
from mcpolicy.mcp import PolicySampling

HELLO = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hello"}}], "maxTokens": 100}
HOLD = 0.8  # seconds the other connection holds the write lock


HOLDER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.rollback()
"""


def locked_engine(table_bytes: bytes, tmp_path) -> tuple[Engine, subprocess.Popen]:
    """An engine on an SQLite store whose write lock another process holds
    for HOLD seconds from now."""
    path = str(tmp_path / "decisions.sqlite3")
    engine = Engine(Policy.from_json(table_bytes), Store.sqlite(path))
    engine.decide("open", {**HELLO, "maxTokens": 1}).complete(1)  # the schema exists
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path, str(HOLD)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return engine, holder


async def ticking_while(awaitable) -> tuple[object, float, list[float]]:
    """Awaits `awaitable` while a task ticks every 10 ms; returns its value,
    how long it took, and the tick instants."""
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    value = await awaitable
    elapsed = time.monotonic() - started
    ticker.cancel()
    return value, elapsed, ticks


def assert_loop_ran(elapsed: float, ticks: list[float]) -> None:
    assert elapsed >= HOLD * 0.9, f"the store did not wait for the lock ({elapsed:.3f} s)"
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= HOLD / 0.01 / 4, f"{len(ticks)} ticks in {elapsed:.3f} s"
    assert max(gaps) < 0.25, f"the loop stalled for {max(gaps):.3f} s"


def test_decide_async_on_a_locked_store_leaves_the_loop_running(table_bytes: bytes, tmp_path) -> None:
    engine, holder = locked_engine(table_bytes, tmp_path)

    async def run() -> None:
        decision, elapsed, ticks = await ticking_while(engine.decide_async("open", HELLO))
        assert isinstance(decision, Grant)
        await decision.complete_async(1)
        assert_loop_ran(elapsed, ticks)

    asyncio.run(run())
    assert holder.wait(timeout=10) == 0


def test_the_adapter_on_a_locked_store_leaves_the_loop_running(table_bytes: bytes, tmp_path) -> None:
    engine, holder = locked_engine(table_bytes, tmp_path)

    async def model(_context, _params):
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="ok"), model="m", stop_reason="endTurn"
        )

    sampling = PolicySampling(engine, "open", model)

    async def run() -> None:
        params = types.CreateMessageRequestParams.model_validate(HELLO)
        context = ClientRequestContext(session=None, request_id=1)  # type: ignore[arg-type]
        result, elapsed, ticks = await ticking_while(sampling(context, params))
        assert isinstance(result, types.CreateMessageResult)
        assert_loop_ran(elapsed, ticks)

    asyncio.run(run())
    assert holder.wait(timeout=10) == 0


def test_a_blocking_decide_releases_the_gil(table_bytes: bytes, tmp_path) -> None:
    engine, holder = locked_engine(table_bytes, tmp_path)
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.05)
    before = counted[0]
    started = time.monotonic()
    decision = engine.decide("open", HELLO)
    elapsed = time.monotonic() - started
    during = counted[0] - before
    stop.set()
    counter.join()
    assert isinstance(decision, Grant)
    assert elapsed >= HOLD * 0.9
    # A held GIL would let the counter run only at the interpreter's switch
    # interval around the call, never through it; released, it counts on.
    assert during > 100_000, f"the other thread counted {during} while decide waited"
    assert holder.wait(timeout=10) == 0
