// An in-memory TurnService for the follower's unit tests: TurnStatus and WatchTurn
// with the contract's replay / live / reset behaviour, plus knobs a test turns to
// make the things happen that a follower must survive (a dropped stream, a rewind
// while no stream is open, a status that changes without a terminal event).
// The real service is tested in test/server.test.js.

import * as grpc from '@grpc/grpc-js';

import { loadTurnkeeper } from '../src/proto.js';

/**
 * @typedef {{ seq: number, attempt: number, type: string, dataJson: string, createdAt: { seconds: number, nanos: number } }} StoredEvent
 * @typedef {{ state: string, attempts: number, events: StoredEvent[], error: string, watchers: Set<grpc.ServerWritableStream<any, any>> }} FakeTurn
 */

const TERMINAL = new Set(['turn.done', 'turn.failed']);

/** @returns {{ seconds: number, nanos: number }} */
function now() {
  const millis = Date.now();
  return { seconds: Math.floor(millis / 1000), nanos: (millis % 1000) * 1e6 };
}

export async function startFakeService() {
  /** @type {Map<string, FakeTurn>} */
  const turns = new Map();
  /** Every WatchTurn request received, in order: { turnId, afterSeq }. */
  const watchRequests = /** @type {{ turnId: string, afterSeq: number }[]} */ ([]);
  /** Turn ids whose WatchTurn answers NOT_FOUND although TurnStatus knows them. */
  const watchNotFound = new Set();

  /** @param {string} turnId */
  const turn = (turnId) => {
    const found = turns.get(turnId);
    if (!found) {
      throw new Error(`fake: no turn ${turnId}`);
    }
    return found;
  };

  /** @param {grpc.ServerWritableStream<any, any>} call @param {StoredEvent} event */
  const sendEvent = (call, event) => {
    call.write({ event });
    if (TERMINAL.has(event.type)) {
      call.end();
      return true;
    }
    return false;
  };

  const { TurnService } = loadTurnkeeper().turnkeeper.v1;
  const server = new grpc.Server();
  server.addService(TurnService.service, {
    TurnStatus(/** @type {any} */ call, /** @type {grpc.sendUnaryData<any>} */ callback) {
      const found = turns.get(call.request.turnId);
      if (!found) {
        callback(null, { turnId: call.request.turnId, state: 'TURN_STATE_UNKNOWN' });
        return;
      }
      const lastSeq = found.events.at(-1)?.seq ?? 0;
      callback(null, {
        turnId: call.request.turnId,
        state: `TURN_STATE_${found.state}`,
        attempts: found.attempts,
        lastSeq,
        error: found.error,
      });
    },
    WatchTurn(/** @type {grpc.ServerWritableStream<any, any>} */ call) {
      const { turnId, afterSeq } = call.request;
      watchRequests.push({ turnId, afterSeq: Number(afterSeq) });
      const found = turns.get(turnId);
      if (!found || watchNotFound.has(turnId)) {
        call.emit('error', { code: grpc.status.NOT_FOUND, details: `no turn ${turnId}` });
        return;
      }
      for (const event of found.events) {
        if (event.seq > Number(afterSeq) && sendEvent(call, event)) {
          return;
        }
      }
      found.watchers.add(call);
      call.on('cancelled', () => found.watchers.delete(call));
    },
  });
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    );
  });

  return {
    address: `127.0.0.1:${port}`,
    watchRequests,
    watchNotFound,

    /** @param {string} turnId @param {string} [state] */
    create(turnId, state = 'RUNNING') {
      turns.set(turnId, { state, attempts: 0, events: [], error: '', watchers: new Set() });
    },

    /** Append an event of the current attempt and send it to every open stream. */
    append(/** @type {string} */ turnId, /** @type {string} */ type, /** @type {unknown} */ data = {}) {
      const found = turn(turnId);
      const event = {
        seq: (found.events.at(-1)?.seq ?? 0) + 1,
        attempt: found.attempts,
        type,
        dataJson: JSON.stringify(data),
        createdAt: now(),
      };
      found.events.push(event);
      for (const call of [...found.watchers]) {
        if (sendEvent(call, event)) {
          found.watchers.delete(call);
        }
      }
    },

    /** FinishTurn: the state, then the terminal event. */
    finish(/** @type {string} */ turnId, /** @type {'DONE' | 'FAILED'} */ outcome, error = '') {
      const found = turn(turnId);
      found.state = outcome;
      found.error = error;
      this.append(turnId, outcome === 'DONE' ? 'turn.done' : 'turn.failed', error ? { error } : {});
    },

    /** Change the state alone, as if the terminal event were lost. */
    setState(/** @type {string} */ turnId, /** @type {string} */ state) {
      turn(turnId).state = state;
    },

    /** A re-drive: attempts+1, drop the events after the boundary, reset open streams. */
    rewind(/** @type {string} */ turnId, boundary = 0) {
      const found = turn(turnId);
      found.attempts += 1;
      found.events = found.events.filter((event) => event.seq <= boundary);
      for (const call of found.watchers) {
        call.write({ reset: { seq: boundary, attempt: found.attempts, checkpointId: boundary ? `cp-${boundary}` : '' } });
        for (const event of found.events) {
          call.write({ event });
        }
      }
    },

    /** Fail every open stream of the turn, as a restarting service would. */
    dropWatchers(/** @type {string} */ turnId, code = grpc.status.UNAVAILABLE) {
      const found = turn(turnId);
      for (const call of found.watchers) {
        call.emit('error', { code, details: 'fake: stream dropped' });
      }
      found.watchers.clear();
    },

    /** The number of streams open on a turn. */
    watcherCount(/** @type {string} */ turnId) {
      return turn(turnId).watchers.size;
    },

    close() {
      return new Promise((resolve) => {
        server.tryShutdown(() => resolve(undefined));
        // Streams the test left open would hold tryShutdown forever.
        setTimeout(() => {
          server.forceShutdown();
          resolve(undefined);
        }, 500).unref();
      });
    },
  };
}
