// The retry policy as a function of the RPC and the error (no transport involved).

import { Code, ConnectError, type UnaryRequest, type UnaryResponse } from "@connectrpc/connect";

import { retryInterceptor } from "../src/retry.js";

type Next = (request: UnaryRequest) => Promise<UnaryResponse>;

function call(method: string, failures: Code[], signal = new AbortController().signal) {
  const [service, name] = method.split("/");
  let calls = 0;
  const next: Next = async () => {
    calls += 1;
    const code = failures[calls - 1];
    if (code !== undefined) {
      throw new ConnectError("down", code);
    }
    return { stream: false, message: { ok: true } } as unknown as UnaryResponse;
  };
  const request = { stream: false, service: { typeName: service }, method: { name }, signal } as unknown as UnaryRequest;
  const intercepted = retryInterceptor({ maxAttempts: 3, initialBackoffMs: 1, maxBackoffMs: 2 })(next as never);
  return { result: intercepted(request as never), calls: () => calls };
}

it("retries an idempotent RPC on UNAVAILABLE, up to the attempts allowed", async () => {
  const ok = call("turnkeeper.v1.TurnService/AppendEvents", [Code.Unavailable, Code.Unavailable]);
  await expect(ok.result).resolves.toMatchObject({ message: { ok: true } });
  expect(ok.calls()).toBe(3);

  const exhausted = call("turnkeeper.v1.CheckpointService/PutCheckpoint", [Code.Unavailable, Code.Unavailable, Code.Unavailable]);
  await expect(exhausted.result).rejects.toMatchObject({ code: Code.Unavailable });
  expect(exhausted.calls()).toBe(3);
});

it("never retries a compare-and-set, nor another error", async () => {
  const park = call("turnkeeper.v1.TurnService/ParkTurn", [Code.Unavailable]);
  await expect(park.result).rejects.toMatchObject({ code: Code.Unavailable });
  expect(park.calls()).toBe(1);

  const fenced = call("turnkeeper.v1.TurnService/AppendEvents", [Code.Aborted]);
  await expect(fenced.result).rejects.toMatchObject({ code: Code.Aborted });
  expect(fenced.calls()).toBe(1);
});

it("stops at the call's deadline", async () => {
  const controller = new AbortController();
  controller.abort();
  const late = call("turnkeeper.v1.TurnService/TurnStatus", [Code.Unavailable, Code.Unavailable], controller.signal);
  await expect(late.result).rejects.toMatchObject({ code: Code.Unavailable });
  expect(late.calls()).toBe(1);
});
