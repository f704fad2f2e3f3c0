// `effect`: exactly-once calls of functions that act on the world, for LangGraph.js
// agents under TurnRunner (or any graph run with TurnkeeperSaver and a turn in its
// config). The Python client's turnkeeper.agent.effect, in TypeScript.
//
// One call, in order (docs/effects.md):
//
// 1. its call site and idempotency key (key.ts);
// 2. BeginEffect, one round trip: a recorded outcome is returned (or its error thrown
//    as EffectFailed) without calling the function; an intent an earlier execution
//    recorded without an outcome is uncertain and goes to the policy; otherwise the
//    function runs. A `retry` effect records no intent first (its key makes a repeat
//    harmless): one durable commit, the outcome's; `park` and `fail` record the
//    intent first: two;
// 3. the function, with the key (`context.key`, or `effectKey()`);
// 4. RecordEffect with its result, or its error (then the error is thrown as is).

import { AsyncLocalStorage } from "node:async_hooks";

import type { RunnableConfig } from "@langchain/core/runnables";
import { getConfig, interrupt, isGraphBubbleUp } from "@langchain/langgraph";
import { create } from "@bufbuild/protobuf";

import {
  type BeginEffectResponse,
  type EffectCall,
  EffectCallSchema,
  EffectDecision,
  EffectPolicy,
  EffectState,
} from "../gen/turnkeeper/v1/turns_pb.js";
import { canonical } from "../canonical.js";
import { TurnkeeperSaver } from "../saver.js";
import { EffectFailed, EffectOutsideTurnkeeperSaver, EffectUncertain } from "./errors.js";
import { type CallSite, callSite } from "./key.js";

/** What to do with a call an earlier execution began and did not finish. */
export type EffectPolicyName = "retry" | "park" | "fail";

const POLICIES: Record<EffectPolicyName, EffectPolicy> = {
  retry: EffectPolicy.RETRY,
  park: EffectPolicy.PARK,
  fail: EffectPolicy.FAIL,
};

/** The interrupt payload's `type` when a `park` effect is uncertain. */
export const UNCERTAIN_INTERRUPT = "turnkeeper.effect.uncertain";

export interface EffectOptions {
  /**
   * `"retry"`: call again with the same key (for a receiver that drops a repeated
   * key: pass `context.key` on); `"park"` (the default): park the turn with an
   * interrupt naming the effect, and take the resume's answer,
   * `{happened: true, result}` or `{happened: false}`; `"fail"`: fail the turn.
   * TypeScript cannot see whether the function passes its key on, so the default is
   * the safe one for a function that does not.
   */
  policy?: EffectPolicyName;
}

/** What the effect's function is given beside its input. */
export interface EffectContext {
  /** The call's idempotency key: the same in every execution of this call. */
  key: string;
}

const running = new AsyncLocalStorage<string>();

/** The idempotency key of the effect call running now; throws outside an effect. */
export function effectKey(): string {
  const key = running.getStore();
  if (key === undefined) {
    throw new Error("effectKey() is only known inside a function wrapped by effect()");
  }
  return key;
}

/**
 * Make calls of `fn` exactly-once within a turn: a call whose outcome is recorded is
 * never made again, in a re-drive from the same checkpoint or on another replica.
 * Call the returned function inside a node (or a tool a node runs) of a turn; outside
 * a turn it simply calls `fn`. Its input is recorded as the call's arguments and its
 * result as the outcome, both as JSON.
 *
 * @param name the effect's name in the ledger (and in its key)
 */
export function effect<I, O>(
  name: string,
  fn: (input: I, context: EffectContext) => O | Promise<O>,
  options: EffectOptions = {},
): (input: I) => Promise<O> {
  const policy = options.policy ?? "park";
  if (!(policy in POLICIES)) {
    throw new TypeError(`policy must be "retry", "park" or "fail", not ${JSON.stringify(policy)}`);
  }
  if (!name) {
    throw new TypeError("an effect needs a name");
  }
  return async (input: I): Promise<O> => {
    const prepared = prepare(name, policy, input);
    if (prepared === undefined) {
      return fn(input, { key: "" });
    }
    return prepared.run(input, fn);
  };
}

function prepare(name: string, policy: EffectPolicyName, input: unknown): LedgerCall | undefined {
  let config: RunnableConfig | undefined;
  try {
    config = getConfig();
  } catch {
    return undefined; // not inside a LangGraph run: nothing to make exactly-once
  }
  if (config === undefined) {
    return undefined;
  }
  const site = callSite(config, name);
  if (site === undefined) {
    return undefined;
  }
  if (!(site.checkpointer instanceof TurnkeeperSaver)) {
    const kind = (site.checkpointer as { constructor?: { name?: string } } | undefined)?.constructor?.name ?? "none";
    throw new EffectOutsideTurnkeeperSaver(
      `effect ${JSON.stringify(name)} runs in turn ${JSON.stringify(site.turnId)} but the graph's checkpointer is ${kind}, not TurnkeeperSaver: the effect ledger is the turnkeeper service's`,
    );
  }
  return new LedgerCall(site, policy, site.checkpointer, canonical({ input }));
}

