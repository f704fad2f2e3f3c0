// The TypeScript client computes what the cross-language vectors say
// (vectors/README.md): the files in vectors/ are written once from the Python client
// (scripts/gen_vectors.py) and read here, case by case; tests/packaging/test_vectors.py
// reads the same files for the Python client. Nothing here rewrites them.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { ToolMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";

import { type CallerAssertion, keyId, keyOf, keyOfToken, sign, tokenDigest, verify, who } from "../src/callerAssertion.js";
import { canonical } from "../src/canonical.js";
import { callSite } from "../src/effect/key.js";
import { LIVE_STATES, TERMINAL_EVENT_TYPES } from "../src/follow.js";
import type { TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import { natsIdentityOf } from "../src/natsIdentity.js";
import { EventCapture } from "../src/runner/capture.js";
import type { EventLog } from "../src/runner/events.js";
import { idempotencyKey } from "../src/runner/execution.js";
import { isRegenerate, isReserved, journaledRun, runIntent } from "../src/runner/intent.js";
import { contractWord, stateOfAnswer, statusWord } from "../src/runner/status.js";
import { type CheckpointLike, GraphVersion, fingerprint } from "../src/runner/version.js";
import { stateName } from "../src/states.js";

interface Case<I, E> {
  name: string;
  input: I;
  expected: E;
}

function vectors<I, E>(file: string): Case<I, E>[] {
  const path = fileURLToPath(new URL(`../../../vectors/${file}`, import.meta.url));
  return (JSON.parse(readFileSync(path, "utf8")) as { cases: Case<I, E>[] }).cases;
}

interface EffectCall {
  thread_id: string;
  turn_id: string;
  checkpoint_ns: string;
  task_id: string;
  node_attempt: number;
  name: string;
  call_index: number;
}

describe("effect keys (vectors/effect_keys.json)", () => {
  it.each(vectors<EffectCall, { key: string }>("effect_keys.json"))("$name", ({ input, expected }) => {
    // The config LangGraph.js gives the running task: the turn (TurnRunner's), the
    // task, its namespace and the node's try (executionInfo).
    const config = {
      configurable: {
        thread_id: input.thread_id,
        turn_id: input.turn_id,
        attempt: 0,
        checkpoint_ns: input.checkpoint_ns,
        __pregel_task_id: input.task_id,
        __pregel_scratchpad: {},
      },
      executionInfo: { nodeAttempt: input.node_attempt },
    } as RunnableConfig;
    // The call at position call_index is the task's (call_index + 1)th call of it.
    let site = callSite(config, input.name);
    for (let made = 0; made < input.call_index; made++) {
      site = callSite(config, input.name);
    }
    expect(site?.callIndex).toBe(input.call_index);
    expect(site?.key).toBe(expected.key);
  });
});

describe("step keys (vectors/step_keys.json)", () => {
  it.each(vectors<{ config: RunnableConfig }, { key: string }>("step_keys.json"))("$name", ({ input, expected }) => {
    expect(idempotencyKey(input.config)).toBe(expected.key);
  });
});

describe("caller assertion keys (vectors/caller_assertion_keys.json)", () => {
  type Keys = { digest: string; key_hex: string; key_id: string };
  it.each(vectors<{ token: string }, Keys>("caller_assertion_keys.json"))("$name", ({ input, expected }) => {
    const digest = tokenDigest(input.token);
    const key = keyOf(digest);
    expect({ digest, key_hex: key.toString("hex"), key_id: keyId(key) }).toEqual(expected);
  });
});

interface AssertionFields {
  agent: string;
  method: string;
  request_id: string;
  name: string;
  role: string;
  caller_agent: string;
  methods: string[];
  expires_at: number;
}

const assertionOf = (fields: AssertionFields): CallerAssertion => ({
  agent: fields.agent,
  method: fields.method,
  requestId: fields.request_id,
  name: fields.name,
  role: fields.role,
  callerAgent: fields.caller_agent,
  methods: fields.methods,
  expiresAt: fields.expires_at,
});

describe("caller assertion signatures (vectors/caller_assertion_signatures.json)", () => {
  type Input = { assertion: AssertionFields; tokens: string[] };
  it.each(vectors<Input, { header: string }>("caller_assertion_signatures.json"))("$name", ({ input, expected }) => {
    expect(sign(assertionOf(input.assertion), input.tokens.map(keyOfToken))).toBe(expected.header);
  });
});

describe("caller assertion verifications (vectors/caller_assertion_verifications.json)", () => {
  interface Input {
    header: string;
    tokens: string[];
    agent: string;
    method: string | null;
    request_id: string | null;
    now: number;
  }
  type Expected = { assertion: AssertionFields & { who: string } } | { refused: string };
  it.each(vectors<Input, Expected>("caller_assertion_verifications.json"))("$name", ({ input, expected }) => {
    let outcome: Expected;
    try {
      const found = verify(input.header, input.tokens.map(keyOfToken), {
        agent: input.agent,
        method: input.method ?? undefined,
        requestId: input.request_id ?? undefined,
        now: input.now,
      });
      outcome = {
        assertion: {
          agent: found.agent,
          method: found.method,
          request_id: found.requestId,
          name: found.name,
          role: found.role,
          caller_agent: found.callerAgent,
          methods: [...found.methods],
          expires_at: found.expiresAt,
          who: who(found),
        },
      };
    } catch (error) {
      outcome = { refused: (error as Error).message };
    }
    expect(outcome).toEqual(expected);
  });
});

describe("NATS identities (vectors/nats_identities.json)", () => {
  type Expected = { user: string; password: string; inbox_prefix: string };
  it.each(vectors<{ token: string }, Expected>("nats_identities.json"))("$name", ({ input, expected }) => {
    const found = natsIdentityOf(input.token);
    expect({ user: found.user, password: found.pass, inbox_prefix: found.inboxPrefix }).toEqual(expected);
  });
});

describe("canonical JSON (vectors/canonical_json.json)", () => {
  it.each(vectors<{ value: unknown }, { text: string }>("canonical_json.json"))("$name", ({ input, expected }) => {
    expect(canonical(input.value)).toBe(expected.text);
  });
});

describe("graph fingerprints (vectors/graph_fingerprints.json)", () => {
  type Input = { shape: unknown; label: string };
  it.each(vectors<Input, { fingerprint: string }>("graph_fingerprints.json"))("$name", ({ input, expected }) => {
    expect(fingerprint(input.shape, input.label)).toBe(expected.fingerprint);
  });
});

describe("graph stamps (vectors/graph_stamps.json)", () => {
  type Input = { shape: Record<string, unknown>; label: string; checkpoint: CheckpointLike };
  type Expected = { stamp: { fingerprint: string; label: string; next: string[]; channels: Record<string, string> } };
  it.each(vectors<Input, Expected>("graph_stamps.json"))("$name", ({ input, expected }) => {
    // A version made from a shape, as one made from a compiled graph holds it: the
    // shape itself is read from a graph differently in each language (README).
    const version = Object.assign(Object.create(GraphVersion.prototype) as GraphVersion, {
      shape: input.shape,
      label: input.label,
      fingerprint: fingerprint(input.shape, input.label),
    });
    expect(version.stamp(input.checkpoint)).toEqual(expected.stamp);
  });
});

describe("run intents (vectors/run_intents.json)", () => {
  type Expected = { regenerate: boolean; reserved: boolean; run: unknown };
  it.each(vectors<{ journaled: unknown }, Expected>("run_intents.json"))("$name", ({ input, expected }) => {
    const run = runIntent(input.journaled);
    expect({
      regenerate: isRegenerate(input.journaled),
      reserved: isReserved(input.journaled),
      run: run === undefined ? null : journaledRun(run),
    }).toEqual(expected);
  });
});

describe("turn states (vectors/turn_states.json)", () => {
  type Input = { proto?: number; answer?: { state?: unknown; status?: unknown } };
  it.each(vectors<Input, Record<string, unknown>>("turn_states.json"))("$name", ({ input, expected }) => {
    if (input.proto !== undefined) {
      const state = input.proto as TurnState;
      const name = stateName(state);
      expect({
        name,
        word: statusWord(state),
        contract_word: contractWord(state),
        live: LIVE_STATES.includes(name),
      }).toEqual(expected);
    } else if (input.answer !== undefined) {
      expect({ name: stateName(stateOfAnswer(input.answer)) }).toEqual(expected);
    } else {
      expect({ terminal_event_types: [...TERMINAL_EVENT_TYPES].sort() }).toEqual(expected);
    }
  });
});

describe("captured events (vectors/captured_events.json)", () => {
  // One LangChain callback, in the vector's neutral form.
  interface Callback {
    on: string;
    run: string;
    parent?: string | null;
    node?: string | null;
    name?: string;
    step?: number | null;
    outputs?: unknown;
    error?: string | { type: string; message: string };
    token?: string;
    input?: string;
    tool_call_id?: string | null;
    output?: unknown;
    message?: boolean;
  }

  function captured(callbacks: Callback[]): unknown[][] {
    const events: unknown[][] = [];
    const log = { emit: (type: string, data: unknown) => events.push([type, data]) } as unknown as EventLog;
    const capture = new EventCapture(log);
    for (const c of callbacks) {
      const metadata: Record<string, unknown> = {};
      if (c.node !== undefined && c.node !== null) metadata.langgraph_node = c.node;
      if (c.step !== undefined && c.step !== null) metadata.langgraph_step = c.step;
      const parent = c.parent ?? undefined;
      if (c.on === "chain_start") {
        capture.handleChainStart({} as never, {}, c.run, parent, undefined, metadata, undefined, c.name);
      } else if (c.on === "chain_end") {
        capture.handleChainEnd(c.outputs, c.run);
      } else if (c.on === "chain_error") {
        capture.handleChainError(new Error(String(c.error)), c.run);
      } else if (c.on === "chat_model_start") {
        capture.handleChatModelStart({} as never, [[]], c.run, undefined, undefined, undefined, metadata);
      } else if (c.on === "llm_new_token") {
        capture.handleLLMNewToken(c.token ?? "", {}, c.run);
      } else if (c.on === "llm_end") {
        capture.handleLLMEnd({}, c.run);
      } else if (c.on === "tool_start") {
        capture.handleToolStart(
          { name: c.name } as never,
          c.input ?? "",
          c.run,
          undefined,
          undefined,
          metadata,
          c.name,
          c.tool_call_id ?? undefined,
        );
      } else if (c.on === "tool_end") {
        const output = c.message ? new ToolMessage({ content: c.output as string, tool_call_id: c.tool_call_id ?? "" }) : c.output;
        capture.handleToolEnd(output, c.run);
      } else if (c.on === "tool_error") {
        const given = c.error as { type: string; message: string };
        const error = new Error(given.message);
        error.name = given.type;
        capture.handleToolError(error, c.run);
      } else {
        throw new Error(`no callback ${c.on}`);
      }
    }
    return events;
  }

  it.each(vectors<{ callbacks: Callback[] }, { events: unknown[][] }>("captured_events.json"))("$name", ({ input, expected }) => {
    expect(captured(input.callbacks)).toEqual(expected.events);
  });
});
