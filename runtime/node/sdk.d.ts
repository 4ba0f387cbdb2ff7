// Types of sdk.js, the adapter for @modelcontextprotocol/sdk's Client.
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type {
  ClientNotification,
  ClientRequest,
  CreateMessageRequest,
  CreateMessageResult,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import type { Engine } from './native.js';

export type SamplingExtra = RequestHandlerExtra<ClientRequest, ClientNotification>;

/** The client's own sampling handler: what it would give setRequestHandler. */
export type SamplingHandler = (
  request: CreateMessageRequest,
  extra: SamplingExtra,
) => CreateMessageResult | Promise<CreateMessageResult>;

/** What a consent dialog shows; resolve to `true` to approve. */
export interface ConsentRequest {
  /** The server asking, as the user named it. */
  server: string;
  /** The request identity the answer is stored under. */
  identity: string | null;
  /** The request as it will run if approved (trims applied). */
  params: Record<string, unknown> | null;
  /** The trims the policy made (`_meta` annotations), or null. */
  meta: Record<string, unknown> | null;
  /** Aborts when the server cancels its request. */
  signal?: AbortSignal;
}

export interface SamplingOptions {
  /** The engine deciding (one per client process; share it between connections). */
  engine: Engine;
  /** The id the user gave this server in the client's configuration. */
  server: string;
  /** Runs the model on the request as the policy lets it run (params narrowed). Its `extra.signal` aborts at the policy's deadline. */
  handler: SamplingHandler;
  /** Asks the user when the policy needs consent. Without it such requests fail with -32603 and nothing is stored. */
  consent?: (request: ConsentRequest) => boolean | Promise<boolean>;
  /**
   * The tokens the completion used (input plus output, as the provider
   * billed them). Default: unknown (`undefined`), and the whole `maxTokens`
   * the request ran with is counted against token budgets.
   */
  usage?: (
    result: CreateMessageResult,
    params: Record<string, unknown>,
  ) => number | undefined | Promise<number | undefined>;
  /** Whether the client declared `sampling.context`; default: read from the client's capabilities. */
  samplingContext?: boolean;
  /** Told when settling a budget failed (the reservation stays counted). */
  onSettleError?: (error: Error) => void;
}

/** What the adapter counted. */
export interface SamplingStats {
  consentPrompts: number;
  calls: number;
  allowed: number;
  trimmed: number;
  denied: number;
  deadlineMisses: number;
  settleFailures: number;
}

/** Installs the policy's sampling handler on `client`; returns its counters. */
export declare function installSampling(client: Client, options: SamplingOptions): SamplingStats;

/** The handler alone, for a caller that installs it itself. */
export declare function samplingHandler(
  options: SamplingOptions,
  samplingContext?: boolean,
): ((request: CreateMessageRequest, extra: SamplingExtra) => Promise<CreateMessageResult>) & {
  stats: SamplingStats;
};

/** An McpError whose code, message and data are a frame's error exactly. */
export declare function frameError(error: {
  code: number;
  message: string;
  data?: unknown;
}): McpError;

/** The default `usage` hook: unknown. */
export declare function unknownUsage(): undefined;
