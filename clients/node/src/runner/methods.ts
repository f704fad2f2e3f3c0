// The JSON-RPC methods a TurnRunner serves, answered like the Python bridge's:
// responses/create, responses/turnStatus, responses/resumeDetached,
// responses/cancel, and the service's internal turnkeeper/execute,
// turnkeeper/cancel (a notification on the control subject) and turnkeeper/alive
// (a question on the control subject). Status questions are answered from the
// service, never from what this replica happens to run.

import { randomUUID } from "node:crypto";

import { type CallOptions, ConnectError } from "@connectrpc/connect";

import { type TurnkeeperClient, onBehalfOf } from "../client.js";
import { who } from "../callerAssertion.js";
import { MultitaskStrategy, TurnState } from "../gen/turnkeeper/v1/turns_pb.js";
import { toValue } from "../values.js";
import type { CallerCheck } from "./callers.js";
import { DESCRIBE, type GraphApi, HISTORY, STATE, UPDATE_STATE } from "./graphApi.js";
import type { Identity } from "./execution.js";
import {
  INTENT_KEY,
  REGENERATE_INPUT,
  type RunIntent,
  entryCheckpointId,
  isReserved,
  journaledRun,
  parseRun,
} from "./intent.js";
import {
  METHOD_NOT_FOUND,
  type Reply,
  type Request,
  RpcError,
  SERVICE_ERROR,
  invalidParams,
  optionalString,
  requiredInt,
  requiredString,
} from "./jsonrpc.js";
import { contractWord, responseStatus, statusWord } from "./status.js";
import type { TurnRuntime } from "./runtime.js";

export const CREATE = "responses/create";
export const TURN_STATUS = "responses/turnStatus";
export const RESUME_DETACHED = "responses/resumeDetached";
export const RESPONSES_CANCEL = "responses/cancel";
export const EXECUTE = "turnkeeper/execute";
/** How the service tells every replica that a turn was ended (a notification). */
export const CANCEL = "turnkeeper/cancel";
/** How the service asks a replica, before it re-drives turns whose leases lapsed,
 * which of them it still runs (decision 382): `{incarnation, turns: {turn_id:
 * attempt}}` on the control subject, answered `{running: [turn_id]}` by that
 * incarnation only. */
export const ALIVE = "turnkeeper/alive";
/** The service's own messages: not a caller's request (NATS's authorization says
 * who may publish them). */
const SERVICE_METHODS: ReadonlySet<string> = new Set([EXECUTE, CANCEL, ALIVE]);

/** responses/create's multitask_strategy words (the Python bridge's), the default first. */
const STRATEGIES: Record<string, MultitaskStrategy> = {
  reject: MultitaskStrategy.REJECT,
  enqueue: MultitaskStrategy.ENQUEUE,
  interrupt: MultitaskStrategy.INTERRUPT,
  rollback: MultitaskStrategy.ROLLBACK,
};

export class Methods {
  accepting = true;

  constructor(
    readonly client: TurnkeeperClient,
    readonly runtime: TurnRuntime,
    readonly identity: Identity,
    /** Who may call responses/*; undefined: anyone. */
    readonly callers?: CallerCheck,
    readonly log: (line: string) => void = () => undefined,
    /** The langgraph/* methods (the service's LangGraph API reads the graph here). */
    readonly graphApi?: GraphApi,
  ) {}

  async dispatch(request: Request): Promise<Reply> {
    const handlers: Record<string, (r: Request) => Promise<Reply>> = {
      [CREATE]: (r) => this.create(r),
      [TURN_STATUS]: (r) => this.turnStatus(r),
      [RESUME_DETACHED]: (r) => this.resumeDetached(r),
      [RESPONSES_CANCEL]: (r) => this.responsesCancel(r),
      [EXECUTE]: (r) => this.execute(r),
      [CANCEL]: (r) => this.cancelled(r),
      [ALIVE]: (r) => this.alive(r),
    };
    const graphApi = this.graphApi;
    if (graphApi !== undefined) {
      handlers[DESCRIBE] = (r) => graphApi.describe(r);
      handlers[STATE] = (r) => graphApi.state(r);
      handlers[HISTORY] = (r) => graphApi.history(r);
      handlers[UPDATE_STATE] = (r) => graphApi.updateState(r);
    }
    const handler = Object.hasOwn(handlers, request.method) ? handlers[request.method] : undefined;
    if (handler === undefined) {
      throw new RpcError(
        METHOD_NOT_FOUND,
        `method '${request.method}' not found; this agent serves ${Object.keys(handlers).join(", ")}`,
      );
    }
    try {
      // The service's own hand-offs (execute), cancel notifications and liveness
      // questions are not a caller's request: who may publish them is NATS's
      // authorization.
      if (this.callers !== undefined && !SERVICE_METHODS.has(request.method)) {
        const assertion = this.callers.check(request);
        request = { ...request, caller: who(assertion) };
      }
      return await handler(request);
    } catch (error) {
      throw error instanceof ConnectError ? RpcError.fromService(error) : error;
    }
  }

