"""The per-decision cost of crossing the binding, against the Rust loop of
`benches/crossing.rs` (same table, same request, same store and clock):
batches of decisions, the median of the per-decision times.

    python runtime/python/bench/crossing.py
    cargo bench -p mcpolicy-python --bench crossing

- `allow bytes`: `engine.decide(server, params_bytes)` then `grant.complete(42)`;
- `allow dict`: the same from a dict (its `json.dumps` included);
- `deny`: a `sampling off` server's request, replayed from the store;
- `decide_async`: `await engine.decide_async(...)` plus `complete`, a worker
  thread's round trip included.
"""

import asyncio
import json
import statistics
import time
from pathlib import Path

from mcpolicy import Denial, Engine, Grant, ManualClock, Policy, Store

TABLE = Path(__file__).resolve().parents[3] / "tests" / "cases" / "adapters" / "policy.table.json"
PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hello"}}], "maxTokens": 100, "includeContext": "none"}
BATCHES = 15
PER_BATCH = 20_000


def engine() -> tuple[Engine, ManualClock]:
    clock = ManualClock(1_767_268_800_000)
    return Engine(Policy.from_path(str(TABLE)), Store.memory(), clock), clock


def timed(label: str, once, per_batch: int = PER_BATCH) -> None:
    medians = []
    for _ in range(BATCHES):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            once()
        medians.append((time.perf_counter_ns() - started) / per_batch)
    print(f"python {label}: median {statistics.median(medians):.0f} ns per decision ({BATCHES} batches of {per_batch})")


def main() -> None:
    text = json.dumps(PARAMS, separators=(",", ":")).encode()

    def allow(params):
        eng, clock = engine()

        def once():
            clock.advance(1_000)
            grant = eng.decide("open", params, id=1)
            assert isinstance(grant, Grant)
            grant.complete(42)

        return once

    timed("allow bytes", allow(text))
    timed("allow dict", allow(PARAMS))

    eng, clock = engine()

    def deny():
        clock.advance(1_000)
        assert isinstance(eng.decide("closed", text, id=1), Denial)

    timed("deny", deny)

    eng_async, clock_async = engine()

    async def run() -> None:
        medians = []
        per_batch = 2_000
        for _ in range(BATCHES):
            started = time.perf_counter_ns()
            for _ in range(per_batch):
                clock_async.advance(1_000)
                grant = await eng_async.decide_async("open", text, id=1)
                await grant.complete_async(42)
            medians.append((time.perf_counter_ns() - started) / per_batch)
        print(f"python decide_async: median {statistics.median(medians):.0f} ns per decision ({BATCHES} batches of {per_batch})")

    asyncio.run(run())


if __name__ == "__main__":
    main()
