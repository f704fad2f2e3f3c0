// A turn's event stream on the executor side: events numbered contiguously per
// turn, buffered, and appended to the service in seq order.
//
// emit() never waits: it numbers the event and buffers it. flush() appends what is
// buffered; the BoundarySaver calls it before every checkpoint and write, so the
// events of a step are stored before the checkpoint that ends it (the boundary
// rule). A background flusher (run()) keeps watchers live between checkpoints.
// Event data holds no run ids or timestamps, so an execution that re-runs a step
// produces the same events as the one that was lost.
//
// The service writes events into the stream too: a turn's checkpoint may carry the
// announcement of an effect superseded (`effect.superseded`), at the seqs after the
// last one appended. So a checkpoint is stored through checkpoint(), which appends
// nothing while it is under way and then numbers the events still buffered after
// the turn's last_seq the service answered: one numbering for both writers
// (decision 271).

import { create } from "@bufbuild/protobuf";

import type { TurnkeeperClient } from "../client.js";
import { isFenced } from "../errors.js";
import { type EventInput, EventInputSchema } from "../gen/turnkeeper/v1/turns_pb.js";
import { toJsonText } from "../values.js";

/** The service refuses an event over 256 KiB and a batch over 1000; stay under. */
export const MAX_EVENT_BYTES = 192 * 1024;
export const MAX_BATCH = 500;

function bounded(text: string): string {
  const size = Buffer.byteLength(text);
  return size <= MAX_EVENT_BYTES ? text : JSON.stringify({ truncated: true, bytes: size, head: text.slice(0, 1024) });
}

export class EventLog {
  readonly turnId: string;
  readonly attempt: number;
  /** The turn's last_seq when this execution began. */
  readonly startSeq: number;
  /** The newest seq the service has confirmed (its own events' included: checkpoint()). */
  appendedSeq: number;
  /** The types of the events this execution emitted. */
  readonly emitted = new Set<string>();
  #client: TurnkeeperClient;
  #pending: EventInput[] = [];
  #nextSeq: number;
  #closed = false;
  #flushing: Promise<number> | undefined;
  #wake: (() => void) | undefined;

  constructor(client: TurnkeeperClient, turnId: string, attempt: number, lastSeq: number) {
    this.#client = client;
    this.turnId = turnId;
    this.attempt = attempt;
    this.startSeq = lastSeq;
    this.appendedSeq = lastSeq;
    this.#nextSeq = lastSeq + 1;
  }

  emit(type: string, data: unknown): void {
    if (this.#closed) {
      return;
    }
    this.emitted.add(type);
    const seq = this.#nextSeq;
    this.#nextSeq += 1;
    this.#pending.push(create(EventInputSchema, { seq: BigInt(seq), type, dataJson: bounded(toJsonText(data)) }));
    this.#wake?.();
  }

  /**
   * Append every event emitted so far; resolves with the newest seq appended.
   * Rejects with what AppendEvents threw; the events stay buffered and a later
   * flush sends them again (appends are idempotent by (attempt, seq)).
   */
  async flush(): Promise<number> {
    // One flush at a time, in seq order: wait for the running one, then go on.
    while (this.#flushing !== undefined) {
      await this.#flushing.catch(() => undefined);
    }
    const running = this.#drain();
    this.#flushing = running;
    try {
      return await running;
    } finally {
      this.#flushing = undefined;
    }
  }

