// JSON-RPC 2.0 in vystak's envelope {jsonrpc, id, method, params, metadata}: the
// same parsing, error codes and answers as the Python bridge.

import { ConnectError } from "@connectrpc/connect";

import { codeName } from "../errors.js";

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;
/** The service refused or failed the call; `data` has the gRPC status name and message. */
export const SERVICE_ERROR = -32000;

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }

  static fromService(error: ConnectError): RpcError {
    return new RpcError(SERVICE_ERROR, error.rawMessage, { code: codeName(error.code), message: error.rawMessage });
  }

  toJSON(): Record<string, unknown> {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data };
  }
}

export const invalidParams = (message: string): RpcError => new RpcError(INVALID_PARAMS, message);

export interface Request {
  id: unknown;
  method: string;
  params: Record<string, unknown>;
  metadata: Record<string, unknown>;
  /** False for a notification (no id): nobody waits for an answer. */
  wantsReply: boolean;
  /** The NATS header Turnkeeper-Assertion: the caller assertion the service signed
   * for this request (callers.ts). */
  assertion?: string;
  /** Whether an Authorization header came too: never taken, only named in the
   * refusal (a bearer token is not sent to an agent). */
  bearer?: boolean;
  /** Who the caller is once callers.ts checked it ("alice (operator)"): the calls
   * made for it pass it on, with its assertion. */
  caller?: string;
}

/** A method's result, and the work to start once the answer is sent (not named
 * `then`: an object with a then() method would be awaited as a promise). */
export interface Reply {
  result: unknown;
  after?: () => Promise<void>;
  /** Send no answer at all (a question meant for another replica: turnkeeper/alive
   * about another incarnation, whose owner may still answer). */
  silent?: boolean;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

export function parse(data: Uint8Array): Request {
  let envelope: unknown;
  try {
    envelope = JSON.parse(Buffer.from(data).toString("utf8"));
  } catch (error) {
    throw new RpcError(PARSE_ERROR, `the message is not JSON: ${(error as Error).message}`);
  }
  if (!isObject(envelope)) {
    throw new RpcError(INVALID_REQUEST, "a JSON-RPC request is a JSON object");
  }
  if (envelope.jsonrpc !== "2.0") {
    throw new RpcError(INVALID_REQUEST, 'the request must carry "jsonrpc": "2.0"');
  }
  const method = envelope.method;
  if (typeof method !== "string" || !method) {
    throw new RpcError(INVALID_REQUEST, '"method" must be a non-empty string');
  }
  const params = envelope.params ?? {};
  if (!isObject(params)) {
    throw new RpcError(INVALID_PARAMS, `${method}: params must be a JSON object`);
  }
  return {
    id: envelope.id ?? null,
    method,
    params,
    metadata: isObject(envelope.metadata) ? envelope.metadata : {},
    wantsReply: "id" in envelope,
  };
}

/** The id of a request that failed to parse as a whole, if it can be found. */
export function requestId(data: Uint8Array): unknown {
  try {
    const envelope: unknown = JSON.parse(Buffer.from(data).toString("utf8"));
    return isObject(envelope) ? (envelope.id ?? null) : null;
  } catch {
    return null;
  }
}

export const resultEnvelope = (id: unknown, result: unknown): string =>
  JSON.stringify({ jsonrpc: "2.0", id, result });

export const errorEnvelope = (id: unknown, error: RpcError): string =>
  JSON.stringify({ jsonrpc: "2.0", id, error: error.toJSON() });

export function optionalString(params: Record<string, unknown>, name: string): string | undefined {
  const value = params[name];
  if (value === undefined || value === null) {
    return undefined;
  }
  if (typeof value !== "string" || !value) {
    throw invalidParams(`${name} must be a non-empty string`);
  }
  return value;
}

export function requiredString(params: Record<string, unknown>, name: string): string {
  const value = optionalString(params, name);
  if (value === undefined) {
    throw invalidParams(`${name} is required`);
  }
  return value;
}

export function requiredInt(params: Record<string, unknown>, name: string): number {
  const value = params[name];
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw invalidParams(`${name} must be a non-negative integer`);
  }
  return value;
}
