// The runner's admission limit (the Python bridge's --max-turns, decision 381) and
// its answer to the service's turnkeeper/alive (decision 382), without a service:
// the service's side of both is tests/node/test_node_overload.py.

import { parseArgs } from "../src/cli/graphArgs.js";
import type { TurnkeeperClient } from "../src/client.js";
import { type Turn, TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import { toValue } from "../src/values.js";
import { Admission, DEFAULT_MAX_TURNS, parseMaxTurns } from "../src/runner/admission.js";
import { Announcer } from "../src/runner/announce.js";
import type { ExecutionHost } from "../src/runner/execution.js";
import { INVALID_PARAMS, type Request, RpcError } from "../src/runner/jsonrpc.js";
import { ALIVE, CREATE, Methods } from "../src/runner/methods.js";
import { runnerConfigFromEnv } from "../src/runner/runner.js";
import { TurnRuntime } from "../src/runner/runtime.js";

const identity = { agent: "limited", replica: "r1", incarnation: "inc-1" };

function request(method: string, params: Record<string, unknown>): Request {
  return { id: "1", method, params, metadata: {}, wantsReply: true };
}

describe("Admission", () => {
  it("gives a slot while one is free, then none", () => {
    const admission = new Admission(2);
    expect([admission.tryTake(), admission.tryTake(), admission.tryTake()]).toEqual([true, true, false]);
    expect(admission.full).toBe(true);
    admission.giveBack();
    expect(admission.tryTake()).toBe(true);
  });

  it("has no limit at 0, and refuses a negative or fractional one", () => {
    const admission = new Admission(0);
    for (let i = 0; i < 500; i += 1) {
      expect(admission.tryTake()).toBe(true);
    }
    expect(() => new Admission(-1)).toThrow("maxTurns -1: a whole number, 0 (no limit) or more");
    expect(() => new Admission(1.5)).toThrow(TypeError);
    expect(new Admission().limit).toBe(64);
  });

  it("hands a freed slot to an owned execution first, then to claims in the order they came", async () => {
    const admission = new Admission(1);
    const claimed: string[] = [];
    admission.onClaim = (turnId, attempt, reason) => claimed.push(`${turnId}/${attempt}/${reason}`);
    expect(admission.tryTake()).toBe(true);
    admission.waitToClaim("c1", 0, "create");
    admission.waitToClaim("c2", 0, "lease-expired");
    // Offered again (every claim window): still one wait, its place kept, the newer attempt.
    admission.waitToClaim("c1", 1, "lease-expired");
    admission.waitToClaim("c1", 0, "stale");
    let owned = false;
    const waiting = admission.take().then(() => {
      owned = true;
    });
    expect(admission.waiting).toBe(3);
    // A waiting owned execution comes before any claim, even a free slot's taker.
    expect(admission.tryTake()).toBe(false);

    admission.giveBack();
    await waiting;
    expect([owned, claimed, admission.inUse]).toEqual([true, [], 1]);
    admission.giveBack();
    expect([claimed, admission.inUse]).toEqual([["c1/1/lease-expired"], 1]);
    admission.giveBack();
    expect([claimed, admission.inUse]).toEqual([["c1/1/lease-expired", "c2/0/lease-expired"], 1]);
    admission.giveBack();
    expect([admission.inUse, admission.waiting]).toEqual([0, 0]);
  });

  it("forgets a claim the replica runs already, and drops every claim when told", () => {
    const admission = new Admission(1);
    const claimed: string[] = [];
    admission.onClaim = (turnId) => claimed.push(turnId);
    admission.tryTake();
    admission.waitToClaim("a", 0, "create");
    admission.waitToClaim("b", 0, "create");
    admission.forget("a");
    admission.giveBack();
    expect(claimed).toEqual(["b"]);
    admission.waitToClaim("c", 0, "create");
    admission.clearClaims();
    admission.giveBack();
    expect([claimed, admission.waiting, admission.inUse]).toEqual([["b"], 0, 0]);
  });

  it("an owned execution that stops while it waits leaves the line and holds nothing", async () => {
    const admission = new Admission(1);
    admission.tryTake();
    const stop = new AbortController();
    const waiting = admission.take(stop.signal);
    expect(admission.waiting).toBe(1);
    stop.abort(new Error("lost"));
    await expect(waiting).rejects.toThrow("lost");
    expect(admission.waiting).toBe(0);
    admission.giveBack();
    expect(admission.inUse).toBe(0);
  });

  it("says when it turns full (or has turns waiting) and when a slot is free again", () => {
    const admission = new Admission(1);
    const said: boolean[] = [];
    admission.onFull = (full) => said.push(full);
    admission.tryTake();
    admission.waitToClaim("a", 0, "create");
    admission.onClaim = () => undefined;
    admission.giveBack(); // to the claim: still full
    admission.giveBack();
    expect(said).toEqual([true, false]);
  });
});

describe("the limit's settings", () => {
  it("TURNKEEPER_MAX_TURNS: 64 unless set, 0 for none, a clear error otherwise", () => {
    const env = { TURNKEEPER_AGENT: "a" };
    expect(runnerConfigFromEnv(undefined, env).maxTurns).toBe(DEFAULT_MAX_TURNS);
    expect(DEFAULT_MAX_TURNS).toBe(64);
    expect(runnerConfigFromEnv(undefined, { ...env, TURNKEEPER_MAX_TURNS: " 3 " }).maxTurns).toBe(3);
    expect(runnerConfigFromEnv(undefined, { ...env, TURNKEEPER_MAX_TURNS: "0" }).maxTurns).toBe(0);
    expect(runnerConfigFromEnv(undefined, { ...env, TURNKEEPER_MAX_TURNS: "" }).maxTurns).toBe(64);
    expect(() => runnerConfigFromEnv(undefined, { ...env, TURNKEEPER_MAX_TURNS: "many" })).toThrow(
      'TURNKEEPER_MAX_TURNS="many": a whole number of turns, 0 or more (0: no limit)',
    );
    expect(() => parseMaxTurns("-2")).toThrow("TURNKEEPER_MAX_TURNS");
    // The flag wins over the variable, even one that would be refused.
    expect(runnerConfigFromEnv(undefined, { ...env, TURNKEEPER_MAX_TURNS: "many" }, { maxTurns: 2 }).maxTurns).toBe(2);
  });

  it("turnkeeper-graph --max-turns N", () => {
    expect(parseArgs(["--max-turns", "2", "./a.ts:graph"])).toEqual({ spec: "./a.ts:graph", maxTurns: 2 });
    expect(parseArgs(["./a.ts:graph", "--max-turns=0"])).toEqual({ spec: "./a.ts:graph", maxTurns: 0 });
    expect(parseArgs(["./a.ts:graph"])).toEqual({ spec: "./a.ts:graph", maxTurns: undefined });
    expect(parseArgs(["--max-turns", "-1", "./a.ts"]).error).toBe(
      "--max-turns -1: a whole number of turns, 0 or more (0: no limit)",
    );
    expect(parseArgs(["./a.ts", "--max-turns"]).error).toMatch(/^--max-turns \(nothing\)/);
    expect(parseArgs(["--max-turn", "2", "./a.ts"]).error).toBe("unknown option --max-turn");
    expect(parseArgs([]).error).toBe("a graph is required");
  });

  it("the announcement carries the limit and says full when it changes", () => {
    const announcer = new Announcer("s", "d", { agent: "a", max_turns: 2, full: false });
    announcer.update({ full: true });
    expect(announcer.fields).toEqual({ agent: "a", max_turns: 2, full: true });
  });
});

/** A client whose StartTurn and ClaimTurn are recorded; ClaimTurn hands back no turn. */
function fakeClient(): { client: TurnkeeperClient; starts: Record<string, unknown>[]; claims: string[] } {
  const starts: Record<string, unknown>[] = [];
  const claims: string[] = [];
  const turns = {
    startTurn: async (start: Record<string, unknown>) => {
      starts.push(start);
      return {
        created: true,
        cancelledTurnId: "",
        turn: { turnId: start.turnId, threadId: start.threadId, state: TurnState.RUNNING, attempts: 0, lastSeq: 0n },
      };
    },
    claimTurn: async ({ turnId }: { turnId: string }) => {
      claims.push(turnId);
      return { checkpointId: "" };
    },
  };
  return { client: { turns } as unknown as TurnkeeperClient, starts, claims };
}

function runtimeOf(client: TurnkeeperClient, maxTurns: number): TurnRuntime {
  const host = { client, identity, log: () => undefined } as unknown as ExecutionHost;
  return new TurnRuntime(host, maxTurns);
}

describe("a runner past its limit", () => {
  it("journals a new turn unowned and answers it queued; with a free slot, the turn is its own", async () => {
    const { client, starts } = fakeClient();
    const runtime = runtimeOf(client, 1);
    const methods = new Methods(client, runtime, identity);
    const create = (turnId: string) =>
      methods.dispatch(request(CREATE, { input: "x", turn_id: turnId, thread_id: `th-${turnId}`, background: true }));

    const first = await create("first");
    expect(first.result).toEqual({ turn_id: "first", thread_id: "th-first", status: "in_progress" });
    expect(first.after).toBeDefined(); // starts it here once answered
    const second = await create("second");
    expect(second.result).toEqual({ turn_id: "second", thread_id: "th-second", status: "queued" });
    expect(second.after).toBeUndefined();
    expect(starts.map((s) => [s.turnId, s.replica, s.incarnation])).toEqual([
      ["first", "r1", "inc-1"],
      ["second", "", ""],
    ]);
    expect([runtime.admission.inUse, runtime.admission.waiting]).toEqual([1, 1]);
  });

  it("claims a handed-out turn when a slot frees, not before", async () => {
    const { client, claims } = fakeClient();
    const runtime = runtimeOf(client, 1);
    expect(runtime.admission.tryTake()).toBe(true);
    await runtime.claim("handed", 0, "lease-expired");
    expect([claims, runtime.admission.waiting]).toEqual([[], 1]);
    runtime.admission.giveBack();
    await vi.waitFor(() => expect(claims).toEqual(["handed"]));
    // ClaimTurn gave no turn: the slot it held is free again.
    await vi.waitFor(() => expect(runtime.admission.inUse).toBe(0));
  });
});

describe("a turn already this replica's (its startup Redrive) past the limit", () => {
  /** A host whose graph only records that it was asked to run, then fails as a lost
   * service does (the execution leaves the turn for a re-drive, writing nothing). */
  function owned(): { runtime: TurnRuntime; ran: string[]; heartbeats: string[] } {
    const ran: string[] = [];
    const heartbeats: string[] = [];
    const turns = {
      heartbeat: async ({ turnId }: { turnId: string }) => {
        heartbeats.push(turnId);
        return {};
      },
    };
    const lost = Object.assign(new Error("unavailable"), { name: "ConnectError" });
    const host = {
      graph: {
        stream: async (input: unknown) => {
          ran.push(String((input as { job: string }).job));
          throw lost;
        },
      },
      client: { turns } as unknown as TurnkeeperClient,
      saver: { attach: () => undefined, detach: () => undefined },
      identity,
      inputMapper: (input: unknown) => ({ job: input }),
      log: () => undefined,
    } as unknown as ExecutionHost;
    return { runtime: new TurnRuntime(host, 1), ran, heartbeats };
  }
  const turn = (turnId: string, leaseMs: number): Turn =>
    ({
      turnId,
      threadId: `th-${turnId}`,
      attempts: 0,
      lastSeq: 0n,
      input: toValue(turnId),
      updatedAt: { seconds: 100n, nanos: 0 },
      owner: { leaseExpiresAt: { seconds: 100n, nanos: leaseMs * 1e6 } },
    }) as unknown as Turn;

  it("waits for a slot holding its lease, is named alive meanwhile, and runs once one frees", async () => {
    const { runtime, ran, heartbeats } = owned();
    expect(runtime.admission.tryTake()).toBe(true);
    expect(runtime.start({ turn: turn("redriven", 150), checkpointId: "", reason: "startup redrive" })).toBe(true);
    expect(runtime.admission.waiting).toBe(1);
    // Its lease is heartbeated while it waits (every third of the lease).
    await vi.waitFor(() => expect(heartbeats).toContain("redriven"));
    expect(ran).toEqual([]);
    const methods = new Methods({} as TurnkeeperClient, runtime, identity);
    const asked = await methods.dispatch(request(ALIVE, { incarnation: "inc-1", turns: { redriven: 0 } }));
    expect(asked.result).toEqual({ running: ["redriven"] });

    runtime.admission.giveBack();
    const execution = runtime.running("redriven");
    await execution?.done;
    expect(ran).toEqual(["redriven"]);
    // Its slot came back when it ended.
    expect([runtime.admission.inUse, runtime.admission.waiting]).toEqual([0, 0]);
  });

  it("that loses its turn while it waits runs nothing and holds no slot", async () => {
    const { runtime, ran } = owned();
    runtime.admission.tryTake();
    runtime.start({ turn: turn("cancelled", 15_000), checkpointId: "", reason: "startup redrive" });
    expect(runtime.cancel("cancelled", 0, "cancelled")).toBe(true);
    await runtime.running("cancelled")?.done;
    runtime.admission.giveBack();
    expect([ran, runtime.admission.inUse, runtime.admission.waiting]).toEqual([[], 0, 0]);
  });
});

describe("turnkeeper/alive", () => {
  const lost = { attempt: 0, lost: "superseded" };
  const executions: Record<string, { attempt: number; lost?: string }> = {
    mine: { attempt: 2 },
    gone: lost,
  };
  const runtime = { running: (turnId: string) => executions[turnId] } as unknown as TurnRuntime;
  const methods = new Methods({} as TurnkeeperClient, runtime, identity);

  it("names the turns this incarnation still runs at the attempt asked about", async () => {
    const reply = await methods.dispatch(
      request(ALIVE, { incarnation: "inc-1", turns: { mine: 2, other: 0, gone: 0 } }),
    );
    expect(reply).toEqual({ result: { running: ["mine"] } });
    const older = await methods.dispatch(request(ALIVE, { incarnation: "inc-1", turns: { mine: 1 } }));
    expect(older.result).toEqual({ running: [] });
  });

  it("stays silent when asked about another incarnation (its owner may answer)", async () => {
    const reply = await methods.dispatch(request(ALIVE, { incarnation: "inc-2", turns: { mine: 2 } }));
    expect(reply.silent).toBe(true);
  });

  it("refuses turns that are not an object of turn_id: attempt", async () => {
    const refused = await methods.dispatch(request(ALIVE, { incarnation: "inc-1", turns: ["mine"] })).catch((e) => e);
    expect(refused).toBeInstanceOf(RpcError);
    expect([refused.code, refused.message]).toEqual([INVALID_PARAMS, "turns must be an object of turn_id: attempt"]);
  });
});

describe("a resume handed out while the parked attempt is still ending (decision 560)", () => {
  it("is claimed once that execution ends, not dropped as one that runs here", async () => {
    // ResumeDetached keeps the attempt: its hand-off names the attempt whose ParkTurn
    // is still being answered here. The park is held open until the test lets it go.
    let letPark: () => void = () => undefined;
    const parking = new Promise<void>((resolve) => {
      letPark = resolve;
    });
    let parkSent!: () => void;
    const parkAsked = new Promise<void>((resolve) => {
      parkSent = resolve;
    });
    const claims: Array<[string, number, boolean]> = [];
    let ended = false;
    const turns = {
      heartbeat: async () => ({}),
      parkTurn: async () => {
        parkSent();
        await parking;
        return {};
      },
      claimTurn: async ({ turnId, attempt }: { turnId: string; attempt: number }) => {
        claims.push([turnId, attempt, ended]);
        return { checkpointId: "" }; // no turn: nothing more starts
      },
    };
    const host = {
      graph: {
        stream: async function* () {
          yield ["updates", { __interrupt__: [{ id: "i1", value: "ok?" }] }];
        },
      },
      client: { turns } as unknown as TurnkeeperClient,
      saver: { attach: () => undefined, detach: () => undefined },
      identity,
      inputMapper: (input: unknown) => input,
      log: () => undefined,
    } as unknown as ExecutionHost;
    const runtime = new TurnRuntime(host, 4);
    const turn = { turnId: "parked", threadId: "th-parked", attempts: 2, lastSeq: 0n, input: toValue("x") } as unknown as Turn;
    expect(runtime.admission.tryTake()).toBe(true);
    expect(runtime.start({ turn, checkpointId: "", reason: "create" }, { slot: true })).toBe(true);
    const running = runtime.running("parked");
    void running?.done.then(() => {
      ended = true;
    });
    await parkAsked;
    expect(running?.settling).toBe(true);

    const claim = runtime.claim("parked", 2, "resume");
    letPark();
    await claim;
    expect(claims).toEqual([["parked", 2, true]]);
    expect(runtime.admission.inUse).toBe(0);
  });
});
