// Following a turn: TurnStatus, then WatchTurn until the terminal event.
//
// What a follower promises (docs/architecture.md §3, §8):
// - every event frame it emits is one the service retained, in seq order; after a
//   reset frame, the events shown so far are void and the replay starts again at
//   seq 1, so a consumer that honours resets never shows a duplicated tool call;
// - it ends after the terminal event (turn.done, turn.failed, turn.cancelled), or when TurnStatus
//   says the turn is over (the panel's rule on an idle gap), or at the deadline;
// - a dropped stream is re-opened after the last seq seen; when the turn was
//   rewound while the stream was down, the follower emits a reset of its own
//   (local: true) and replays from the start, since it cannot know what it missed.
// It does not promise to show every event of an attempt that was rewound away.

import * as grpc from '@grpc/grpc-js';

import { parseDataJson, timestampToIso } from './values.js';

/** @typedef {import('./client.js').TurnkeeperClient} TurnkeeperClient */
/** @typedef {import('./client.js').TurnStatusResponse} TurnStatusResponse */
/** @typedef {import('./client.js').WatchTurnResponse} WatchTurnResponse */
/** @typedef {import('../generated/turnkeeper/v1/Event').Event__Output} Event */
/** @typedef {import('../generated/turnkeeper/v1/Reset').Reset__Output} Reset */
/** @typedef {import('./values.js').JsonValue} JsonValue */

/**
 * @typedef {{ frame: 'status', turn_id: string, state: string, attempts: number, last_seq: number, error: string }} StatusFrame
 * @typedef {{ frame: 'event', turn_id: string, seq: number, attempt: number, type: string, data: JsonValue, created_at: string | null }} EventFrame
 * @typedef {{ frame: 'reset', turn_id: string, seq: number, attempt: number, checkpoint_id: string, local: boolean }} ResetFrame
 * @typedef {StatusFrame | EventFrame | ResetFrame} Frame
 */

/**
 * How a follow ended.
 * - terminal: the terminal event was seen (exit code 0)
 * - concluded: TurnStatus said the turn is over without the terminal event in view (0)
 * - unknown: the service never saw this turn_id (3)
 * - deadline: the overall deadline passed first (4)
 * - aborted: the caller's AbortSignal fired (130)
 *
 * @typedef {{ outcome: 'terminal' | 'concluded' | 'unknown' | 'deadline' | 'aborted', state: string | null, lastSeq: number }} FollowResult
 */

/** The event types the service writes last (docs/architecture.md §3). */
export const TERMINAL_EVENT_TYPES = Object.freeze(['turn.done', 'turn.failed', 'turn.cancelled']);

/** States in which the panel keeps waiting (docs/architecture.md §8); a QUEUED turn will run. */
export const LIVE_STATES = Object.freeze(['RUNNING', 'PARKED', 'QUEUED']);

/** Process exit codes of follow.js, by outcome; any error is 1, a usage error 2. */
export const EXIT_CODES = Object.freeze({
  terminal: 0,
  concluded: 0,
  unknown: 3,
  deadline: 4,
  aborted: 130,
});

/**
 * Errors after which the same call can work again: the service or the network
 * is down or restarting. Anything else (NOT_FOUND, INVALID_ARGUMENT,
 * PERMISSION_DENIED, UNIMPLEMENTED ...) is a mistake a retry does not fix.
 */
const RETRYABLE_CODES = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.ABORTED,
  grpc.status.INTERNAL,
  grpc.status.UNKNOWN,
  grpc.status.CANCELLED,
]);

/**
 * @param {unknown} error
 * @returns {boolean}
 */
export function isRetryable(error) {
  const code = /** @type {{ code?: unknown }} */ (error)?.code;
  return typeof code === 'number' && RETRYABLE_CODES.has(code);
}

/**
 * 'TURN_STATE_RUNNING' -> 'RUNNING', the five words of docs/architecture.md §2.
 *
 * @param {string} state
 * @returns {string}
 */
export function stateName(state) {
  return String(state).replace(/^TURN_STATE_/, '');
}

