// A small promise-based TurnService client over the grpc-js stub.

import * as grpc from '@grpc/grpc-js';

import { loadTurnkeeper } from './proto.js';

/** @typedef {import('../generated/turnkeeper/v1/TurnService').TurnServiceClient} TurnServiceClient */
/** @typedef {import('../generated/turnkeeper/v1/TurnStatusRequest').TurnStatusRequest} TurnStatusRequest */
/** @typedef {import('../generated/turnkeeper/v1/TurnStatusResponse').TurnStatusResponse__Output} TurnStatusResponse */
/** @typedef {import('../generated/turnkeeper/v1/GetTurnRequest').GetTurnRequest} GetTurnRequest */
/** @typedef {import('../generated/turnkeeper/v1/GetTurnResponse').GetTurnResponse__Output} GetTurnResponse */
/** @typedef {import('../generated/turnkeeper/v1/ListEventsRequest').ListEventsRequest} ListEventsRequest */
/** @typedef {import('../generated/turnkeeper/v1/ListEventsResponse').ListEventsResponse__Output} ListEventsResponse */
/** @typedef {import('../generated/turnkeeper/v1/StartTurnRequest').StartTurnRequest} StartTurnRequest */
/** @typedef {import('../generated/turnkeeper/v1/StartTurnResponse').StartTurnResponse__Output} StartTurnResponse */
/** @typedef {import('../generated/turnkeeper/v1/AppendEventsRequest').AppendEventsRequest} AppendEventsRequest */
/** @typedef {import('../generated/turnkeeper/v1/AppendEventsResponse').AppendEventsResponse__Output} AppendEventsResponse */
/** @typedef {import('../generated/turnkeeper/v1/FinishTurnRequest').FinishTurnRequest} FinishTurnRequest */
/** @typedef {import('../generated/turnkeeper/v1/FinishTurnResponse').FinishTurnResponse__Output} FinishTurnResponse */
/** @typedef {import('../generated/turnkeeper/v1/RedriveRequest').RedriveRequest} RedriveRequest */
/** @typedef {import('../generated/turnkeeper/v1/RedriveResponse').RedriveResponse__Output} RedriveResponse */
/** @typedef {import('../generated/turnkeeper/v1/CancelTurnRequest').CancelTurnRequest} CancelTurnRequest */
/** @typedef {import('../generated/turnkeeper/v1/CancelTurnResponse').CancelTurnResponse__Output} CancelTurnResponse */
/** @typedef {import('../generated/turnkeeper/v1/WatchTurnRequest').WatchTurnRequest} WatchTurnRequest */
/** @typedef {import('../generated/turnkeeper/v1/WatchTurnResponse').WatchTurnResponse__Output} WatchTurnResponse */

/** How long a unary call may take by default. The service answers from SQLite. */
export const DEFAULT_CALL_TIMEOUT_MS = 10_000;

/**
 * The TurnService calls a follower (and a test standing in for an executor) needs,
 * as promises. Errors are grpc-js ServiceErrors: `error.code` is a grpc.status value.
 */
export class TurnkeeperClient {
  /** @type {TurnServiceClient} */
  #stub;
  /** @type {number} */
  #callTimeoutMs;

  /**
   * @param {string} address host:port of the turnkeeper service
   * @param {{ tls?: boolean, callTimeoutMs?: number }} [options]
   *   tls: connect with TLS and the system's roots (default: plaintext)
   */
  constructor(address, { tls = false, callTimeoutMs = DEFAULT_CALL_TIMEOUT_MS } = {}) {
    const { TurnService } = loadTurnkeeper().turnkeeper.v1;
    const credentials = tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
    this.#stub = new TurnService(address, credentials);
    this.#callTimeoutMs = callTimeoutMs;
  }

  /** The generated grpc-js stub, for the calls this class does not wrap. */
  get stub() {
    return this.#stub;
  }

  /** @param {TurnStatusRequest} request @returns {Promise<TurnStatusResponse>} */
  turnStatus(request) {
    return this.#unary('TurnStatus', request);
  }

  /** @param {GetTurnRequest} request @returns {Promise<GetTurnResponse>} */
  getTurn(request) {
    return this.#unary('GetTurn', request);
  }

  /** @param {ListEventsRequest} request @returns {Promise<ListEventsResponse>} */
  listEvents(request) {
    return this.#unary('ListEvents', request);
  }

  /** @param {StartTurnRequest} request @returns {Promise<StartTurnResponse>} */
  startTurn(request) {
    return this.#unary('StartTurn', request);
  }

  /** @param {AppendEventsRequest} request @returns {Promise<AppendEventsResponse>} */
  appendEvents(request) {
    return this.#unary('AppendEvents', request);
  }

  /** @param {FinishTurnRequest} request @returns {Promise<FinishTurnResponse>} */
  finishTurn(request) {
    return this.#unary('FinishTurn', request);
  }

  /** @param {RedriveRequest} request @returns {Promise<RedriveResponse>} */
  redrive(request) {
    return this.#unary('Redrive', request);
  }

  /**
   * Cancel a RUNNING, PARKED or QUEUED turn (`rollback: true` also removes the
   * checkpoints it wrote). A turn already over: FAILED_PRECONDITION.
   *
   * @param {CancelTurnRequest} request @returns {Promise<CancelTurnResponse>}
   */
  cancelTurn(request) {
    return this.#unary('CancelTurn', request);
  }

  /**
   * The server stream of a turn's frames; no deadline (a turn can run for long).
   *
   * @param {WatchTurnRequest} request
   * @returns {grpc.ClientReadableStream<WatchTurnResponse>}
   */
  watchTurn(request) {
    return this.#stub.WatchTurn(request);
  }

  /** Close the channel. Safe to call more than once. */
  close() {
    this.#stub.close();
  }

  /**
   * @param {'TurnStatus' | 'GetTurn' | 'ListEvents' | 'StartTurn' | 'AppendEvents' | 'FinishTurn' | 'Redrive' | 'CancelTurn'} method
   * @param {object} request
   * @returns {Promise<any>}
   */
  #unary(method, request) {
    const call = /** @type {Function} */ (this.#stub[method]);
    return new Promise((resolve, reject) => {
      call.call(
        this.#stub,
        request,
        { deadline: Date.now() + this.#callTimeoutMs },
        /** @type {(error: grpc.ServiceError | null, response: unknown) => void} */
        (error, response) => (error ? reject(error) : resolve(response)),
      );
    });
  }
}
