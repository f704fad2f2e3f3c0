// A turn's state as a user reads it: its name, never the enum's number.

import { TurnState, type TurnStatusResponse } from "./gen/turnkeeper/v1/turns_pb.js";

/** The states of a turn, by name. */
export type TurnStateName = "RUNNING" | "PARKED" | "DONE" | "FAILED" | "CANCELLED" | "QUEUED" | "UNKNOWN";

/** RUNNING, PARKED, DONE, FAILED, CANCELLED, QUEUED, UNKNOWN: the states of a turn.
 * UNSPECIFIED (never sent) and a number this client does not know (a newer
 * service's) read UNKNOWN, as in the Python client. */
export function stateName(state: TurnState): TurnStateName {
  return state === TurnState.UNSPECIFIED ? "UNKNOWN" : ((TurnState[state] as TurnStateName | undefined) ?? "UNKNOWN");
}

/** TurnStatus's answer, its state by name (`TurnkeeperClient.status`). */
export interface TurnStatusView {
  turnId: string;
  /** UNKNOWN: the service never saw the turn (TurnStatus never answers NOT_FOUND). */
  state: TurnStateName;
  /** Re-drives so far: 0 while the first execution runs. */
  attempts: number;
  /** The seq of the newest retained event. */
  lastSeq: number;
  error: string;
  /** Why the service ended the turn ("cancelled", "max_run_time", ...); empty otherwise. */
  endReason: string;
  /** Why nobody runs the turn, when the service knows (no replica of its agent ever
   * announced itself); empty otherwise. */
  detail: string;
}

export function statusView(status: TurnStatusResponse): TurnStatusView {
  return {
    turnId: status.turnId,
    state: stateName(status.state),
    attempts: status.attempts,
    lastSeq: Number(status.lastSeq),
    error: status.error,
    endReason: status.endReason,
    detail: status.detail,
  };
}
