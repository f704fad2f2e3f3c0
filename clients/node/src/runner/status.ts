// The words for a turn's state on the NATS JSON-RPC wire, defined once: the runner
// writes them and a panel written to the contract reads them with the same table.
// On the contract's methods `status` is the contract word (a five-word panel knows
// running | parked | done | failed | unknown and concludes on anything else, so a
// QUEUED turn, which will run, is `running`) and `state` the exact word (decision 192).

import { TurnState } from "../gen/turnkeeper/v1/turns_pb.js";

/** running | parked | done | failed | cancelled | queued | unknown, the contract's lower-case words. */
const WIRE_WORDS: ReadonlyMap<TurnState, string> = new Map([
  [TurnState.RUNNING, "running"],
  [TurnState.PARKED, "parked"],
  [TurnState.DONE, "done"],
  [TurnState.FAILED, "failed"],
  [TurnState.CANCELLED, "cancelled"],
  [TurnState.QUEUED, "queued"],
  [TurnState.UNKNOWN, "unknown"],
]);

const STATES_BY_WORD: ReadonlyMap<string, TurnState> = new Map(
  [...WIRE_WORDS].map(([state, word]) => [word, state]),
);

/** A state's wire word; UNSPECIFIED, never sent, reads unknown. */
export function statusWord(state: TurnState): string {
  return WIRE_WORDS.get(state) ?? "unknown";
}

/** `status` on the contract's methods: a word a five-word panel reads right. */
export function contractWord(state: TurnState): string {
  return state === TurnState.QUEUED ? "running" : statusWord(state);
}

/** The state of a `responses/turnStatus` or `responses/resumeDetached` answer: its
 * `state` when it has one (a JSON null too, which reads UNKNOWN, as in the Python
 * client), else its `status`. */
export function stateOfAnswer(answer: { status?: unknown; state?: unknown }): TurnState {
  return stateFromWire(answer.state !== undefined ? answer.state : answer.status);
}

/**
 * The state a `responses/turnStatus` or `responses/resumeDetached` answer names.
 * Upper-case words, which older bridges sent, read the same; anything else is UNKNOWN.
 */
export function stateFromWire(word: unknown): TurnState {
  return typeof word === "string" ? (STATES_BY_WORD.get(word.toLowerCase()) ?? TurnState.UNKNOWN) : TurnState.UNKNOWN;
}

/** responses/create's status for a turn's state (OpenAI Responses' words). */
export function responseStatus(state: TurnState): string {
  switch (state) {
    case TurnState.DONE:
      return "completed";
    case TurnState.FAILED:
      return "failed";
    case TurnState.CANCELLED:
      return "cancelled";
    case TurnState.QUEUED:
      return "queued";
    default:
      return "in_progress";
  }
}
