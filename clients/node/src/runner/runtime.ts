// The executions of one runner: at most one per turn, started, claimed, stopped;
// at most `maxTurns` of them at once (admission.ts).

import type { TurnkeeperClient } from "../client.js";
import { Code, codeOf, isFenced, messageOf } from "../errors.js";
import { Admission, DEFAULT_MAX_TURNS } from "./admission.js";
import { type Assignment, Execution, type ExecutionHost } from "./execution.js";

export class TurnRuntime {
  #executions = new Map<string, Execution>();
  #stopping = false;
  /** At most maxTurns executions at once; the rest wait, visibly (admission.ts). */
  readonly admission: Admission;

  constructor(
    readonly host: ExecutionHost,
    maxTurns: number = DEFAULT_MAX_TURNS,
  ) {
    this.admission = new Admission(maxTurns, host.log);
    this.admission.onClaim = (turnId, attempt, reason) => this.#claimLater(turnId, attempt, reason);
  }

  get client(): TurnkeeperClient {
    return this.host.client;
  }

  running(turnId: string): Execution | undefined {
    return this.#executions.get(turnId);
  }

  get active(): number {
    return this.#executions.size;
  }

  /** The service ended the turn (a cancel, a deadline, an erasure): stop its graph
   * if this replica runs that attempt. Fencing would stop it at its next write anyway. */
  cancel(turnId: string, attempt: number, reason: string): boolean {
    const execution = this.#executions.get(turnId);
    if (execution === undefined || execution.attempt !== attempt) {
      return false;
    }
    execution.lose(`the service ended the turn (${reason || "cancelled"})`);
    return true;
  }

  /** Start executing (once a slot is free; `slot`: the caller took one for it, and
   * it is given back however this ends); false if this attempt (or a newer one)
   * already runs here (the same turn can reach a replica twice: its startup Redrive
   * and a hand-off). */
  start(assignment: Assignment, { slot = false }: { slot?: boolean } = {}): boolean {
    const turnId = assignment.turn.turnId;
    if (this.#stopping) {
      this.host.log(`turn_id=${turnId}: not started, the runner is stopping`);
      if (slot) {
        this.admission.giveBack();
      }
      return false;
    }
    const current = this.#executions.get(turnId);
    if (current !== undefined) {
      if (current.attempt >= assignment.turn.attempts) {
        if (slot) {
          this.admission.giveBack();
        }
        return false;
      }
      // An older attempt of ours was re-driven (to us again): it is a zombie.
      current.lose(`superseded by attempt ${assignment.turn.attempts}`);
    }
    this.admission.forget(turnId);
    const execution = new Execution(this.host, assignment, this.admission, slot);
    this.#executions.set(turnId, execution);
    execution.start();
    void execution.done.then(() => {
      if (this.#executions.get(turnId) === execution) {
        this.#executions.delete(turnId);
      }
    });
    return true;
  }

  /** Take a turn the service handed out over NATS (a resume, a lease-expiry
   * re-drive) and execute it; with every slot taken, claim it when one frees (it
   * stays unowned meanwhile, and the service may offer it to another replica). */
  async claim(turnId: string, attempt: number, reason: string): Promise<void> {
    if (!(await this.#notRunning(turnId, attempt)) || this.#stopping) {
      return;
    }
    if (!this.admission.tryTake()) {
      this.admission.waitToClaim(turnId, attempt, reason);
      return;
    }
    await this.#claim(turnId, attempt, reason);
  }

  /**
   * False while this attempt runs here; true once it does not, after waiting for an
   * execution of it that is settling to end. A resume hands the very attempt that
   * just parked back (ResumeDetached keeps the attempt), possibly before its
   * execution has ended or even read ParkTurn's answer: taken for "runs here
   * already", the hand-off was dropped and the turn waited for the reaper's next
   * claim window (decision 560).
   */
  async #notRunning(turnId: string, attempt: number): Promise<boolean> {
    for (;;) {
      const current = this.#executions.get(turnId);
      if (current === undefined || current.attempt !== attempt) {
        return true;
      }
      if (!current.settling) {
        return false;
      }
      await current.done;
      if (this.#executions.get(turnId) === current) {
        return true; // ended; start()'s clean-up of it comes next
      }
    }
  }

  /** A slot freed for a waiting claim (Admission.onClaim): claim it now. */
  #claimLater(turnId: string, attempt: number, reason: string): void {
    if (this.#stopping) {
      this.admission.giveBack();
      return;
    }
    void this.#claim(turnId, attempt, `${reason}, after waiting for a slot`);
  }

  /** ClaimTurn and start, holding a slot: start() takes it over (and gives it back
   * if it starts nothing); given back here when nothing is claimed. */
  async #claim(turnId: string, attempt: number, reason: string): Promise<void> {
    let handed = false;
    try {
      // A claim that waited for a slot: the same wait as claim()'s (decision 560).
      if (!(await this.#notRunning(turnId, attempt))) {
        return;
      }
      const { replica, incarnation } = this.host.identity;
      let response;
      try {
        // The agent's version policy decides on the version: a refusal (the turn is
        // kept for another version) is FAILED_PRECONDITION, and the turn waits for a
        // replica that may take it (docs/versions.md).
        response = await this.client.turns.claimTurn({ turnId, attempt, replica, incarnation, graph: this.host.graphVersion });
      } catch (error) {
        // Fenced: someone else took it. Otherwise it is handed out again when its
        // claim window passes.
        this.host.log(`turn_id=${turnId} attempt=${attempt}: not claimed (${isFenced(error) ? "" : "failed: "}${messageOf(error)})`);
        return;
      }
      if (response.turn !== undefined) {
        handed = true;
        this.start({ turn: response.turn, checkpointId: response.checkpointId, reason }, { slot: true });
      }
    } finally {
      if (!handed) {
        this.admission.giveBack();
      }
    }
  }

  /**
   * The thread's latest checkpoint has nodes still to run (a run that failed, was
   * cut short, or waits in an interrupt). With tokens on, a thread that holds no
   * turn of this agent is closed to it (PERMISSION_DENIED): nothing of ours there.
   */
  async hasPendingWork(threadId: string): Promise<boolean> {
    try {
      const state = await this.host.graph.getState({ configurable: { thread_id: threadId } });
      return ((state as { next?: readonly string[] }).next?.length ?? 0) > 0;
    } catch (error) {
      if (codeOf(error) === Code.PermissionDenied) {
        return false;
      }
      throw error;
    }
  }

  /**
   * Let executions finish for up to `graceMs`, then stop the rest without writing
   * anything more: their turns stay RUNNING and are re-driven.
   */
  async stop(graceMs: number): Promise<void> {
    this.#stopping = true;
    // Waiting claims were never ours: the service offers them again elsewhere.
    this.admission.clearClaims();
    const running = [...this.#executions.values()];
    if (running.length === 0) {
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([Promise.all(running.map((e) => e.done)), timeout]);
    clearTimeout(timer);
    for (const execution of this.#executions.values()) {
      execution.abandon();
    }
    await Promise.all(running.map((e) => e.done));
  }
}