/**
 * The state a bridge's NATS JSON-RPC answer names (`responses/turnStatus`,
 * `responses/resumeDetached`): the contract's lower-case words `running`,
 * `parked`, `done`, `failed`, `cancelled`, `queued`, `unknown`, read as the state names gRPC uses
 * ('running' -> 'RUNNING'). Anything else reads 'UNKNOWN'.
 *
 * @param {unknown} word
 * @returns {string}
 */
export function stateFromWire(word) {
  const name = String(word).toUpperCase();
  return WIRE_STATES.includes(name) ? name : 'UNKNOWN';
}

const WIRE_STATES = Object.freeze([
  'RUNNING',
  'PARKED',
  'DONE',
  'FAILED',
  'CANCELLED',
  'QUEUED',
  'UNKNOWN',
]);

/**
 * @param {TurnStatusResponse} status
 * @returns {StatusFrame}
 */
export function statusFrame(status) {
  return {
    frame: 'status',
    turn_id: status.turnId,
    state: stateName(status.state),
    attempts: status.attempts,
    last_seq: Number(status.lastSeq),
    error: status.error,
  };
}

/**
 * @param {string} turnId
 * @param {Event} event
 * @returns {EventFrame}
 */
export function eventFrame(turnId, event) {
  return {
    frame: 'event',
    turn_id: turnId,
    seq: Number(event.seq),
    attempt: event.attempt,
    type: event.type,
    data: parseDataJson(event.dataJson),
    created_at: timestampToIso(event.createdAt),
  };
}

/**
 * @param {string} turnId
 * @param {Reset} reset
 * @param {boolean} [local] true when the follower, not the service, decided it
 * @returns {ResetFrame}
 */
export function resetFrame(turnId, reset, local = false) {
  return {
    frame: 'reset',
    turn_id: turnId,
    seq: Number(reset.seq),
    attempt: reset.attempt,
    checkpoint_id: reset.checkpointId,
    local,
  };
}

/**
 * @typedef {object} FollowOptions
 * @property {(frame: Frame) => void} onFrame called with each frame, in order
 * @property {number} [afterSeq] show only events after this seq (default 0: all)
 * @property {number} [idleMs] an idle gap this long triggers a TurnStatus look
 * @property {number} [deadlineMs] give up after this long, whatever the status says
 * @property {number} [retryMinMs] first pause before re-opening a dropped stream
 * @property {number} [retryMaxMs] longest pause between attempts
 * @property {AbortSignal} [signal] stop following
 */

/**
 * Follow a turn until it ends. Resolves with how it ended; rejects on an error a
 * retry cannot fix (the ServiceError, with its grpc.status code).
 *
 * @param {TurnkeeperClient} client
 * @param {string} turnId
 * @param {FollowOptions} options
 * @returns {Promise<FollowResult>}
 */
