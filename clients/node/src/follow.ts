// Following a turn: TurnStatus, then WatchTurn until the terminal event.
//
// What a follower promises (the panel's rules):
// - every event frame it emits is one the service retained, in seq order; after a
//   reset frame the events shown so far are void and the replay starts again at
//   seq 1, so a consumer that honours resets never shows a duplicated tool call;
// - it ends after the terminal event (turn.done, turn.failed, turn.cancelled), or when TurnStatus
//   says the turn is over (the panel's rule on an idle gap), or at the deadline; a status
//   call can overtake the stream, so an open stream gets one more idle gap to bring the
//   turn's last events and its terminal event before the status ends the follow;
// - a dropped stream is re-opened after the last seq seen, once TurnStatus answers;
//   when the turn was rewound while the stream was down (TurnStatus shows a newer
//   attempt, or the re-opened stream brings a newer attempt's event and the last
//   event shown is no longer retained), the follower emits a reset of its own
//   (local: true) and replays from the start.
// It does not promise to show every event of an attempt that was rewound away.

import { type TurnkeeperClient, STREAM_CALL } from "./client.js";
import { isRetryable } from "./errors.js";
import { type Event, type Reset, type TurnStatusResponse } from "./gen/turnkeeper/v1/turns_pb.js";
import { stateName } from "./states.js";
import { type JsonValue, parseDataJson, timestampToIso } from "./values.js";

export interface StatusFrame {
  frame: "status";
  turn_id: string;
  state: string;
  attempts: number;
  last_seq: number;
  error: string;
}
export interface EventFrame {
  frame: "event";
  turn_id: string;
  seq: number;
  attempt: number;
  type: string;
  data: JsonValue;
  created_at: string | null;
}
export interface ResetFrame {
  frame: "reset";
  turn_id: string;
  seq: number;
  attempt: number;
  checkpoint_id: string;
  local: boolean;
}
export type Frame = StatusFrame | EventFrame | ResetFrame;

/**
 * How a follow ended: terminal (the terminal event was seen), concluded (TurnStatus
 * said it is over), unknown (the service never saw the turn), deadline, aborted.
 */
export interface FollowResult {
  outcome: "terminal" | "concluded" | "unknown" | "deadline" | "aborted";
  state: string | null;
  lastSeq: number;
}

export const TERMINAL_EVENT_TYPES: readonly string[] = ["turn.done", "turn.failed", "turn.cancelled"];
/** States in which the panel keeps waiting. */
export const LIVE_STATES: readonly string[] = ["RUNNING", "PARKED", "QUEUED"];

/** The state each terminal event leaves its turn in. */
const TERMINAL_STATES: Readonly<Record<string, string>> = { "turn.done": "DONE", "turn.failed": "FAILED", "turn.cancelled": "CANCELLED" };
/** Process exit codes of turnkeeper-follow, by outcome; an error is 1, bad usage 2. */
export const EXIT_CODES = Object.freeze({ terminal: 0, concluded: 0, unknown: 3, deadline: 4, aborted: 130 });


export function statusFrame(status: TurnStatusResponse): StatusFrame {
  return {
    frame: "status",
    turn_id: status.turnId,
    state: stateName(status.state),
    attempts: status.attempts,
    last_seq: Number(status.lastSeq),
    error: status.error,
  };
}

export function eventFrame(turnId: string, event: Event): EventFrame {
  return {
    frame: "event",
    turn_id: turnId,
    seq: Number(event.seq),
    attempt: event.attempt,
    type: event.type,
    data: parseDataJson(event.dataJson),
    created_at: timestampToIso(event.createdAt),
  };
}

export function resetFrame(
  turnId: string,
  reset: Pick<Reset, "seq" | "attempt" | "checkpointId">,
  local = false,
): ResetFrame {
  return {
    frame: "reset",
    turn_id: turnId,
    seq: Number(reset.seq),
    attempt: reset.attempt,
    checkpoint_id: reset.checkpointId,
    local,
  };
}

/**
 * The follower's defaults: the panel's rule gives up after 15 minutes whatever the turn
 * does (the Python follower and the browser panel say the same; decision 190).
 */
