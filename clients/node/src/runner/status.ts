// The words for a turn's state on the NATS JSON-RPC wire, defined once.

import { TurnState } from "../gen/turnkeeper/v1/turns_pb.js";

/** running | parked | done | failed | unknown (UNSPECIFIED, never sent, reads unknown). */
export function statusWord(state: TurnState): string {
  switch (state) {
    case TurnState.RUNNING:
      return "running";
    case TurnState.PARKED:
      return "parked";
    case TurnState.DONE:
      return "done";
    case TurnState.FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

/** responses/create's status for a turn's state (OpenAI Responses' words). */
export function responseStatus(state: TurnState): string {
  switch (state) {
    case TurnState.DONE:
      return "completed";
    case TurnState.FAILED:
      return "failed";
    default:
      return "in_progress";
  }
}
