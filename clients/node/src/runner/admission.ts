// Admission: at most `maxTurns` executions of one runner at once (the Python
// bridge's turnkeeper.agent.bridge._admission, decision 381).
//
// A replica that starts every turn it is handed starts work that cannot finish on a
// saturated machine: each turn gets a sliver of the CPU, every one of them slows,
// and deadlines (leases, checkpoint streams, clients) lapse for all. Past the limit
// a turn waits instead, and waits where it can be seen:
//
// - a turn not yet owned by this replica (a new responses/create while every slot
//   is taken, a hand-off from the service) is left unowned in the journal, RUNNING
//   with no executor, and this replica claims it (ClaimTurn) when a slot frees. The
//   service says why it waits (Turn.detail, from the replicas' announcements: every
//   live replica is full) and the LangGraph API shows the run `pending`. While it
//   waits, the service offers it again every claim window, so a replica of the agent
//   with a free slot takes it first; nothing ran, so nothing is spent.
// - a turn already owned here (the startup Redrive hands back every orphan at once)
//   keeps its lease, heartbeated, and runs when a slot frees.
//
// A waiting turn is never dropped and never failed for waiting. The slots go first
// to owned executions (they hold a lease), then to claims in the order they came.

/** Executions one runner runs at once unless told otherwise (`--max-turns`,
 * TURNKEEPER_MAX_TURNS, RunnerConfig.maxTurns): the Python bridge's default. */
export const DEFAULT_MAX_TURNS = 64;

/** `TURNKEEPER_MAX_TURNS` (or `--max-turns`) as a limit: a whole number, 0 for none. */
export function parseMaxTurns(raw: string, name = "TURNKEEPER_MAX_TURNS"): number {
  const text = raw.trim();
  if (!/^\d+$/.test(text)) {
    throw new TypeError(`${name}=${JSON.stringify(raw)}: a whole number of turns, 0 or more (0: no limit)`);
  }
  return Number(text);
}

export class Admission {
  inUse = 0;
  /** Called with the claim to make, holding a slot for it (the runtime claims). */
  onClaim: ((turnId: string, attempt: number, reason: string) => void) | undefined;
  /** Called when the runner turns full or free again (it says so to the service). */
  onFull: ((full: boolean) => void) | undefined;
  /** Owned executions waiting for a slot, first come first served. */
  #owned: Array<{ grant: () => void }> = [];
  /** Turns to claim when a slot frees: turn id -> [attempt, reason], in arrival order. */
  #claims = new Map<string, [number, string]>();
  #wasFull = false;

  /** `limit` 0: no limit. */
  constructor(
    readonly limit: number = DEFAULT_MAX_TURNS,
    readonly log: (line: string) => void = () => undefined,
  ) {
    if (!Number.isInteger(limit) || limit < 0) {
      throw new TypeError(`maxTurns ${limit}: a whole number, 0 (no limit) or more`);
    }
  }

  get full(): boolean {
    return this.limit > 0 && this.inUse >= this.limit;
  }

  get waiting(): number {
    return this.#owned.length + this.#claims.size;
  }

  /** A slot now, or false (nothing waits for it). */
  tryTake(): boolean {
    if (this.full || this.#owned.length > 0) {
      return false;
    }
    this.inUse += 1;
    return true;
  }

  /** A slot for an owned execution, once one is free; rejects (holding none) when
   * `signal` aborts first. */
  take(signal?: AbortSignal): Promise<void> {
    if (this.tryTake()) {
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener("abort", abandon);
          resolve();
        },
      };
      const abandon = (): void => {
        const at = this.#owned.indexOf(waiter);
        if (at >= 0) {
          this.#owned.splice(at, 1);
          this.#changed();
        }
        reject(signal?.reason ?? new Error("aborted"));
      };
      if (signal?.aborted) {
        reject(signal.reason ?? new Error("aborted"));
        return;
      }
      signal?.addEventListener("abort", abandon, { once: true });
      this.#owned.push(waiter);
      this.#changed();
    });
  }

  /** Claim the turn when a slot frees (a newer attempt replaces an older one). */
  waitToClaim(turnId: string, attempt: number, reason: string): void {
    const known = this.#claims.get(turnId);
    if (known !== undefined && known[0] >= attempt) {
      return;
    }
    if (known !== undefined) {
      this.#claims.set(turnId, [attempt, reason]); // keeps its place in the line
      return; // offered again (every claim window): said already
    }
    this.#claims.set(turnId, [attempt, reason]);
    this.log(`turn_id=${turnId} attempt=${attempt}: waits for a free slot (${this.inUse} running, --max-turns ${this.limit})`);
    this.#changed();
  }

  /** A waiting claim no longer wanted (the turn runs here already). */
  forget(turnId: string): void {
    if (this.#claims.delete(turnId)) {
      this.#changed();
    }
  }

  /** Drop every waiting claim (the runner stops: the service offers them again). */
  clearClaims(): void {
    if (this.#claims.size > 0) {
      this.#claims.clear();
      this.#changed();
    }
  }

  /** A slot freed: to the next owned execution, else the next claim. */
  giveBack(): void {
    this.inUse -= 1;
    const next = this.#owned.shift();
    if (next !== undefined) {
      this.inUse += 1;
      next.grant();
      this.#changed();
      return;
    }
    if (this.#claims.size > 0 && this.onClaim !== undefined && !this.full) {
      const [turnId, [attempt, reason]] = this.#claims.entries().next().value as [string, [number, string]];
      this.#claims.delete(turnId);
      this.inUse += 1;
      this.onClaim(turnId, attempt, reason);
    }
    this.#changed();
  }

  #changed(): void {
    const full = this.full || this.waiting > 0;
    if (full !== this.#wasFull) {
      this.#wasFull = full;
      this.onFull?.(full);
    }
  }
}