export const FOLLOW_DEFAULTS = Object.freeze({ idleMs: 30_000, deadlineMs: 15 * 60_000 });

export interface FollowOptions {
  onFrame: (frame: Frame) => void;
  /** Show only events after this seq (default 0: all). */
  afterSeq?: number;
  /** An idle gap this long triggers a TurnStatus look. */
  idleMs?: number;
  /** Give up after this long, whatever the status says. */
  deadlineMs?: number;
  retryMinMs?: number;
  retryMaxMs?: number;
  signal?: AbortSignal;
}

type Watched = { kind: FollowResult["outcome"] | "ended" | "rewound" } | { kind: "error"; error: unknown };

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Follow a turn until it ends. Resolves with how it ended; rejects on an error a
 * retry cannot fix (a ConnectError: NOT_FOUND, PERMISSION_DENIED ...).
 */
export async function followTurn(client: TurnkeeperClient, turnId: string, options: FollowOptions): Promise<FollowResult> {
  const {
    onFrame,
    afterSeq = 0,
    idleMs = FOLLOW_DEFAULTS.idleMs,
    deadlineMs = FOLLOW_DEFAULTS.deadlineMs,
    retryMinMs = 200,
    retryMaxMs = 5_000,
    signal,
  } = options;
  const deadlineAt = Date.now() + deadlineMs;
  let lastSeq = afterSeq;
  // The newest attempt seen; -1 while unknown. A status showing a newer one means
  // the turn was re-driven (and rewound) while no stream was open.
  let attempt = -1;
  let retries = 0;
  let lastState: string | null = null;
  // The attempt that wrote the event at lastSeq.
  let shownAttempt = -1;
  const result = (outcome: FollowResult["outcome"]): FollowResult => ({ outcome, state: lastState, lastSeq });

  /** TurnStatus as a frame; null while the service is unreachable (keep waiting). */
  const lookUp = async (): Promise<StatusFrame | null> => {
    try {
      const frame = statusFrame(await client.turns.turnStatus({ turnId }));
      lastState = frame.state;
      onFrame(frame);
      return frame;
    } catch (error) {
      if (isRetryable(error)) {
        return null;
      }
      throw error;
    }
  };

  /**
   * Is the last event shown (lastSeq, written by shownAttempt) still retained?
   * No when a re-drive rewound the turn to a boundary before it.
   */
  const stillRetained = async (): Promise<boolean> => {
    const page = await client.turns.listEvents({ turnId, afterSeq: BigInt(lastSeq - 1), pageSize: 1 });
    const kept = page.events[0];
    return kept !== undefined && Number(kept.seq) === lastSeq && kept.attempt === shownAttempt;
  };

  /** One WatchTurn stream, from lastSeq, until it ends one way or another. */
  const watchOnce = async (): Promise<Watched> => {
    const stop = new AbortController();
    let outcome: Watched | undefined;
    const finish = (value: Watched): void => {
      outcome ??= value;
      stop.abort();
    };
    const deadlineTimer = setTimeout(() => finish({ kind: "deadline" }), Math.max(0, deadlineAt - Date.now()));
    const onAbort = (): void => finish({ kind: "aborted" });
    signal?.addEventListener("abort", onAbort, { once: true });
    let idleTimer: NodeJS.Timeout | undefined;
    let failure: unknown;
    // Set when an idle gap found the turn over and left its end to this stream.
    let leftToStream = false;
    // The panel's rule: on an idle gap ask TurnStatus instead of assuming.
    const onIdle = async (): Promise<void> => {
      try {
        const status = await lookUp();
        if (outcome !== undefined) {
          return;
        }
        if (status?.state === "UNKNOWN") {
          finish({ kind: "unknown" });
        } else if (status && !LIVE_STATES.includes(status.state)) {
          if (leftToStream) {
            finish({ kind: "concluded" });
          } else {
            // The turn's last events may still be on their way on this stream.
            leftToStream = true;
            armIdle();
          }
        } else {
          armIdle();
        }
      } catch (error) {
        failure = error;
        finish({ kind: "error", error });
      }
    };
    const armIdle = (): void => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => void onIdle(), idleMs);
    };
    armIdle();
    let resetInStream = false;
    try {
      const stream = client.turns.watchTurn({ turnId, afterSeq: BigInt(lastSeq) }, { ...STREAM_CALL, signal: stop.signal });
      for await (const response of stream) {
        if (outcome !== undefined) {
          break;
        }
        armIdle();
        leftToStream = false;
        retries = 0;
        const frame = response.frame;
        if (frame.case === "reset") {
          onFrame(resetFrame(turnId, frame.value));
          // The frames that follow replay the retained events from seq 1.
          lastSeq = 0;
          attempt = Math.max(attempt, frame.value.attempt);
          resetInStream = true;
        } else if (frame.case === "event") {
          const shown = eventFrame(turnId, frame.value);
          if (shown.seq <= lastSeq) {
            continue; // already shown: a re-opened stream can overlap by a frame
          }
          if (!resetInStream && lastSeq > 0 && shown.attempt > shownAttempt && !(await stillRetained())) {
            // A newer attempt, and what was shown is gone: the turn was rewound
            // while no stream was open. Show that, and replay from the start.
            onFrame(resetFrame(turnId, { seq: 0n, attempt: shown.attempt, checkpointId: "" }, true));
            lastSeq = 0;
            attempt = Math.max(attempt, shown.attempt);
            finish({ kind: "rewound" });
            break;
          }
          lastSeq = shown.seq;
          shownAttempt = shown.attempt;
          attempt = Math.max(attempt, shown.attempt);
          onFrame(shown);
          if (TERMINAL_EVENT_TYPES.includes(shown.type)) {
            lastState = TERMINAL_STATES[shown.type] ?? "FAILED";
            finish({ kind: "terminal" });
          }
        }
      }
      finish({ kind: "ended" });
    } catch (error) {
      finish({ kind: "error", error: failure ?? error });
    } finally {
      clearTimeout(idleTimer);
      clearTimeout(deadlineTimer);
      signal?.removeEventListener("abort", onAbort);
    }
    return outcome ?? { kind: "ended" };
  };

  const first = await lookUp();
  if (first) {
    if (first.state === "UNKNOWN") {
      return result("unknown");
    }
    attempt = first.attempts;
  }
  for (;;) {
    if (signal?.aborted) {
      return result("aborted");
    }
    if (Date.now() >= deadlineAt) {
      return result("deadline");
    }
    const watched = await watchOnce();
    if (watched.kind === "rewound") {
      continue; // a local reset was shown: replay from seq 1 at once
    }
    if (watched.kind === "error") {
      if (!isRetryable(watched.error)) {
        throw watched.error;
      }
    } else if (watched.kind !== "ended") {
      return result(watched.kind as FollowResult["outcome"]);
    }
    // The stream is gone without the terminal event: see where the turn stands
    // before re-opening it. Waited for while the service is unreachable: a stream
    // re-opened blind after a re-drive would go on from lastSeq with the new
    // attempt's events and never show the rewind.
    let status = await lookUp();
    while (status === null) {
      if (signal?.aborted) {
        return result("aborted");
      }
      if (Date.now() >= deadlineAt) {
        return result("deadline");
      }
      await sleep(Math.min(retryMaxMs, retryMinMs * 2 ** retries, Math.max(0, deadlineAt - Date.now())), signal);
      retries += 1;
      status = await lookUp();
    }
    if (status.state === "UNKNOWN") {
      return result("unknown");
    }
    if (watched.kind === "ended" && !LIVE_STATES.includes(status.state)) {
      return result("concluded"); // closed cleanly and the turn is over
    }
    if ((attempt >= 0 && status.attempts > attempt) || status.last_seq < lastSeq) {
      onFrame(resetFrame(turnId, { seq: BigInt(status.last_seq), attempt: status.attempts, checkpointId: "" }, true));
      lastSeq = 0;
      attempt = status.attempts;
    }
    const pause = Math.min(retryMaxMs, retryMinMs * 2 ** retries);
    retries += 1;
    await sleep(Math.min(pause, Math.max(0, deadlineAt - Date.now())), signal);
  }
}
