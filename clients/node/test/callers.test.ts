// Caller assertions without a service: the format shared with the Python
// turnkeeper.caller_assertion (a value Python signed verifies here, and the same
// assertion signs to the same value), the runner's CallerCheck (what it refuses and
// why), and what the runner passes on to the service for its caller.

import type { CallOptions } from "@connectrpc/connect";

import {
  AssertionRefused,
  type CallerAssertion,
  HEADER,
  METADATA,
  ReplayGuard,
  keyId,
  keyOf,
  keyOfToken,
  requestIdText,
  sign,
  tokenDigest,
  verify,
  who,
} from "../src/callerAssertion.js";
import { ON_BEHALF_OF, type TurnkeeperClient, onBehalfOf } from "../src/client.js";
import { TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import { CallerCheck } from "../src/runner/callers.js";
import { type Request, RpcError, SERVICE_ERROR } from "../src/runner/jsonrpc.js";
import { Methods } from "../src/runner/methods.js";
import type { TurnRuntime } from "../src/runner/runtime.js";

const AGENT = "js-approval";
const TOKEN = "tk-js-approval-one";
const OTHER_TOKEN = "tk-js-approval-two";
const NOW = 1764756000;
const ALL = ["responses/create", "responses/turnStatus", "responses/resumeDetached", "responses/cancel"];

function assertion(overrides: Partial<CallerAssertion> = {}): CallerAssertion {
  return {
    agent: AGENT,
    method: "responses/resumeDetached",
    requestId: "req-1",
    name: "operator",
    role: "operator",
    callerAgent: "",
    methods: ALL,
    expiresAt: NOW + 60,
    ...overrides,
  };
}

function request(method: string, id: unknown, value?: string, bearer = false): Request {
  return {
    id,
    method,
    params: {},
    metadata: {},
    wantsReply: true,
    ...(value === undefined ? {} : { assertion: value }),
    ...(bearer ? { bearer } : {}),
  };
}

function refused(f: () => unknown, code: string): string {
  try {
    f();
  } catch (error) {
    expect(error).toBeInstanceOf(RpcError);
    const rpc = error as RpcError;
    expect(rpc.code).toBe(SERVICE_ERROR);
    expect(rpc.data).toEqual({ code, message: rpc.message });
    return rpc.message;
  }
  throw new Error("not refused");
}

describe("the caller assertion format, shared with Python", () => {
  // Made once by the Python side (turnkeeper.caller_assertion) with
  //   keys = [key_of(token_digest(t)) for t in ("tk-js-approval-one", "tk-js-approval-two")]
  //   sign(CallerAssertion(agent="js-approval", method="responses/resumeDetached",
  //        request_id="req-42", name="alice", role="operator", caller_agent="",
  //        methods=("responses/create", "responses/turnStatus",
  //                 "responses/resumeDetached", "responses/cancel"),
  //        expires_at=1764756060.25), keys)
  const PYTHON_SIGNED =
    "eyJhZ2VudCI6IiIsImF1ZCI6ImpzLWFwcHJvdmFsIiwiZXhwIjoxNzY0NzU2MDYwLjI1LCJtZXRob2QiOiJyZXNwb25zZXMvcmVzdW1lRGV0YWNoZWQiLCJtZXRob2RzIjpbInJlc3BvbnNlcy9jcmVhdGUiLCJyZXNwb25zZXMvdHVyblN0YXR1cyIsInJlc3BvbnNlcy9yZXN1bWVEZXRhY2hlZCIsInJlc3BvbnNlcy9jYW5jZWwiXSwibmFtZSI6ImFsaWNlIiwicmlkIjoicmVxLTQyIiwicm9sZSI6Im9wZXJhdG9yIiwidiI6MX0" +
    ".1IDu2hh-e81z=WvhbpVFUE4kPIdEWioojIgZQc6_SvW5MUct8-4SYPA4,FJM7gzDMvR3M=sD5dErsth6lR6aqte-QKUfjGTzLrWHMhh0Jl_VMQqv4";
  // The same, of sign(CallerAssertion(agent="js-approval", method="responses/create",
  //   request_id="req-7", name='Zoë ✓ 😀 "q"\n', role="agent",
  //   caller_agent="js-approval", methods=("responses/create",),
  //   expires_at=1764756060.0625), keys[:1]): json.dumps' \u escapes, and round(x, 3)
  //   taking an exact tie to even (….062).
  const PYTHON_SIGNED_ESCAPES =
    "eyJhZ2VudCI6ImpzLWFwcHJvdmFsIiwiYXVkIjoianMtYXBwcm92YWwiLCJleHAiOjE3NjQ3NTYwNjAuMDYyLCJtZXRob2QiOiJyZXNwb25zZXMvY3JlYXRlIiwibWV0aG9kcyI6WyJyZXNwb25zZXMvY3JlYXRlIl0sIm5hbWUiOiJab1x1MDBlYiBcdTI3MTMgXHVkODNkXHVkZTAwIFwicVwiXG4iLCJyaWQiOiJyZXEtNyIsInJvbGUiOiJhZ2VudCIsInYiOjF9" +
    ".1IDu2hh-e81z=pgNfwny4Ln9PT4Qfs9ZdJwsHeb39vbKd4rOfHoXGvqA";
  // And of expires_at=1764756060.0 (Python writes the float as 1764756060.0).
  const PYTHON_SIGNED_WHOLE_SECOND =
    "eyJhZ2VudCI6IiIsImF1ZCI6ImEiLCJleHAiOjE3NjQ3NTYwNjAuMCwibWV0aG9kIjoibSIsIm1ldGhvZHMiOltdLCJuYW1lIjoibiIsInJpZCI6InIiLCJyb2xlIjoicGFuZWwiLCJ2IjoxfQ" +
    ".1IDu2hh-e81z=r4pfVbjSsdeJayIYKkbSOYJ9UyOQnLarmLI91D9DO1Y";
  const keys = [keyOfToken(TOKEN), keyOfToken(OTHER_TOKEN)];

  it("derives the Python keys and key ids", () => {
    expect(tokenDigest(TOKEN)).toBe("8744afbfb87fe72d48be0707dc60c5613ffd6f31faaeb584954f7c3b230b24ff");
    expect(keyOf(tokenDigest(TOKEN))).toEqual(keyOfToken(TOKEN));
    expect(keyId(keyOfToken(TOKEN))).toBe("1IDu2hh-e81z");
  });

  it("verifies what Python signed, with either token's key", () => {
    for (const key of keys) {
      const found = verify(PYTHON_SIGNED, [key], {
        agent: AGENT,
        method: "responses/resumeDetached",
        requestId: "req-42",
        now: 1764756060,
      });
      expect(found).toEqual({
        agent: AGENT,
        method: "responses/resumeDetached",
        requestId: "req-42",
        name: "alice",
        role: "operator",
        callerAgent: "",
        methods: ALL,
        expiresAt: 1764756060.25,
      });
      expect(who(found)).toBe("alice (operator)");
    }
    const agentCaller = verify(PYTHON_SIGNED_ESCAPES, keys, { agent: AGENT, now: 1764756060 });
    expect(agentCaller.name).toBe('Zoë ✓ 😀 "q"\n');
    expect(who(agentCaller)).toBe(`${agentCaller.name} (agent:${AGENT})`);
  });

  it("signs an assertion to the very value Python signs", () => {
    expect(
      sign(
        assertion({ requestId: "req-42", name: "alice", expiresAt: 1764756060.25 }),
        keys,
      ),
    ).toBe(PYTHON_SIGNED);
    expect(
      sign(
        assertion({
          method: "responses/create",
          requestId: "req-7",
          name: 'Zoë ✓ 😀 "q"\n',
          role: "agent",
          callerAgent: AGENT,
          methods: ["responses/create"],
          expiresAt: 1764756060.0625,
        }),
        keys.slice(0, 1),
      ),
    ).toBe(PYTHON_SIGNED_ESCAPES);
    expect(
      sign(
        { agent: "a", method: "m", requestId: "r", name: "n", role: "panel", callerAgent: "", methods: [], expiresAt: 1764756060 },
        keys.slice(0, 1),
      ),
    ).toBe(PYTHON_SIGNED_WHOLE_SECOND);
    expect(() => sign(assertion(), [])).toThrow("no key to sign");
  });

  it("refuses what is not signed for this agent, this method, this request, or is stale", () => {
    const value = sign(assertion(), [keyOfToken(TOKEN)]);
    const refusal = (f: () => unknown): string => {
      try {
        f();
      } catch (error) {
        expect(error).toBeInstanceOf(AssertionRefused);
        return (error as Error).message;
      }
      throw new Error("not refused");
    };
    const options = { agent: AGENT, method: "responses/resumeDetached", requestId: "req-1", now: NOW };
    expect(verify(value, [keyOfToken(TOKEN)], options).requestId).toBe("req-1");
    expect(refusal(() => verify("", [keyOfToken(TOKEN)], options))).toContain(`no ${HEADER} header`);
    expect(refusal(() => verify("x".repeat(9000), [keyOfToken(TOKEN)], options))).toContain("over 8192");
    expect(refusal(() => verify(value, [keyOfToken("tk-stranger")], options))).toContain(
      `is not signed for agent '${AGENT}' with this replica's token`,
    );
    // A payload changed after signing, and a signature without its key id.
    const [payload, signature] = value.split(".");
    const forged = Buffer.from(
      Buffer.from(payload!, "base64url").toString().replace('"operator"', '"admin"'),
    ).toString("base64url");
    expect(refusal(() => verify(`${forged}.${signature!}`, [keyOfToken(TOKEN)], options))).toContain("is not signed");
    expect(refusal(() => verify(`${payload!}.${signature!.split("=")[1]!}`, [keyOfToken(TOKEN)], options))).toContain(
      "is not signed",
    );
    expect(refusal(() => verify(value, [keyOfToken(TOKEN)], { ...options, agent: "other" }))).toContain(
      `is for agent '${AGENT}', not 'other'`,
    );
    const elsewhere = sign(assertion({ agent: "other" }), [keyOfToken(TOKEN)]);
    expect(refusal(() => verify(elsewhere, [keyOfToken(TOKEN)], options))).toContain(
      `is for agent 'other', not '${AGENT}'`,
    );
    expect(refusal(() => verify(value, [keyOfToken(TOKEN)], { ...options, method: "responses/cancel" }))).toContain(
      "is for responses/resumeDetached, not responses/cancel",
    );
    expect(refusal(() => verify(value, [keyOfToken(TOKEN)], { ...options, requestId: "req-2" }))).toContain(
      "is for request 'req-1', not 'req-2'",
    );
    // Expired: good until exp plus the 30 s of clock skew.
    expect(verify(value, [keyOfToken(TOKEN)], { ...options, now: NOW + 90 }).name).toBe("operator");
    expect(refusal(() => verify(value, [keyOfToken(TOKEN)], { ...options, now: NOW + 91 }))).toContain(
      "expired 31 s ago",
    );
  });

  it("takes each request id once, and forgets them once expired or past capacity", () => {
    const guard = new ReplayGuard(3);
    guard.take(assertion({ requestId: "a" }), NOW);
    expect(() => guard.take(assertion({ requestId: "a" }), NOW)).toThrow("already taken");
    // The same id for another method is another request.
    guard.take(assertion({ requestId: "a", method: "responses/cancel" }), NOW);
    guard.take(assertion({ requestId: "b" }), NOW);
    expect(guard.size).toBe(3);
    // Full: the oldest goes first.
    guard.take(assertion({ requestId: "c" }), NOW);
    expect(guard.size).toBe(3);
    guard.take(assertion({ requestId: "a" }), NOW);
    // Expired ones are dropped as new ones come.
    guard.take(assertion({ requestId: "d" }), NOW + 60 + 31);
    expect(guard.size).toBe(1);
  });

  it("names a request id as Python's str() does", () => {
    expect(requestIdText("req-1")).toBe("req-1");
    expect(requestIdText(7)).toBe("7");
    expect(requestIdText(null)).toBe("None");
  });
});

describe("the runner's CallerCheck", () => {
  const key = [keyOfToken(TOKEN)];
  const clock = (): number => NOW;
  const issue = (method: string, id: string, overrides: Partial<CallerAssertion> = {}): string =>
    sign(assertion({ method, requestId: id, ...overrides }), key);

  it("needs a token: without one there is nothing to verify with", () => {
    expect(() => new CallerCheck("", AGENT)).toThrow("needs the agent's token");
  });

  it("refuses a request without an assertion, and says a bearer token is not the way", () => {
    const check = new CallerCheck(TOKEN, AGENT, clock);
    let message = refused(() => check.check(request("responses/create", "r1")), "UNAUTHENTICATED");
    expect(message).toContain(`responses/create needs a caller assertion in the NATS header ${HEADER}`);
    expect(message).not.toContain("bearer");
    message = refused(() => check.check(request("responses/create", "r1", undefined, true)), "UNAUTHENTICATED");
    expect(message).toContain("; a bearer token is never sent to an agent");
  });

  it("takes a valid assertion once and returns who the caller is", () => {
    const check = new CallerCheck(TOKEN, AGENT, clock);
    const value = issue("responses/resumeDetached", "r1");
    const found = check.check(request("responses/resumeDetached", "r1", value));
    expect(who(found)).toBe("operator (operator)");
    expect(refused(() => check.check(request("responses/resumeDetached", "r1", value)), "UNAUTHENTICATED")).toContain(
      "request 'r1' was already taken",
    );
    // A numeric id is named as the Python bridge names it.
    expect(check.check(request("responses/turnStatus", 12, issue("responses/turnStatus", "12"))).requestId).toBe("12");
  });

  it("refuses another method's, another request's, another agent's, a stale assertion", () => {
    const check = new CallerCheck(TOKEN, AGENT, clock);
    const status = issue("responses/turnStatus", "r2");
    expect(refused(() => check.check(request("responses/resumeDetached", "r2", status)), "UNAUTHENTICATED")).toContain(
      "is for responses/turnStatus, not responses/resumeDetached",
    );
    expect(refused(() => check.check(request("responses/turnStatus", "r3", status)), "UNAUTHENTICATED")).toContain(
      "is for request 'r2', not 'r3'",
    );
    const stranger = sign(assertion({ method: "responses/turnStatus", requestId: "r4" }), [keyOfToken("tk-stranger")]);
    expect(refused(() => check.check(request("responses/turnStatus", "r4", stranger)), "UNAUTHENTICATED")).toContain(
      "is not signed for agent",
    );
    const stale = issue("responses/turnStatus", "r5", { expiresAt: NOW - 31 });
    expect(refused(() => check.check(request("responses/turnStatus", "r5", stale)), "UNAUTHENTICATED")).toContain(
      "expired",
    );
    // Refused ones are not taken: the genuine request still goes through.
    expect(check.check(request("responses/turnStatus", "r2", status)).requestId).toBe("r2");
  });

  it("refuses a method the caller's role may not call", () => {
    const check = new CallerCheck(TOKEN, AGENT, clock);
    const panel = issue("responses/resumeDetached", "r6", {
      name: "panel",
      role: "panel",
      methods: ["responses/create", "responses/turnStatus"],
    });
    expect(refused(() => check.check(request("responses/resumeDetached", "r6", panel)), "PERMISSION_DENIED")).toBe(
      "panel (panel) may not call responses/resumeDetached; it may call responses/create, responses/turnStatus",
    );
  });
});

describe("what the runner passes on for its caller", () => {
  function fake(): { client: TurnkeeperClient; calls: [string, CallOptions | undefined][] } {
    const calls: [string, CallOptions | undefined][] = [];
    const turn = { turnId: "t1", threadId: "th1", state: TurnState.RUNNING, lastSeq: 0n };
    const turns = {
      resumeDetached: async (_: unknown, options?: CallOptions) => {
        calls.push(["ResumeDetached", options]);
        return { turn, dispatched: true };
      },
      cancelTurn: async (_: unknown, options?: CallOptions) => {
        calls.push(["CancelTurn", options]);
        return { turn: { ...turn, state: TurnState.CANCELLED }, checkpointsRemoved: 0 };
      },
    };
    return { client: { turns } as unknown as TurnkeeperClient, calls };
  }
  const identity = { agent: AGENT, replica: "r1", incarnation: "i1" };
  const runtime = {} as TurnRuntime;

  it("sends the caller's assertion and name with ResumeDetached and CancelTurn", async () => {
    const { client, calls } = fake();
    const methods = new Methods(client, runtime, identity, new CallerCheck(TOKEN, AGENT, () => NOW));
    const resume = issue("responses/resumeDetached", "r1");
    const cancel = issue("responses/cancel", "r2");
    await methods.dispatch({ ...request("responses/resumeDetached", "r1", resume), params: { turn_id: "t1", resume: "yes" } });
    await methods.dispatch({ ...request("responses/cancel", "r2", cancel), params: { turn_id: "t1" } });
    expect(calls.map(([name, options]) => [name, Object.fromEntries(new Headers(options?.headers))])).toEqual([
      ["ResumeDetached", { [ON_BEHALF_OF]: "operator (operator)", [METADATA]: resume }],
      ["CancelTurn", { [ON_BEHALF_OF]: "operator (operator)", [METADATA]: cancel }],
    ]);
  });

  it("sends nothing for a runner that takes every caller", async () => {
    const { client, calls } = fake();
    const methods = new Methods(client, runtime, identity);
    await methods.dispatch({ ...request("responses/cancel", "r3"), params: { turn_id: "t1" } });
    expect(calls).toEqual([["CancelTurn", undefined]]);
  });

  it("onBehalfOf keeps other options and writes a name as a header value", () => {
    const options = onBehalfOf("Zoë (operator)", "", { timeoutMs: 5, headers: { "x-a": "1" } });
    expect(options.timeoutMs).toBe(5);
    expect(Object.fromEntries(new Headers(options.headers))).toEqual({ "x-a": "1", [ON_BEHALF_OF]: "Zo? (operator)" });
  });

  function issue(method: string, id: string): string {
    return sign(assertion({ method, requestId: id, expiresAt: NOW + 60 }), [keyOfToken(TOKEN)]);
  }
});
