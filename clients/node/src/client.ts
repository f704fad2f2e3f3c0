// The raw client: every RPC of TurnService, CheckpointService and OperationsService, over gRPC (HTTP/2)
// with the Connect transport, on messages generated from the repository's protos.
//
// Each method takes the request as a plain object (`{ turnId: "t1" }`) or a
// message, and returns the response message; a server stream is an async
// iterable. Errors are ConnectErrors: `error.code` is a `Code` (see errors.ts).

import { type CallOptions, type Client, type Interceptor, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import { METADATA as ASSERTION_METADATA } from "./callerAssertion.js";
import {
  type ConnectionOptions,
  DEFAULT_CALL_TIMEOUT_MS,
  connectionFromEnv,
  usesTls,
  validateConnection,
} from "./connection.js";
import { CheckpointService } from "./gen/turnkeeper/v1/checkpoints_pb.js";
import { OperationsService } from "./gen/turnkeeper/v1/operations_pb.js";
import { retryInterceptor } from "./retry.js";
import { TurnService } from "./gen/turnkeeper/v1/turns_pb.js";
import { type TurnStatusView, statusView } from "./states.js";

export type TurnServiceClient = Client<typeof TurnService>;
export type CheckpointServiceClient = Client<typeof CheckpointService>;
export type OperationsServiceClient = Client<typeof OperationsService>;

/** gRPC metadata in which an agent names whom it acts for (its JSON-RPC caller),
 * for the service's audit log; the service takes it from agent tokens only. */
export const ON_BEHALF_OF = "turnkeeper-on-behalf-of";

/**
 * Call options for a call an agent makes for its JSON-RPC caller (StartTurn,
 * ResumeDetached, CancelTurn): `turnkeeper-on-behalf-of: <who>` and, given the
 * caller assertion the service signed for the caller's request
 * (`turnkeeper-caller-assertion`), the service applies the caller's rights as well
 * as the agent's (an interrupt, a rollback or a regenerate needs CancelTurn's) and
 * names the caller in its audit log. Per call: pass it as the call's options,
 * `client.turns.resumeDetached(request, onBehalfOf("alice (operator)", assertion))`;
 * the bearer token still goes on through the client's own interceptor.
 */
export function onBehalfOf(who: string, assertion = "", options: CallOptions = {}): CallOptions {
  const headers = new Headers(options.headers);
  // A header value is printable ASCII: a name that is not is written with "?".
  headers.set(ON_BEHALF_OF, who.replace(/[^\x20-\x7e]/g, "?"));
  if (assertion) {
    headers.set(ASSERTION_METADATA, assertion);
  }
  return { ...options, headers };
}

/** `authorization: Bearer <token>` on every call. */
function bearer(token: string): Interceptor {
  const value = `Bearer ${token}`;
  return (next) => async (request) => {
    request.header.set("authorization", value);
    return next(request);
  };
}

export class TurnkeeperClient {
  /** Every TurnService RPC: startTurn, turnStatus, ..., watchTurn (a stream). */
  readonly turns: TurnServiceClient;
  /** Every CheckpointService RPC: getCheckpoint, listCheckpoints (a stream), ... */
  readonly checkpoints: CheckpointServiceClient;
  /** OperationsService: introspect (who a token is), issueAssertion (a caller
   * assertion for one request to an agent on NATS: callerAssertion.ts), listAudit. */
  readonly operations: OperationsServiceClient;
  readonly options: ConnectionOptions;
  readonly #sessions: Http2SessionManager;
  #closed = false;

  /**
   * @param options where and how to connect; a string is an address; omitted,
   *   the environment's settings (connectionFromEnv)
   */
  constructor(options?: ConnectionOptions | string) {
    const resolved =
      typeof options === "string"
        ? connectionFromEnv(process.env, { address: options })
        : (options ?? connectionFromEnv());
    validateConnection(resolved);
    this.options = resolved;
    const tls = usesTls(resolved);
    const baseUrl = `${tls ? "https" : "http"}://${resolved.address}`;
    const nodeOptions = tls
      ? {
          ca: resolved.rootCertificates,
          cert: resolved.clientCertificate,
          key: resolved.clientKey,
        }
      : {};
    // One HTTP/2 session for both services, so close() ends it for good.
    this.#sessions = new Http2SessionManager(
      baseUrl,
      { pingIntervalMs: 30_000, pingIdleConnection: false },
      nodeOptions,
    );
    const transport = createGrpcTransport({
      baseUrl,
      sessionManager: this.#sessions,
      defaultTimeoutMs: resolved.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
      // Outermost first: a retried call carries the token on every attempt.
      interceptors: [retryInterceptor(resolved.retry), ...(resolved.bearerToken ? [bearer(resolved.bearerToken)] : [])],
    });
    this.turns = createClient(TurnService, transport);
    this.checkpoints = createClient(CheckpointService, transport);
    this.operations = createClient(OperationsService, transport);
  }

  /**
   * A turn's status with its state by name ("RUNNING", ..., "UNKNOWN" for an id the
   * service never saw); `turns.turnStatus` answers the raw message, its state a number.
   */
  async status(turnId: string, options?: CallOptions): Promise<TurnStatusView> {
    return statusView(await this.turns.turnStatus({ turnId }, options));
  }

  /** Close the connection; calls in flight fail with CANCELED. Safe twice. */
  close(): void {
    if (this.#closed) {
      return;
    }
    this.#closed = true;
    this.#sessions.abort();
  }
}

/** Call options for a server stream: no deadline (timeoutMs 0 means none). */
export const STREAM_CALL = Object.freeze({ timeoutMs: 0 });
