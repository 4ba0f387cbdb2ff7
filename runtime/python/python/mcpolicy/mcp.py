"""The policy in front of an ``mcp`` SDK client's sampling callback.

    from mcpolicy import Engine, Policy, Store
    from mcpolicy.mcp import PolicySampling

    engine = Engine(Policy.from_path("policy.table.json"), Store.sqlite("decisions.sqlite3"))
    sampling = PolicySampling(engine, "release-notes", my_sampling_callback, consent=ask_user)
    async with ClientSession(read, write, sampling_callback=sampling) as session: ...

Every ``sampling/createMessage`` of the server is decided first
(``docs/spec/evaluation.md``); the wrapped callback runs only for an allow
or a trim, with the params as the policy lets them run, under the policy's
deadline; a denial is answered with the frame's ``ErrorData``
(``docs/spec/frames.md``, "Denial frames"); a trim's result carries the
``_meta`` annotations ("Trim annotations"); the tokens the model used
settle the server's token budgets ("Settlement"). The same callback serves
the 2026-07-28 input requests, which the SDK dispatches to it too.

Store calls run on a worker thread (``anyio.to_thread``), never on the event
loop: a slow store holds up this request alone.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

import anyio
import anyio.lowlevel
import anyio.to_thread
from mcp import types

from . import Denial, Engine, Error, Grant, PendingConsent

__all__ = ["ConsentRequest", "PolicySampling", "UsageUnknown", "usage_from_meta"]

#: The code of a user's refusal from the client (``docs/spec/evaluation.md``,
#: "Step 9: Consent"): a callback that answers ``ErrorData(code=-1)`` after a
#: grant tells the policy the user said no.
USER_REFUSAL_CODE = -1

_MISSED = object()

SamplingResult = Union[types.CreateMessageResult, types.CreateMessageResultWithTools]


@dataclass(frozen=True)
class ConsentRequest:
    """What a consent dialog shows: the request as it will run if approved."""

    server_id: str
    """The server asking, as the user named it in the client's configuration."""
    identity: str
    """The request identity a refusal is stored under."""
    params: types.CreateMessageRequestParams
    """The params the model will see (trims applied)."""
    meta: dict[str, Any] | None
    """The trims the policy made (``_meta`` members), or None."""
    context: Any
    """The SDK's request context of the sampling request."""


class UsageUnknown(Exception):
    """Raise from a sampling callback (or chain as ``__cause__``) with the
    tokens a failed completion was billed, so that they settle the budget;
    without it a failure counts the whole ``maxTokens``."""

    def __init__(self, message: str, usage_tokens: int | None = None):
        super().__init__(message)
        self.usage_tokens = usage_tokens


def usage_from_meta(result: SamplingResult) -> int | None:
    """The default ``usage`` hook: the tokens a result reports in
    ``_meta.usage`` (``inputTokens + outputTokens``, or ``totalTokens``).
    None when it reports none: the whole ``maxTokens`` is counted."""
    meta = result.meta or {}
    usage = meta.get("usage") if isinstance(meta, dict) else None
    if not isinstance(usage, dict):
        return None
    total = usage.get("totalTokens")
    if _is_count(total):
        return int(total)
    parts = [usage.get("inputTokens"), usage.get("outputTokens")]
    if any(_is_count(part) for part in parts):
        return sum(int(part) for part in parts if _is_count(part))
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


SamplingCallback = Callable[[Any, types.CreateMessageRequestParams], Union[Awaitable[Any], Any]]
ConsentCallback = Callable[[ConsentRequest], Union[Awaitable[bool], bool]]
UsageHook = Callable[[SamplingResult], Union[int, None]]