  async create(request: Request): Promise<Reply> {
    const params = request.params;
    if (params.background !== true) {
      throw invalidParams(
        `${CREATE} needs background: true (this agent runs detached turns; follow one with TurnStatus and WatchTurn)`,
      );
    }
    if (!("input" in params)) {
      throw invalidParams("input is required");
    }
    const strategyWord = params.multitask_strategy ?? "reject";
    const strategy = STRATEGIES[strategyWord as string];
    if (typeof strategyWord !== "string" || strategy === undefined || !Object.hasOwn(STRATEGIES, strategyWord)) {
      throw invalidParams(`multitask_strategy must be one of ${Object.keys(STRATEGIES).join(", ")}`);
    }
    const regenerate = params.regenerate ?? false;
    if (typeof regenerate !== "boolean") {
      throw invalidParams("regenerate must be true or false");
    }
    const payload = params.input;
    if (regenerate && payload !== null) {
      throw invalidParams("regenerate answers the thread's latest input again: input must be null");
    }
    if (isReserved(payload)) {
      throw invalidParams(`input: the top-level key '${INTENT_KEY}' is reserved`);
    }
    const turnId = optionalString(params, "turn_id") ?? randomUUID().replaceAll("-", "");
    const givenThreadId = optionalString(params, "thread_id");
    if (payload === null && givenThreadId === undefined) {
      throw invalidParams("input null continues a thread: thread_id is required");
    }
    const threadId = givenThreadId ?? randomUUID().replaceAll("-", "");
    let intent: RunIntent | undefined;
    if (params.run !== undefined && params.run !== null) {
      if (regenerate) {
        throw invalidParams("regenerate takes no run options");
      }
      try {
        intent = parseRun(params.run, payload);
      } catch (error) {
        throw invalidParams((error as Error).message);
      }
    }
    let input;
    try {
      input = toValue(regenerate ? REGENERATE_INPUT : intent !== undefined ? journaledRun(intent) : payload);
    } catch (error) {
      throw invalidParams(`input is not JSON data: ${(error as Error).message}`);
    }
    if (!this.accepting) {
      const message = "this replica is shutting down; send the request again";
      throw new RpcError(SERVICE_ERROR, message, { code: "UNAVAILABLE", message });
    }
    if (regenerate) {
      if ((await entryCheckpointId(this.runtime.host.graph, { configurable: { thread_id: threadId } })) === undefined) {
        const message = `thread ${threadId} has no run to regenerate`;
        throw new RpcError(SERVICE_ERROR, message, { code: "FAILED_PRECONDITION", message });
      }
    } else if (
      payload === null &&
      intent?.command === undefined &&
      intent?.checkpoint_id === undefined &&
      (await this.#nothingToContinue(threadId, optionalString(params, "turn_id")))
    ) {
      return { result: { turn_id: null, thread_id: threadId, status: "completed" } };
    }
    // A free slot: the turn is this replica's from the start. None: it is
    // journaled unowned and claimed here when a slot frees (admission.ts).
    const admission = this.runtime.admission;
    const slot = admission.tryTake();
    // Journaled before the answer: a turn the caller was told about exists. For a
    // caller, with its assertion: a regenerate needs the caller's right to cancel,
    // which the service checks.
    let response;
    try {
      response = await this.client.turns.startTurn(
        {
          turnId,
          threadId,
          agent: this.identity.agent,
          input,
          replica: slot ? this.identity.replica : "",
          incarnation: slot ? this.identity.incarnation : "",
          graph: this.runtime.host.graphVersion,
          multitaskStrategy: strategy,
        },
        forCaller(request),
      );
    } catch (error) {
      if (slot) {
        admission.giveBack();
      }
      throw error;
    }
    const turn = response.turn;
    if (turn === undefined) {
      if (slot) {
        admission.giveBack();
      }
      throw new RpcError(SERVICE_ERROR, "StartTurn answered without a turn");
    }
    const result: Record<string, unknown> = {
      turn_id: turn.turnId,
      thread_id: turn.threadId,
      status: responseStatus(turn.state),
    };
    if (response.cancelledTurnId) {
      result.cancelled_turn_id = response.cancelledTurnId;
    }
    if (!response.created || turn.state !== TurnState.RUNNING) {
      // The same request again: the turn is on its way (or over); or queued: the
      // service hands it to a replica when its turn comes.
      if (slot) {
        admission.giveBack();
      }
      return { result };
    }
    if (!slot) {
      // Every slot is taken: it waits, unowned, for the next one (or for another
      // replica the service offers it to).
      admission.waitToClaim(turn.turnId, turn.attempts, "create");
      return { result: { ...result, status: "queued" } };
    }
    return {
      result,
      after: async () => void this.runtime.start({ turn, checkpointId: "", reason: "create" }, { slot: true }),
    };
  }

  async #nothingToContinue(threadId: string, turnId: string | undefined): Promise<boolean> {
    if (await this.runtime.hasPendingWork(threadId)) {
      return false;
    }
    if (turnId === undefined) {
      return true;
    }
    const status = await this.client.turns.turnStatus({ turnId });
    return status.state === TurnState.UNKNOWN || status.state === TurnState.UNSPECIFIED;
  }

