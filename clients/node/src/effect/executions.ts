// Which effects each running task execution made, for the task's writes to say.
//
// An effect (effect.ts) notes its ledger key here against the task execution that
// made it; when LangGraph.js stores that task's writes, TurnkeeperSaver takes the set
// and sends it with them (PutWritesRequest.settleEffects): the service supersedes any
// other recorded effect of the task, one an earlier, lost execution made and this one
// did not make again (docs/effects.md, divergence). The Python client's
// turnkeeper.agent.saver.executions, in TypeScript.
//
// An execution is LangGraph's per-task scratchpad (a new one each time a task is
// prepared: a re-drive, a resume after interrupt()); the entry is found by (turn,
// attempt, task id), since putWrites sees only the task id.

/** Executions remembered at most; a task whose writes never come is forgotten first. */
const MAX_EXECUTIONS = 4096;

/** One execution of a task: its calls' counters (per node try and effect name) and the
 * keys it made. A RetryPolicy retry keeps the execution, so every try's keys are
 * kept for the settle list. */
export class Execution {
  readonly scratchpad: unknown;
  readonly made = new Set<string>();
  readonly #counters = new Map<string, number>();

  constructor(scratchpad: unknown) {
    this.scratchpad = scratchpad;
  }

  /** The position of the next call of effect `name` in the node's try `nodeAttempt`
   * of this execution, from 0. */
  nextIndex(nodeAttempt: number, name: string): number {
    const counter = `${nodeAttempt}\u001f${name}`;
    const index = this.#counters.get(counter) ?? 0;
    this.#counters.set(counter, index + 1);
    return index;
  }
}

const executions = new Map<string, Execution>();

function entry(turnId: string, attempt: number, taskId: string): string {
  return `${turnId}\u001f${attempt}\u001f${taskId}`;
}

/** The execution of `taskId` that `scratchpad` belongs to: a new one when the task
 * was prepared again since (another scratchpad). */
export function executionOf(turnId: string, attempt: number, taskId: string, scratchpad: unknown): Execution {
  const key = entry(turnId, attempt, taskId);
  let found = executions.get(key);
  if (found === undefined || found.scratchpad !== scratchpad) {
    found = new Execution(scratchpad);
    executions.delete(key);
    executions.set(key, found);
    while (executions.size > MAX_EXECUTIONS) {
      executions.delete(executions.keys().next().value as string);
    }
  }
  return found;
}

/** The keys the task's latest execution made (none if it made no effect), and forget
 * it: its writes are being stored, so the execution is over. */
export function takeMade(turnId: string, attempt: number, taskId: string): string[] {
  const key = entry(turnId, attempt, taskId);
  const found = executions.get(key);
  executions.delete(key);
  return found === undefined ? [] : [...found.made].sort();
}