export async function followTurn(client, turnId, options) {
  const {
    onFrame,
    afterSeq = 0,
    idleMs = 30_000,
    deadlineMs = 15 * 60_000,
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
  /** @type {string | null} */
  let lastState = null;

  /** @param {FollowResult['outcome']} outcome @returns {FollowResult} */
  const result = (outcome) => ({ outcome, state: lastState, lastSeq });

  /**
   * TurnStatus, emitted as a frame; null while the service is unreachable (which,
   * by the panel's rule, means keep waiting).
   *
   * @returns {Promise<StatusFrame | null>}
   */
  const lookUp = async () => {
    try {
      const frame = statusFrame(await client.turnStatus({ turnId }));
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

  const first = await lookUp();
  if (first) {
    if (first.state === 'UNKNOWN') {
      return result('unknown');
    }
    attempt = first.attempts;
  }

  for (;;) {
    if (signal?.aborted) {
      return result('aborted');
    }
    if (Date.now() >= deadlineAt) {
      return result('deadline');
    }
    const watched = await watchOnce();
    if (watched.kind !== 'ended' && watched.kind !== 'error') {
      return result(watched.kind);
    }
    if (watched.kind === 'error' && !isRetryable(watched.error)) {
      throw watched.error;
    }
    // The stream is gone without the terminal event: see where the turn stands.
    const status = await lookUp();
    if (status) {
      if (status.state === 'UNKNOWN') {
        return result('unknown');
      }
      if (watched.kind === 'ended' && !LIVE_STATES.includes(status.state)) {
        // The service closed the stream cleanly and says the turn is over.
        return result('concluded');
      }
      if ((attempt >= 0 && status.attempts > attempt) || status.last_seq < lastSeq) {
        onFrame(resetFrame(turnId, { seq: status.last_seq, attempt: status.attempts, checkpointId: '' }, true));
        lastSeq = 0;
        attempt = status.attempts;
      }
    }
    const pause = Math.min(retryMaxMs, retryMinMs * 2 ** retries);
    retries += 1;
    await sleep(Math.min(pause, Math.max(0, deadlineAt - Date.now())), signal);
  }

  /**
   * One WatchTurn stream, from lastSeq, until it ends one way or another.
   *
   * @returns {Promise<{ kind: 'terminal' | 'concluded' | 'unknown' | 'deadline' | 'aborted' | 'ended' } | { kind: 'error', error: unknown }>}
   */
  function watchOnce() {
    return new Promise((resolve, reject) => {
      const call = client.watchTurn({ turnId, afterSeq: lastSeq });
      let settled = false;
      /** @type {NodeJS.Timeout | undefined} */
      let idleTimer;
      const deadlineTimer = setTimeout(() => finish({ kind: 'deadline' }), Math.max(0, deadlineAt - Date.now()));
      const onAbort = () => finish({ kind: 'aborted' });
      signal?.addEventListener('abort', onAbort, { once: true });

      /** @returns {boolean} false when the stream was already settled */
      function settle() {
        if (settled) {
          return false;
        }
        settled = true;
        clearTimeout(idleTimer);
        clearTimeout(deadlineTimer);
        signal?.removeEventListener('abort', onAbort);
        call.cancel(); // a no-op on a stream that already ended
        return true;
      }

      /** @param {any} outcome */
      function finish(outcome) {
        if (settle()) {
          resolve(outcome);
        }
      }

      /** @param {unknown} error */
      function fail(error) {
        if (settle()) {
          reject(error);
        }
      }

      function armIdle() {
        clearTimeout(idleTimer);
        idleTimer = setTimeout(onIdle, idleMs);
      }

      // The panel's rule: on an idle gap ask TurnStatus instead of assuming.
      async function onIdle() {
        try {
          const status = await lookUp();
          if (settled) {
            return;
          }
          if (status && status.state === 'UNKNOWN') {
            finish({ kind: 'unknown' });
          } else if (status && !LIVE_STATES.includes(status.state)) {
            finish({ kind: 'concluded' });
          } else {
            armIdle();
          }
        } catch (error) {
          fail(error);
        }
      }

      call.on('data', (/** @type {WatchTurnResponse} */ response) => {
        if (settled) {
          return;
        }
        armIdle();
        retries = 0;
        if (response.frame === 'reset' && response.reset) {
          onFrame(resetFrame(turnId, response.reset));
          // The frames that follow replay the retained events from seq 1.
          lastSeq = 0;
          attempt = Math.max(attempt, response.reset.attempt);
          return;
        }
        if (response.frame === 'event' && response.event) {
          const frame = eventFrame(turnId, response.event);
          if (frame.seq <= lastSeq) {
            return; // already shown: a re-opened stream can overlap by a frame
          }
          lastSeq = frame.seq;
          attempt = Math.max(attempt, frame.attempt);
          onFrame(frame);
          if (TERMINAL_EVENT_TYPES.includes(frame.type)) {
            lastState = { 'turn.done': 'DONE', 'turn.cancelled': 'CANCELLED' }[frame.type] ?? 'FAILED';
            finish({ kind: 'terminal' });
          }
        }
      });
      call.on('error', (error) => finish({ kind: 'error', error }));
      call.on('end', () => finish({ kind: 'ended' }));
      armIdle();
    });
  }
}

/**
 * @param {number} ms
 * @param {AbortSignal} [signal]
 * @returns {Promise<void>}
 */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}
