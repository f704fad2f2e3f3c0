// The parts that need no service: the JSON-RPC envelope, the status words, the
// fence a config carries, connection settings, and the event log's numbering.

import { Code, ConnectError } from "@connectrpc/connect";

import { connectionFromEnv, validateConnection } from "../src/connection.js";
import { codeName, isFenced } from "../src/errors.js";
import { LIVE_STATES } from "../src/follow.js";
import { stateName } from "../src/states.js";
import { TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import {
  INVALID_PARAMS,
  INVALID_REQUEST,
  PARSE_ERROR,
  RpcError,
  errorEnvelope,
  parse,
  requiredInt,
} from "../src/runner/jsonrpc.js";
import { contractWord, responseStatus, stateFromWire, stateOfAnswer, statusWord } from "../src/runner/status.js";
import { durableConfig, fenceOf } from "../src/saver.js";
import { fromValue, toValue } from "../src/values.js";

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

function rpcError(f: () => unknown): RpcError {
  try {
    f();
  } catch (error) {
    expect(error).toBeInstanceOf(RpcError);
    return error as RpcError;
  }
  throw new Error("no error");
}

describe("JSON-RPC envelope", () => {
  it("parses a request and tells a notification from a call", () => {
    const request = parse(bytes('{"jsonrpc":"2.0","id":7,"method":"responses/turnStatus","params":{"turn_id":"t"}}'));
    expect(request).toEqual({
      id: 7,
      method: "responses/turnStatus",
      params: { turn_id: "t" },
      metadata: {},
      wantsReply: true,
    });
    expect(parse(bytes('{"jsonrpc":"2.0","method":"m"}')).wantsReply).toBe(false);
  });

  it("answers what is not a request with the JSON-RPC codes", () => {
    expect(rpcError(() => parse(bytes("{nope"))).code).toBe(PARSE_ERROR);
    expect(rpcError(() => parse(bytes("[1]"))).code).toBe(INVALID_REQUEST);
    expect(rpcError(() => parse(bytes('{"jsonrpc":"1.0","method":"m"}'))).code).toBe(INVALID_REQUEST);
    expect(rpcError(() => parse(bytes('{"jsonrpc":"2.0","method":"m","params":[1]}'))).code).toBe(INVALID_PARAMS);
    expect(rpcError(() => requiredInt({ attempt: -1 }, "attempt")).message).toBe("attempt must be a non-negative integer");
  });

  it("carries the service's status name and words in -32000", () => {
    const error = RpcError.fromService(new ConnectError("turn t is DONE", Code.FailedPrecondition));
    expect(JSON.parse(errorEnvelope(3, error))).toEqual({
      jsonrpc: "2.0",
      id: 3,
      error: { code: -32000, message: "turn t is DONE", data: { code: "FAILED_PRECONDITION", message: "turn t is DONE" } },
    });
  });
});

describe("status words read from the wire", () => {
  it("reads the contract's lower-case words as states", () => {
    expect(["running", "parked", "done", "failed", "cancelled", "queued", "unknown"].map(stateFromWire)).toEqual([
      TurnState.RUNNING,
      TurnState.PARKED,
      TurnState.DONE,
      TurnState.FAILED,
      TurnState.CANCELLED,
      TurnState.QUEUED,
      TurnState.UNKNOWN,
    ]);
  });

  it("reads back every word it writes", () => {
    for (const state of [
      TurnState.RUNNING,
      TurnState.PARKED,
      TurnState.DONE,
      TurnState.FAILED,
      TurnState.CANCELLED,
      TurnState.QUEUED,
      TurnState.UNKNOWN,
    ]) {
      expect(stateFromWire(statusWord(state))).toBe(state);
    }
  });

  it("keeps a running, parked or queued turn live", () => {
    expect(LIVE_STATES).toContain(stateName(stateFromWire("running")));
    expect(LIVE_STATES).toContain(stateName(stateFromWire("parked")));
    expect(LIVE_STATES).toContain(stateName(stateFromWire("queued")));
    expect(LIVE_STATES).not.toContain(stateName(stateFromWire("done")));
    expect(LIVE_STATES).not.toContain(stateName(stateFromWire("cancelled")));
  });

  it("answers a word a five-word contract panel reads right, the exact state beside it", () => {
    const keepWaiting = ["running", "parked"];
    const states = [
      TurnState.RUNNING,
      TurnState.PARKED,
      TurnState.DONE,
      TurnState.FAILED,
      TurnState.CANCELLED,
      TurnState.QUEUED,
      TurnState.UNKNOWN,
    ];
    expect(states.map(contractWord)).toEqual(["running", "parked", "done", "failed", "cancelled", "running", "unknown"]);
    for (const state of states) {
      expect(keepWaiting.includes(contractWord(state))).toBe(LIVE_STATES.includes(stateName(state)));
      expect(stateOfAnswer({ status: contractWord(state), state: statusWord(state) })).toBe(state);
    }
    // An agent that sends no `state` (older bridges): its status is read.
    expect(stateOfAnswer({ status: "parked" })).toBe(TurnState.PARKED);
  });

  it("reads the upper-case words older bridges sent, anything else as UNKNOWN", () => {
    expect(stateFromWire("PARKED")).toBe(TurnState.PARKED);
    expect(stateFromWire("in_progress")).toBe(TurnState.UNKNOWN);
    expect(stateFromWire(undefined)).toBe(TurnState.UNKNOWN);
    expect(stateFromWire(3)).toBe(TurnState.UNKNOWN);
  });
});

describe("status words", () => {
  it("are lower-case on the wire, unknown for a state never sent", () => {
    expect([TurnState.RUNNING, TurnState.PARKED, TurnState.DONE, TurnState.FAILED, TurnState.UNKNOWN].map(statusWord)).toEqual([
      "running",
      "parked",
      "done",
      "failed",
      "unknown",
    ]);
    expect(statusWord(TurnState.UNSPECIFIED)).toBe("unknown");
    expect([TurnState.CANCELLED, TurnState.QUEUED].map(statusWord)).toEqual(["cancelled", "queued"]);
    expect([TurnState.PARKED, TurnState.DONE, TurnState.FAILED, TurnState.CANCELLED, TurnState.QUEUED].map(responseStatus)).toEqual([
      "in_progress",
      "completed",
      "failed",
      "cancelled",
      "queued",
    ]);
  });

  it("name gRPC codes as the Python side does", () => {
    expect(codeName(Code.Canceled)).toBe("CANCELLED");
    expect(codeName(Code.DeadlineExceeded)).toBe("DEADLINE_EXCEEDED");
    expect(isFenced(new ConnectError("stale", Code.Aborted))).toBe(true);
    expect(isFenced(new ConnectError("down", Code.Unavailable))).toBe(false);
  });
});

describe("fencing", () => {
  it("puts the turn and attempt into the config, and the config into a TurnFence", () => {
    const config = durableConfig("th", "t1", 2);
    expect(config.configurable).toEqual({ thread_id: "th", turn_id: "t1", attempt: 2 });
    const fence = fenceOf(config);
    expect([fence?.turnId, fence?.attempt]).toEqual(["t1", 2]);
    expect(fenceOf(durableConfig("th"))).toBeUndefined();
    expect(() => durableConfig("th", "t1")).toThrow("turnId and attempt go together");
  });
});

describe("connection settings", () => {
  it("come from the Python client's variables", () => {
    const options = connectionFromEnv({ TURNKEEPER_ADDRESS: "svc:1", TURNKEEPER_TLS: "yes", TURNKEEPER_TOKEN: "tk" });
    expect(options).toMatchObject({ address: "svc:1", tls: true, bearerToken: "tk" });
    expect(connectionFromEnv({}).address).toBe("127.0.0.1:50051");
  });

  it("refuse what cannot work, saying why", () => {
    expect(() => validateConnection({ address: "http://svc" })).toThrow("address must be host:port");
    expect(() => validateConnection({ address: "svc:1", clientCertificate: "pem" })).toThrow(
      "clientCertificate and clientKey go together",
    );
    expect(() => validateConnection({ address: "svc:1", bearerToken: "a\nb" })).toThrow("bearerToken must be one line");
  });
});

describe("JSON values", () => {
  it("round-trip through google.protobuf.Value", () => {
    const value = { a: [1, "two", null, true], b: { c: 1.5 } };
    expect(fromValue(toValue(value))).toEqual(value);
    expect(fromValue(toValue(undefined))).toBeNull();
    expect(fromValue(undefined)).toBeNull();
  });
});