  async turnStatus(request: Request): Promise<Reply> {
    const turnId = requiredString(request.params, "turn_id");
    const status = await this.client.turns.turnStatus({ turnId });
    return {
      result: {
        turn_id: turnId,
        status: contractWord(status.state),
        state: statusWord(status.state),
        attempts: status.attempts,
        last_seq: Number(status.lastSeq),
        error: status.error,
        end_reason: status.endReason,
      },
    };
  }

  async resumeDetached(request: Request): Promise<Reply> {
    const turnId = requiredString(request.params, "turn_id");
    if (!("resume" in request.params)) {
      throw invalidParams("resume is required (the value interrupt() returns; may be null)");
    }
    let resume;
    try {
      resume = toValue(request.params.resume);
    } catch (error) {
      throw invalidParams(`resume is not JSON data: ${(error as Error).message}`);
    }
    // The audit log names whom this runner acted for.
    const response = await this.client.turns.resumeDetached({ turnId, resume }, forCaller(request));
    return {
      result: {
        turn_id: turnId,
        status: contractWord(response.turn?.state ?? TurnState.UNKNOWN),
        state: statusWord(response.turn?.state ?? TurnState.UNKNOWN),
        dispatched: response.dispatched,
      },
    };
  }

  async responsesCancel(request: Request): Promise<Reply> {
    const turnId = requiredString(request.params, "turn_id");
    const rollback = request.params.rollback ?? false;
    if (typeof rollback !== "boolean") {
      throw invalidParams("rollback must be true or false");
    }
    const reason = optionalString(request.params, "reason") ?? "";
    // The audit log names whom this runner acted for.
    const response = await this.client.turns.cancelTurn({ turnId, rollback, reason }, forCaller(request));
    return {
      result: {
        turn_id: turnId,
        status: responseStatus(response.turn?.state ?? TurnState.UNKNOWN),
        last_seq: Number(response.turn?.lastSeq ?? 0n),
        checkpoints_removed: response.checkpointsRemoved,
      },
    };
  }

  /** The service ended a turn: stop it here if it runs here, once the service
   * confirms it. A notice is only a hint (whoever can publish on the control
   * subject could forge one), so the turn's state is asked of the service first;
   * fencing would stop the execution at its next write anyway. */
  async cancelled(request: Request): Promise<Reply> {
    const turnId = requiredString(request.params, "turn_id");
    const attempt = requiredInt(request.params, "attempt");
    const reason = typeof request.params.reason === "string" ? request.params.reason : "";
    if (this.runtime.running(turnId) === undefined) {
      return { result: { stopped: false } };
    }
    const status = await this.client.turns.turnStatus({ turnId });
    if (status.state === TurnState.RUNNING && status.attempts === attempt) {
      this.log(`turn_id=${turnId} attempt=${attempt}: a stop notice for a turn the service says still runs: ignored`);
      return { result: { stopped: false } };
    }
    return { result: { stopped: this.runtime.cancel(turnId, attempt, reason) } };
  }

  /** Which of `turns` ({turn_id: attempt}) this replica still executes (or holds,
   * waiting for a slot), asked by the service when their leases lapsed: a heartbeat
   * that came late on a busy machine is no dead agent. Only the incarnation asked
   * about answers; the other replicas stay silent. */
  async alive(request: Request): Promise<Reply> {
    if (request.params.incarnation !== this.identity.incarnation) {
      return { result: null, silent: true };
    }
    const turns = request.params.turns;
    if (turns === null || typeof turns !== "object" || Array.isArray(turns)) {
      throw invalidParams("turns must be an object of turn_id: attempt");
    }
    const running = Object.entries(turns as Record<string, unknown>)
      .filter(([turnId, attempt]) => {
        const execution = this.runtime.running(turnId);
        return (
          Number.isInteger(attempt) && execution !== undefined && execution.attempt === attempt && execution.lost === undefined
        );
      })
      .map(([turnId]) => turnId)
      .sort();
    return { result: { running } };
  }

  async execute(request: Request): Promise<Reply> {
    const turnId = requiredString(request.params, "turn_id");
    const attempt = requiredInt(request.params, "attempt");
    const reason = typeof request.params.reason === "string" && request.params.reason ? request.params.reason : "handed out";
    if (!this.accepting) {
      return { result: { accepted: false } };
    }
    // Acknowledged on receipt; the claim and the run come after the answer.
    return { result: { accepted: true }, after: () => this.runtime.claim(turnId, attempt, reason) };
  }
}

/** The call options of a call made for the request's caller: whom it is for and the
 * caller's assertion (client.ts onBehalfOf); none without a checked caller. */
export function forCaller(request: Request): CallOptions | undefined {
  return request.caller === undefined ? undefined : onBehalfOf(request.caller, request.assertion ?? "");
}