/** One call's requests to the ledger. */
class LedgerCall {
  readonly site: CallSite;
  readonly policy: EffectPolicyName;
  readonly saver: TurnkeeperSaver;
  readonly message: EffectCall;
  key: string;

  constructor(site: CallSite, policy: EffectPolicyName, saver: TurnkeeperSaver, argsJson: string) {
    this.site = site;
    this.policy = policy;
    this.saver = saver;
    this.key = site.key;
    this.message = create(EffectCallSchema, {
      turnId: site.turnId,
      attempt: site.attempt,
      key: site.key,
      name: site.name,
      argsJson,
      policy: POLICIES[policy],
      taskId: site.taskId,
      checkpointId: site.checkpointId,
      callIndex: site.callIndex,
    });
  }

  async run<I, O>(input: I, fn: (input: I, context: EffectContext) => O | Promise<O>): Promise<O> {
    const answer = await this.saver.client.turns.beginEffect({
      call: this.message,
      // A retry needs no intent: its key alone makes a repeat harmless.
      recordIntent: this.policy !== "retry",
    });
    this.key = answer.effect?.key || this.site.key;
    this.site.execution.made.add(this.key);
    if (answer.decision === EffectDecision.RECORDED) {
      return this.recorded(answer) as O;
    }
    if (answer.decision === EffectDecision.UNCERTAIN) {
      const [again, result] = this.uncertain();
      if (!again) {
        await this.record(EffectState.RESOLVED, result);
        return result as O;
      }
    }
    let result: O;
    try {
      result = await running.run(this.key, () => fn(input, { key: this.key }));
    } catch (error) {
      if (isGraphBubbleUp(error)) {
        throw error; // an interrupt inside the function: not an outcome
      }
      await this.record(EffectState.FAILED, errorOf(error));
      throw error;
    }
    const outcome = canonicalOrUndefined(result);
    if (outcome === undefined) {
      const error = new TypeError(
        `effect ${JSON.stringify(this.site.name)} returned ${typeof result}, which JSON cannot record; return a JSON value (its outcome is recorded as an error instead)`,
      );
      await this.record(EffectState.FAILED, errorOf(error));
      throw error;
    }
    await this.saver.client.turns.recordEffect({ call: this.message, key: this.key, state: EffectState.DONE, outcomeJson: outcome });
    return result;
  }

  recorded(answer: BeginEffectResponse): unknown {
    const outcome = JSON.parse(answer.effect?.outcomeJson || "null") as unknown;
    if (answer.effect?.state === EffectState.FAILED) {
      throw new EffectFailed(this.site.name, this.key, (outcome ?? {}) as { type?: unknown; message?: unknown });
    }
    return outcome;
  }

  /** The policy for an uncertain call: [true, undefined] to call again, or
   * [false, result] when an operator said it happened. */
  uncertain(): [boolean, unknown] {
    if (this.policy === "retry") {
      return [true, undefined];
    }
    const args = (JSON.parse(this.message.argsJson) as { input: unknown }).input;
    if (this.policy === "fail") {
      throw new EffectUncertain(this.site.name, this.key, args);
    }
    const answer = interrupt({
      type: UNCERTAIN_INTERRUPT,
      effect: this.site.name,
      key: this.key,
      args,
      question: `Did effect ${JSON.stringify(this.site.name)} happen? Resume with {"happened": true, "result": ...} or {"happened": false}.`,
    }) as unknown;
    const said = answer !== null && typeof answer === "object" ? (answer as { happened?: unknown; result?: unknown }) : undefined;
    if (said?.happened === true) {
      return [false, said.result];
    }
    if (said?.happened === false) {
      return [true, undefined];
    }
    throw new TypeError(
      `the answer for uncertain effect ${JSON.stringify(this.site.name)} (key ${this.key}) must be {"happened": true, "result": ...} or {"happened": false}, not ${JSON.stringify(answer)}`,
    );
  }

  async record(state: EffectState, outcome: unknown): Promise<void> {
    await this.saver.client.turns.recordEffect({
      call: this.message,
      key: this.key,
      state,
      outcomeJson: canonical(outcome ?? null),
    });
  }
}

function canonicalOrUndefined(value: unknown): string | undefined {
  if (typeof value === "function" || typeof value === "symbol") {
    return undefined;
  }
  return canonical(value === undefined ? null : value);
}

function errorOf(error: unknown): { type: string; message: string } {
  if (error instanceof Error) {
    return { type: error.name || error.constructor.name, message: error.message };
  }
  return { type: typeof error, message: String(error) };
}
