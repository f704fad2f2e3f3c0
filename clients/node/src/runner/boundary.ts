// The boundary rule, enforced where checkpoints are written (the Python bridge's
// BoundarySaver, for LangGraph.js).
//
// Every checkpoint a turn writes records the turn's last_seq as its boundary; a
// re-drive rewinds the events to the boundary of the newest checkpoint and re-runs
// the step after it. For that to lose nothing and repeat nothing, every event of a
// step must be appended before the checkpoint that ends the step: before it stores
// a checkpoint or a task's writes for a turn, this saver flushes the turn's log.
//
// Orphaned writes. A finished task's writes are stored against the step's starting
// checkpoint, and a resumed graph does not run that task again; but the rewind
// dropped its events. So when an execution starts right at a checkpoint's boundary
// (nothing kept after it), the saver hands LangGraph that checkpoint without its
// tasks' writes, and the whole step runs again. Writes that are no task's own
// result (an interrupt, a resume value, an error, the run's input) are kept. Each
// checkpoint records its boundary in its metadata under `turnkeeper`.

import { STAMP_KEY } from "./version.js";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  type ChannelVersions,
  type Checkpoint,
  type CheckpointMetadata,
  type CheckpointTuple,
  type PendingWrite,
  WRITES_IDX_MAP,
} from "@langchain/langgraph-checkpoint";

import { ATTEMPT_KEY, TURN_ID_KEY, TurnkeeperSaver } from "../saver.js";
import type { EventLog } from "./events.js";

export const METADATA_KEY = "turnkeeper";
// LangGraph's task id for writes from the run's input (a Command's resume or update).
const NULL_TASK_ID = "00000000-0000-0000-0000-000000000000";

export class BoundarySaver extends TurnkeeperSaver {
  #logs = new Map<string, EventLog>();

  attach(events: EventLog): void {
    this.#logs.set(`${events.turnId}\u0000${events.attempt}`, events);
  }

  detach(events: EventLog): void {
    const key = `${events.turnId}\u0000${events.attempt}`;
    if (this.#logs.get(key) === events) {
      this.#logs.delete(key);
    }
  }

  /** Set: each root checkpoint of a turn records under `graph` in its mark what this
   * says about the code that wrote it (its graph version, next nodes, channels). */
  stampOf: ((checkpoint: Checkpoint) => unknown) | undefined;

  /** Set (a runner serving the LangGraph API): each root checkpoint of a turn, but
   * its input's, is preceded by a `values` event of the state it holds (what this
   * says of its channel values), so it is retained with the checkpoint and a rewind
   * to it keeps it. */
  valuesOf: ((channelValues: Record<string, unknown>) => unknown) | undefined;
  /** Whether a checkpoint whose channels `newVersions` names wrote the graph's
   * output: LangGraph.js streams `values` only after a step that did (an input of
   * `{}` or a node that returns `{}` makes a checkpoint but no `values`). */
  writesValues: ((newVersions: ChannelVersions) => boolean) | undefined;

  /** The log of the execution a config belongs to, if it runs here. */
  logFor(config: RunnableConfig): EventLog | undefined {
    const turnId = config.configurable?.[TURN_ID_KEY] as unknown;
    const attempt = config.configurable?.[ATTEMPT_KEY] as unknown;
    if (turnId === undefined || attempt === undefined) {
      return undefined;
    }
    return this.#logs.get(`${String(turnId)}\u0000${Number(attempt)}`);
  }

  override async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const events = this.logFor(config);
    if (events === undefined) {
      return super.put(config, checkpoint, metadata, newVersions);
    }
    if (
      this.valuesOf !== undefined &&
      !config.configurable?.checkpoint_ns &&
      metadata.source !== "input" &&
      (this.writesValues?.(newVersions) ?? true)
    ) {
      // The root graph's state once its input is applied, as its `values` stream shows it.
      events.emit("values", { values: this.valuesOf(checkpoint.channel_values) });
    }
    // Through the log: the service may announce superseded effects with the
    // checkpoint, in seqs the log must not number its next events with.
    return events.checkpoint(async (boundary) => {
      const mark: Record<string, unknown> = { turn_id: events.turnId, last_seq: boundary };
      if (this.stampOf !== undefined && !config.configurable?.checkpoint_ns) {
        // A root checkpoint says which code wrote it (docs/versions.md).
        mark[STAMP_KEY] = this.stampOf(checkpoint);
      }
      return this.putFenced(config, checkpoint, { ...metadata, [METADATA_KEY]: mark } as CheckpointMetadata);
    });
  }

  override async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    await this.logFor(config)?.flush();
    return super.putWrites(config, writes, taskId, taskPath);
  }

  override async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const found = await super.getTuple(config);
    const events = this.logFor(config);
    if (found === undefined || events === undefined || !found.pendingWrites?.length) {
      return found;
    }
    const mark = (found.metadata as Record<string, unknown> | undefined)?.[METADATA_KEY] as
      | { turn_id?: unknown; last_seq?: unknown }
      | undefined;
    if (mark?.turn_id !== events.turnId || typeof mark.last_seq !== "number") {
      return found; // another turn's checkpoint (or one written without the runner)
    }
    if (events.startSeq > mark.last_seq) {
      return found; // events after the checkpoint were kept: its writes stand
    }
    const kept = found.pendingWrites.filter(([taskId, channel]) => channel in WRITES_IDX_MAP || taskId === NULL_TASK_ID);
    return { ...found, pendingWrites: kept };
  }
}