class PolicySampling:
    """A sampling callback for ``ClientSession(..., sampling_callback=...)``
    that decides every request of one server before ``sampling_callback``
    runs it.

    ``server_id`` is the name the *user* gave the server (what the policy's
    ``server "…"`` blocks match), never the name it reports about itself.
    ``consent(request) -> bool`` (sync or async) is asked when the policy
    says so; without it such requests are refused as abandoned (nothing is
    stored). ``usage(result) -> int | None`` reads the tokens a completion
    used (default :func:`usage_from_meta`); None counts the whole
    ``maxTokens`` (the safe side, ``docs/spec/evaluation.md``,
    "Settlement"). ``sampling_context``: the client declared the
    ``sampling.context`` capability (read under MCP 2026-07-28 only).
    """

    def __init__(
        self,
        engine: Engine,
        server_id: str,
        sampling_callback: SamplingCallback,
        *,
        consent: ConsentCallback | None = None,
        usage: UsageHook = usage_from_meta,
        sampling_context: bool = False,
    ) -> None:
        self.engine = engine
        self.server_id = server_id
        self.sampling_callback = sampling_callback
        self.consent = consent
        self.usage = usage
        self.sampling_context = sampling_context

    async def __call__(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> SamplingResult | types.ErrorData:
        wire = params.model_dump(by_alias=True, mode="json", exclude_unset=True)
        request_id = getattr(context, "request_id", None)
        try:
            # Shielded: a decision made is always resolved, even when the
            # server's request is cancelled meanwhile (below).
            with anyio.CancelScope(shield=True):
                decision = await _off_loop(
                    lambda: self.engine.decide(
                        self.server_id,
                        wire,
                        id=request_id,
                        sampling_context=self.sampling_context,
                    )
                )
        except Error as error:
            return _error_data(error)
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            # Cancelled before anything ran: a prompt is abandoned, a grant
            # settled at nothing (the model never ran), then the cancellation goes on.
            with anyio.CancelScope(shield=True):
                if isinstance(decision, PendingConsent):
                    await _off_loop(decision.abandon)
                elif isinstance(decision, Grant):
                    await self._settle(decision, 0)
            raise
        if isinstance(decision, Denial):
            return types.ErrorData(**decision.error_data())
        if isinstance(decision, PendingConsent):
            answer = await self._ask(decision, params, context)
            if isinstance(answer, types.ErrorData):
                return answer
            decision = answer
        return await self._run(decision, params, context)

    async def _ask(
        self, pending: PendingConsent, params: types.CreateMessageRequestParams, context: Any
    ) -> Grant | types.ErrorData:
        """Step 9: the user's answer, or the client's failure to give one
        (abandoned: nothing stored, the budget spend returned)."""
        if self.consent is None:
            await _off_loop(pending.abandon)
            return types.ErrorData(
                code=types.INTERNAL_ERROR,
                message="Sampling denied: the policy asks the user, and this client has no consent prompt",
            )
        request = ConsentRequest(
            server_id=pending.server_id,
            identity=pending.identity,
            params=_narrowed(params, pending.params()),
            meta=pending.meta,
            context=context,
        )
        try:
            approved = await _maybe_await(self.consent(request))
        except BaseException:
            # The client failed to answer (or was cancelled): abandoned.
            with anyio.CancelScope(shield=True):
                await _off_loop(pending.abandon)
            raise
        try:
            if approved is True:
                return await _off_loop(pending.approve)
            return types.ErrorData(**(await _off_loop(pending.refuse)).error_data())
        except Error as error:
            return _error_data(error)

    async def _run(
        self, grant: Grant, params: types.CreateMessageRequestParams, context: Any
    ) -> SamplingResult | types.ErrorData:
        """Step 10: the callback under the deadline, then the settlement."""
        narrowed = _narrowed(params, grant.params()) if grant.is_trim else params
        reserved = int(grant.params().get("maxTokens", 0)) if grant.is_trim else params.max_tokens
        deadline = grant.deadline_ms
        result: Any = _MISSED
        try:
            with anyio.move_on_after(None if deadline is None else deadline / 1000):
                result = await _maybe_await(self.sampling_callback(context, narrowed))
        except BaseException as failure:
            # A failed or cancelled completion may have been billed: settle what
            # it reported, else the whole reservation, and let the failure go on.
            tokens = _reported(failure)
            with anyio.CancelScope(shield=True):
                await self._settle(grant, reserved if tokens is None else tokens)
            raise
        if result is _MISSED:
            # The deadline passed and the completion was cancelled; the
            # reservation stays counted ("Deadline miss": a miss does not change spend).
            return await self._denial(grant.deadline_missed)
        if isinstance(result, types.ErrorData):
            if result.code == USER_REFUSAL_CODE:
                # The client asked its user anyway and the user said no.
                return await self._denial(grant.refused_by_user)
            await self._settle(grant, reserved)
            return result
        tokens = self.usage(result)
        if grant.allowed_models is not None and not grant.model_allowed(result.model):
            return await self._denial(lambda: grant.model_refused(tokens))
        if grant.is_trim:
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            result = type(result).model_validate(grant.annotate(dumped))
        await self._settle(grant, reserved if tokens is None else tokens)
        return result

    async def _denial(self, produce: Callable[[], Denial]) -> types.ErrorData:
        try:
            return types.ErrorData(**(await _off_loop(produce)).error_data())
        except Error as error:
            return _error_data(error)

    async def _settle(self, grant: Grant, tokens: int) -> None:
        """A failed settlement leaves the reservation counted (the safe
        side) and never takes a paid-for completion from the server."""
        try:
            await _off_loop(lambda: grant.complete(max(0, tokens)))
        except Error as error:
            print(f"mcpolicy: settling `{self.server_id}` failed: {error.code}: {error}", file=sys.stderr)


async def _off_loop(call: Callable[[], Any]) -> Any:
    """Runs a store call on a worker thread; the GIL is released inside."""
    return await anyio.to_thread.run_sync(call)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _reported(failure: BaseException) -> int | None:
    """Tokens a failure says it was billed (:class:`UsageUnknown`)."""
    seen: BaseException | None = failure
    while seen is not None:
        tokens = getattr(seen, "usage_tokens", None)
        if _is_count(tokens):
            return int(tokens)
        seen = seen.__cause__
    return None


def _narrowed(
    params: types.CreateMessageRequestParams, lowered: dict[str, Any]
) -> types.CreateMessageRequestParams:
    return type(params).model_validate(lowered)


def _error_data(error: Error) -> types.ErrorData:
    """The engine could not decide (the store failed, the request is not
    valid): refused with its frame (``docs/spec/frames.md``, "Store failures")."""
    return types.ErrorData(code=error.jsonrpc_code, message=error.message, data=error.data)

