// gRPC status codes as the service uses them, in one place.

import { Code, ConnectError } from "@connectrpc/connect";

export { Code, ConnectError };

/** The status code of an error from a call, or undefined for anything else. */
export function codeOf(error: unknown): Code | undefined {
  return error instanceof ConnectError ? error.code : undefined;
}

/** The gRPC name of a status code, e.g. FAILED_PRECONDITION (as the Python side says it). */
export function codeName(code: Code): string {
  return Code[code]
    .replace(/([a-z])([A-Z])/g, "$1_$2")
    .toUpperCase()
    .replace("CANCELED", "CANCELLED");
}

/**
 * A write refused because this attempt no longer owns the turn: ABORTED (re-driven
 * away), FAILED_PRECONDITION (no longer RUNNING), NOT_FOUND (gone). An executor
 * that gets one stops at once and writes nothing more.
 */
export function isFenced(error: unknown): boolean {
  const code = codeOf(error);
  return code === Code.Aborted || code === Code.FailedPrecondition || code === Code.NotFound;
}

/** A refusal that a re-drive would hit again (the value itself is the problem). */
export function isDeterministic(error: unknown): boolean {
  const code = codeOf(error);
  return code === Code.InvalidArgument || code === Code.ResourceExhausted;
}

/** The service or the network is down or restarting: the same call may work later. */
export function isRetryable(error: unknown): boolean {
  const code = codeOf(error);
  return (
    code === Code.Unavailable ||
    code === Code.DeadlineExceeded ||
    code === Code.ResourceExhausted ||
    code === Code.Aborted ||
    code === Code.Internal ||
    code === Code.Unknown ||
    code === Code.Canceled
  );
}

/** The service's own words, without Connect's "[code]" prefix. */
export function messageOf(error: unknown): string {
  if (error instanceof ConnectError) {
    return error.rawMessage;
  }
  return error instanceof Error ? error.message : String(error);
}
