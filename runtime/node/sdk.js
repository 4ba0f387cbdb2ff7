// The adapter for @modelcontextprotocol/sdk's Client: installs the
// `sampling/createMessage` request handler around the client's own, and
// carries every decision out (README.md, "Add the policy to a client").
// What each step does comes from docs/spec/evaluation.md and
// docs/spec/frames.md, cited where it is done.
import { CreateMessageRequestSchema, ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const MISSED = Symbol('deadline missed');

/**
 * An McpError carrying a frame's `{code, message, data}` exactly: the SDK
 * answers a throwing handler with the error's `code`, `message` and `data`
 * (McpError's constructor prefixes its message; the frame's is restored).
 */
export function frameError(error) {
  const thrown = new McpError(error.code, error.message, error.data);
  thrown.message = error.message;
  return thrown;
}

/** The default `usage` hook: the provider's count is unknown (undefined). */
export function unknownUsage() {
  return undefined;
}

/** A whole token count, or undefined. */
function tokenCount(value) {
  return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/**
 * Installs the policy on `client`: every sampling/createMessage request is
 * decided by `engine` for `server` before `handler` (what the client would
 * have passed to setRequestHandler) sees it. Returns the counters.
 */
export function installSampling(client, options) {
  const handle = samplingHandler(options, samplingContextOf(client, options));
  client.setRequestHandler(CreateMessageRequestSchema, handle);
  return handle.stats;
}

/** Whether the client declared `sampling.context` (matters under 2026-07-28 only). */
function samplingContextOf(client, options) {
  if (typeof options.samplingContext === 'boolean') return options.samplingContext;
  // The capabilities given to the Client's constructor or registerCapabilities.
  return Boolean(client?._capabilities?.sampling?.context);
}

/**
 * The request handler alone, `(request, extra) => Promise<result>`, for a
 * caller that installs it itself.
 */
export function samplingHandler(options, samplingContext = Boolean(options.samplingContext)) {
  const { engine, server, handler } = options;
  if (!engine || typeof server !== 'string' || typeof handler !== 'function') {
    throw new TypeError('installSampling needs { engine, server: string, handler: function }');
  }
  const consent = options.consent;
  const usage = options.usage ?? unknownUsage;
  const onSettleError = options.onSettleError ?? (() => {});
  const stats = {
    consentPrompts: 0,
    calls: 0,
    allowed: 0,
    trimmed: 0,
    denied: 0,
    deadlineMisses: 0,
    settleFailures: 0,
  };

  function refuse(decision) {
    stats.denied += 1;
    return frameError(decision.error);
  }

  // Settlement (docs/spec/evaluation.md, "Settlement"): the tokens the
  // provider reported replace the reservation; without a report the whole
  // maxTokens the request ran with is counted (the reservation, the safe
  // side). A store failure keeps the reservation counted and never takes a
  // paid-for completion away from the server.
  async function settle(grant, reported, params) {
    const tokens = tokenCount(reported) ?? tokenCount(params.maxTokens) ?? 0;
    try {
      await grant.complete(tokens);
    } catch (error) {
      stats.settleFailures += 1;
      onSettleError(error);
    }
  }

  async function run(grant, request, extra) {
    stats[grant.kind === 'trim' ? 'trimmed' : 'allowed'] += 1;
    const params = grant.params;
    const abort = new AbortController();
    const signal = extra?.signal ? AbortSignal.any([extra.signal, abort.signal]) : abort.signal;
    stats.calls += 1;
    const call = Promise.resolve()
      .then(() => handler({ ...request, params }, { ...extra, signal }))
      .then(
        (value) => ({ value }),
        (error) => ({ error }),
      );
    let timer;
    const deadline =
      grant.deadlineMs === null
        ? null
        : new Promise((resolve) => {
            timer = setTimeout(resolve, grant.deadlineMs, MISSED);
          });
    const outcome = await (deadline ? Promise.race([call, deadline]) : call);
    clearTimeout(timer);
    if (outcome === MISSED) {
      // Deadline miss (docs/spec/evaluation.md, "Deadline miss"): the call is
      // abandoned (its signal aborts), the refusal key denied with the
      // block's deadline reason; the spend stays as reserved.
      stats.deadlineMisses += 1;
      abort.abort(new Error(`the policy's deadline of ${grant.deadlineMs} ms passed`));
      throw refuse(await grant.deadlineMissed());
    }
    if ('error' in outcome) {
      // The handler failed: what it says it used (`error.usageTokens`) is
      // settled, else the reservation; the error reaches the server as the
      // SDK answers any handler error.
      await settle(grant, outcome.error?.usageTokens, params);
      throw outcome.error;
    }
    let reported;
    try {
      reported = await usage(outcome.value, params);
    } catch {
      reported = undefined;
    }
    // Trim annotations (docs/spec/frames.md, "Trim annotations"); an
    // allow's result goes back untouched (no copy through the addon).
    const result = grant.meta === null ? outcome.value : grant.annotate(outcome.value);
    await settle(grant, reported, params);
    return result;
  }

  async function ask(pending, extra) {
    if (typeof consent !== 'function') {
      await pending.abandon();
      throw new McpError(
        ErrorCode.InternalError,
        'the policy asks the user, and this client has no consent function',
      );
    }
    stats.consentPrompts += 1;
    let answer;
    try {
      answer = await consent({
        server,
        identity: pending.identity,
        params: pending.params,
        meta: pending.meta,
        signal: extra?.signal,
      });
    } catch (error) {
      // No answer is not a refusal (docs/spec/evaluation.md, "Step 9: Consent").
      await pending.abandon();
      throw error;
    }
    return answer === true ? pending.approve() : pending.refuse();
  }

  async function handle(request, extra) {
    const frame = JSON.stringify({
      jsonrpc: '2.0',
      id: request.id ?? extra?.requestId ?? null,
      method: request.method,
      params: request.params,
    });
    let decision = await engine.decide(server, frame, samplingContext);
    if (decision.kind === 'consent') decision = await ask(decision, extra);
    if (decision.error) throw refuse(decision);
    return run(decision, request, extra);
  }

  handle.stats = stats;
  return handle;
}