  /**
   * Flush, then `store(boundary)` a checkpoint of the turn, which resolves with what
   * it stored and the turn's last_seq the service answered; resolves with the
   * former. Nothing is appended while the checkpoint is under way, and events
   * emitted meanwhile are numbered after that last_seq: seqs the service took for
   * its own events with the checkpoint are not written again.
   */
  async checkpoint<T>(store: (boundary: number) => Promise<[T, number]>): Promise<T> {
    while (this.#flushing !== undefined) {
      await this.#flushing.catch(() => undefined);
    }
    const running = (async (): Promise<T> => {
      const [stored, lastSeq] = await store(await this.#drain());
      // Nothing is in flight (this holds the flush turn), so no buffered event has
      // been sent under its seq yet. A service that writes no events of its own
      // answers no more than what was appended.
      const shift = lastSeq - this.appendedSeq;
      if (shift > 0) {
        for (const event of this.#pending) {
          event.seq += BigInt(shift);
        }
        this.#nextSeq += shift;
        this.appendedSeq = lastSeq;
      }
      return stored;
    })();
    // Waiters only wait for the turn to end; the caller gets the outcome.
    this.#flushing = running.then(
      () => this.appendedSeq,
      () => this.appendedSeq,
    );
    try {
      return await running;
    } finally {
      this.#flushing = undefined;
    }
  }

  async #drain(): Promise<number> {
    for (;;) {
      const batch = this.#pending.slice(0, MAX_BATCH);
      if (batch.length === 0) {
        return this.appendedSeq;
      }
      await this.#client.turns.appendEvents({ turnId: this.turnId, attempt: this.attempt, events: batch });
      this.#pending.splice(0, batch.length);
      this.appendedSeq = Number(batch[batch.length - 1].seq);
    }
  }

  /**
   * Stop taking events; return those not appended yet followed by `last`
   * [type, data] events, for the ParkTurn or FinishTurn that writes them in the
   * same transaction as the state change.
   */
  async close(...last: Array<[string, unknown]>): Promise<EventInput[]> {
    while (this.#flushing !== undefined) {
      await this.#flushing.catch(() => undefined);
    }
    this.#closed = true;
    const pending = this.#pending;
    this.#pending = [];
    for (const [type, data] of last) {
      pending.push(create(EventInputSchema, { seq: BigInt(this.#nextSeq), type, dataJson: bounded(toJsonText(data)) }));
      this.#nextSeq += 1;
    }
    return pending;
  }

  /** Drop what is buffered and take no more (the execution is giving up). */
  discard(): void {
    this.#closed = true;
    this.#pending = [];
    this.#wake?.();
  }

  /**
   * Flush whenever events arrive, until `signal` aborts or the log is discarded.
   * A fenced append means the execution lost the turn: `onFenced` is told.
   */
  async run(signal: AbortSignal, onFenced: (error: unknown) => void): Promise<void> {
    // One listener for the whole run (not one per wait): a long turn waits often.
    const onAbort = (): void => this.#wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      while (!signal.aborted && !this.#closed) {
        if (this.#pending.length === 0) {
          await new Promise<void>((resolve) => {
            this.#wake = resolve;
          });
          this.#wake = undefined;
          continue;
        }
        try {
          await this.flush();
        } catch (error) {
          if (isFenced(error)) {
            onFenced(error);
            return;
          }
          // The next flush (at the latest the one before the next checkpoint)
          // sends them again; pause so a service that is down is not hammered.
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}

// The logs of the executions running in this process, for emitEvent().
const live = new Map<string, EventLog>();

export function register(events: EventLog): () => void {
  const key = `${events.turnId}\u0000${events.attempt}`;
  live.set(key, events);
  return () => {
    if (live.get(key) === events) {
      live.delete(key);
    }
  };
}

/**
 * Emit an event of the turn a node runs in (inside a node or tool: pass the
 * `config` LangGraph gave it). Buffered at once; appended before the step's
 * checkpoint. Returns false when the config belongs to no turn run here.
 */
export function emitEvent(config: { configurable?: Record<string, unknown> }, type: string, data: unknown): boolean {
  const turnId = config.configurable?.turn_id;
  const attempt = config.configurable?.attempt;
  const events = live.get(`${String(turnId)}\u0000${Number(attempt)}`);
  if (events === undefined) {
    return false;
  }
  events.emit(type, data);
  return true;
}
