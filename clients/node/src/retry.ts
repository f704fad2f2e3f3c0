// A bounded retry of idempotent RPCs on UNAVAILABLE, the Python client's policy.
//
// Retried: the reads (TurnStatus, GetTurn, ListTurns, ListEvents, GetCheckpoint) and
// what is idempotent by design: StartTurn (by turn_id), AppendEvents (by attempt and
// seq), PutCheckpoint (by checkpoint id) and PutWrites (by task and idx). Never
// retried: the compare-and-sets (ParkTurn, FinishTurn, ResumeDetached, ClaimTurn,
// Redrive), since UNAVAILABLE does not say whether the first try committed and a
// retry of one that did reports a refusal for what was a success; Heartbeat (the
// next beat is the retry); DeleteThread (a late retry could delete what another
// writer stored in between); and streams (WatchTurn resumes with after_seq).
// Every attempt counts against the call's one deadline: a retried call never
// outlives its timeout.

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

export const RETRIED: ReadonlySet<string> = new Set([
  "turnkeeper.v1.TurnService/StartTurn",
  "turnkeeper.v1.TurnService/TurnStatus",
  "turnkeeper.v1.TurnService/GetTurn",
  "turnkeeper.v1.TurnService/ListTurns",
  "turnkeeper.v1.TurnService/ListEvents",
  "turnkeeper.v1.TurnService/AppendEvents",
  "turnkeeper.v1.TurnService/ListAgents",
  // The effect ledger: a list is a read; an outcome recorded again changes nothing.
  // BeginEffect never: one that recorded its intent, sent again, would find that
  // intent and call its own effect uncertain (docs/effects.md).
  "turnkeeper.v1.TurnService/ListEffects",
  "turnkeeper.v1.TurnService/RecordEffect",
  "turnkeeper.v1.CheckpointService/GetCheckpoint",
  "turnkeeper.v1.CheckpointService/PutCheckpoint",
  "turnkeeper.v1.CheckpointService/PutWrites",
]);

export interface RetryPolicy {
  /** Attempts in all, the first included; 1 disables retries. */
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 2000 };

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

export function retryInterceptor(policy: RetryPolicy = DEFAULT_RETRY): Interceptor {
  return (next) => async (request) => {
    const name = `${request.service.typeName}/${request.method.name}`;
    if (request.stream || !RETRIED.has(name) || policy.maxAttempts <= 1) {
      return next(request);
    }
    let backoff = policy.initialBackoffMs;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await next(request);
      } catch (error) {
        const unavailable = error instanceof ConnectError && error.code === Code.Unavailable;
        if (!unavailable || attempt >= policy.maxAttempts || request.signal.aborted) {
          throw error;
        }
      }
      // Jittered exponential backoff, cut short by the call's deadline.
      await pause(backoff * (0.5 + Math.random() / 2), request.signal);
      if (request.signal.aborted) {
        throw new ConnectError("the call's deadline passed while retrying", Code.DeadlineExceeded);
      }
      backoff = Math.min(backoff * 2, policy.maxBackoffMs);
    }
  };
}
