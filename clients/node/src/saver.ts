// TurnkeeperSaver: a LangGraph.js checkpointer that stores through the turnkeeper
// service's CheckpointService.
//
// Values stay opaque to the service: checkpoints and writes are serialized here
// with `this.serde.dumpsTyped` and sent as (type, bytes); metadata is sent as JSON
// text (the service filters `list` on it). A thread belongs to one agent, and so to
// one serializer: a JS agent's checkpoints are read by JS savers only.
//
// Fencing. When `config.configurable` has `turn_id` and `attempt` (durableConfig
// puts them there), each put and putWrites carries a TurnFence, exactly as the
// Python RemoteSaver does: the service refuses the write with ABORTED if that
// attempt was re-driven away, so a zombie executor cannot write over the thread of
// the attempt that replaced it, and it records the turn's last_seq as the
// checkpoint's event boundary.
//
// Durability. A turn runs with `durability: "sync"` (durableRunOptions): with
// "async" the checkpoint of a finished step is written while the next step runs,
// and a SIGKILL in that window re-runs a step that had completed.

import { create } from "@bufbuild/protobuf";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
  compareWritesSortKeys,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  writesSortKey,
} from "@langchain/langgraph-checkpoint";

import { STREAM_CALL, TurnkeeperClient } from "./client.js";
import type { ConnectionOptions } from "./connection.js";
import {
  type CheckpointTuple as StoredTuple,
  type GetCheckpointResponse,
  type ListCheckpointsRequest,
  ListCheckpointsRequestSchema,
  type PutCheckpointRequest,
  PutCheckpointRequestSchema,
  type PutWritesRequest,
  PutWritesRequestSchema,
  type TurnFence,
  TurnFenceSchema,
  TypedValueSchema,
  WriteInputSchema,
} from "./gen/turnkeeper/v1/checkpoints_pb.js";
import { takeMade } from "./effect/executions.js";

/** The configurable keys that tie a checkpoint to a turn (and fence it). */
export const TURN_ID_KEY = "turn_id";
export const ATTEMPT_KEY = "attempt";
/** The durability every turn runs with (see the header comment). */
export const DURABILITY = "sync" as const;

/** Options for `stream`/`invoke` that run a graph with durability "sync". */
export function durableRunOptions(): { durability: typeof DURABILITY } {
  return { durability: DURABILITY };
}

/**
 * The config to run a thread with; with a turn and its attempt (both or neither),
 * every checkpoint and write the run stores is fenced by that attempt.
 */
export function durableConfig(threadId: string, turnId?: string, attempt?: number): RunnableConfig {
  if ((turnId === undefined) !== (attempt === undefined)) {
    throw new TypeError("turnId and attempt go together");
  }
  const configurable: Record<string, unknown> = { thread_id: threadId };
  if (turnId !== undefined) {
    if (!turnId) {
      throw new TypeError("turnId must not be empty");
    }
    configurable[TURN_ID_KEY] = turnId;
    configurable[ATTEMPT_KEY] = attempt;
  }
  return { configurable };
}

/** The TurnFence of a config, or undefined when it runs no turn. */
export function fenceOf(config: RunnableConfig): TurnFence | undefined {
  const configurable = config.configurable ?? {};
  const turnId = configurable[TURN_ID_KEY] as unknown;
  const attempt = configurable[ATTEMPT_KEY] as unknown;
  if (!turnId || attempt === undefined || attempt === null) {
    return undefined;
  }
  return create(TurnFenceSchema, { turnId: String(turnId), attempt: Number(attempt) });
}

function requireThreadId(config: RunnableConfig, what: string): string {
  const threadId = config.configurable?.thread_id as unknown;
  if (threadId === undefined || threadId === null || threadId === "") {
    throw new Error(
      `Failed to ${what}: the RunnableConfig has no "thread_id" in its "configurable" ` +
        `(graph.stream(input, { configurable: { thread_id: "..." } }))`,
    );
  }
  return String(threadId);
}

export interface TurnkeeperSaverOptions {
  /** A client to share (not closed by the saver); else one is made from `connection`. */
  client?: TurnkeeperClient;
  connection?: ConnectionOptions;
  serde?: SerializerProtocol;
}

export class TurnkeeperSaver extends BaseCheckpointSaver<number> {
  readonly client: TurnkeeperClient;
  readonly #ownsClient: boolean;

  constructor(options: TurnkeeperSaverOptions = {}) {
    super(options.serde);
    this.#ownsClient = options.client === undefined;
    this.client = options.client ?? new TurnkeeperClient(options.connection);
  }

  /** Close the saver's own client (a shared one is left open). Safe twice. */
  close(): void {
    if (this.#ownsClient) {
      this.client.close();
    }
  }

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const threadId = config.configurable?.thread_id as unknown;
    if (threadId === undefined || threadId === null || threadId === "") {
      return undefined; // as MemorySaver: no thread, no checkpoint
    }
    const checkpointId = getCheckpointId(config);
    const response: GetCheckpointResponse = await this.client.checkpoints.getCheckpoint({
      threadId: String(threadId),
      checkpointNs: String(config.configurable?.checkpoint_ns ?? ""),
      checkpointId: checkpointId ?? "",
    });
    if (!response.found || response.checkpoint === undefined) {
      return undefined;
    }
    // Like MemorySaver: a config that named its checkpoint is returned as given.
    return this.toTuple(response.checkpoint, checkpointId ? config : undefined);
  }

  async *list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple> {
    const request = this.listRequest(config, options);
    if (request === undefined) {
      return;
    }
    // The service narrows by namespace only within a thread; across threads the
    // namespace (and so the limit) is applied here, as MemorySaver applies it.
    const namespace = config.configurable?.checkpoint_ns as unknown;
    const acrossThreads = !request.threadId && namespace !== undefined;
    let left = options?.limit ?? Number.POSITIVE_INFINITY;
    if (acrossThreads) {
      request.limit = 0;
    }
    for await (const response of this.client.checkpoints.listCheckpoints(request, STREAM_CALL)) {
      const stored = response.checkpoint;
      if (stored === undefined || (acrossThreads && stored.ref?.checkpointNs !== String(namespace))) {
        continue;
      }
      if (left <= 0) {
        return;
      }
      left -= 1;
      yield await this.toTuple(stored, undefined);
    }
  }

  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    _newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const [stored] = await this.putFenced(config, checkpoint, metadata);
    return stored;
  }

  /**
   * `put`, also resolving with the turn's last_seq the service recorded as the
   * checkpoint's boundary (0 for a checkpoint of no turn). It may be past the last
   * event the caller appended: the service writes events of its own with a turn's
   * checkpoint (an effect superseded), and the caller's next event comes after them.
   */
  async putFenced(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
  ): Promise<[RunnableConfig, number]> {
    const request = await this.putRequest(config, checkpoint, metadata);
    const response = await this.client.checkpoints.putCheckpoint(request);
    const stored = {
      configurable: {
        thread_id: request.threadId,
        checkpoint_ns: request.checkpointNs,
        checkpoint_id: checkpoint.id,
      },
    };
    return [stored, Number(response.lastSeq)];
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    if (writes.length === 0) {
      return;
    }
    await this.client.checkpoints.putWrites(await this.writesRequest(config, writes, taskId, taskPath));
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.client.checkpoints.deleteThread({ threadId: String(threadId) });
  }

  // Requests and replies.

  /** undefined when MemorySaver would return nothing whatever is stored (limit <= 0). */
  protected listRequest(
    config: RunnableConfig,
    options: CheckpointListOptions | undefined,
  ): ListCheckpointsRequest | undefined {
    const { before, limit, filter } = options ?? {};
    if (limit !== undefined && limit <= 0) {
      return undefined;
    }
    const configurable = config.configurable ?? {};
    const request = create(ListCheckpointsRequestSchema, {
      threadId: configurable.thread_id === undefined ? "" : String(configurable.thread_id),
      checkpointId: configurable.checkpoint_id === undefined ? "" : String(configurable.checkpoint_id),
      limit: limit ?? 0,
    });
    if (configurable.checkpoint_ns !== undefined) {
      request.checkpointNs = String(configurable.checkpoint_ns);
    }
    if (filter && Object.keys(filter).length > 0) {
      request.filterJson = JSON.stringify(filter);
    }
    const beforeId = before?.configurable?.checkpoint_id as unknown;
    if (beforeId) {
      request.beforeCheckpointId = String(beforeId);
    }
    return request;
  }

  protected async putRequest(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
  ): Promise<PutCheckpointRequest> {
    const threadId = requireThreadId(config, "put a checkpoint");
    const [type, data] = await this.serde.dumpsTyped(copyCheckpoint(checkpoint));
    return create(PutCheckpointRequestSchema, {
      threadId,
      checkpointNs: String(config.configurable?.checkpoint_ns ?? ""),
      checkpointId: checkpoint.id,
      parentCheckpointId: String(config.configurable?.checkpoint_id ?? ""),
      checkpoint: { type, data },
      metadataJson: JSON.stringify(metadata ?? {}),
      fence: fenceOf(config),
    });
  }

  protected async writesRequest(
    config: RunnableConfig,
    writes: PendingWrite[],
    taskId: string,
    taskPath: string,
  ): Promise<PutWritesRequest> {
    const threadId = requireThreadId(config, "put writes");
    const checkpointId = config.configurable?.checkpoint_id as unknown;
    if (checkpointId === undefined || checkpointId === null || checkpointId === "") {
      throw new Error('Failed to put writes: the RunnableConfig has no "checkpoint_id" in its "configurable"');
    }
    const values = await Promise.all(writes.map(async ([, value]) => this.serde.dumpsTyped(value)));
    const fence = fenceOf(config);
    return create(PutWritesRequestSchema, {
      threadId,
      checkpointNs: String(config.configurable?.checkpoint_ns ?? ""),
      checkpointId: String(checkpointId),
      taskId,
      taskPath,
      // A task's writes are stored once (insert or ignore), except when every
      // channel is a special one (an error, an interrupt ...), which supersedes
      // the previous one: the rule of the Python RemoteSaver and SqliteSaver.
      replace: writes.every(([channel]) => channel in WRITES_IDX_MAP),
      writes: writes.map(([channel], idx) =>
        create(WriteInputSchema, {
          idx: WRITES_IDX_MAP[channel] ?? idx,
          channel,
          value: create(TypedValueSchema, { type: values[idx][0], data: values[idx][1] }),
        }),
      ),
      fence,
      // The task's writes say which effects the execution that made them made, so the
      // service supersedes the task's others (src/effect/executions.ts).
      settleEffects: fence !== undefined,
      effectKeys: fence === undefined ? [] : takeMade(fence.turnId, fence.attempt, taskId),
    });
  }

  /**
   * A checkpoint of format v < 4 kept its pending sends as writes of its parent;
   * LangGraph now expects them in the checkpoint, as MemorySaver migrates them.
   */
  protected async migratePendingSends(
    checkpoint: Checkpoint,
    threadId: string,
    checkpointNs: string,
    parentCheckpointId: string,
  ): Promise<void> {
    const parent = await this.client.checkpoints.getCheckpoint({ threadId, checkpointNs, checkpointId: parentCheckpointId });
    const writes = [...(parent.checkpoint?.pendingWrites ?? [])]
      .filter((write) => write.channel === TASKS)
      .sort((a, b) =>
        compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
      );
    const sends = await Promise.all(
      writes.map(async (write) => this.serde.loadsTyped(write.value?.type ?? "json", write.value?.data ?? new Uint8Array())),
    );
    checkpoint.channel_values ??= {};
    checkpoint.channel_values[TASKS] = sends;
    checkpoint.channel_versions ??= {};
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }

  /** The tuple MemorySaver would build; `config` when the caller named the checkpoint. */
  protected async toTuple(stored: StoredTuple, config: RunnableConfig | undefined): Promise<CheckpointTuple> {
    const ref = stored.ref;
    const threadId = ref?.threadId ?? "";
    const checkpointNs = ref?.checkpointNs ?? "";
    const writes = [...stored.pendingWrites].sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
    const pendingWrites: CheckpointPendingWrite[] = await Promise.all(
      writes.map(
        async (write): Promise<CheckpointPendingWrite> => [
          write.taskId,
          write.channel,
          await this.serde.loadsTyped(write.value?.type ?? "json", write.value?.data ?? new Uint8Array()),
        ],
      ),
    );
    const tuple: CheckpointTuple = {
      config: config ?? {
        configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: ref?.checkpointId ?? "" },
      },
      checkpoint: (await this.serde.loadsTyped(
        stored.checkpoint?.type ?? "json",
        stored.checkpoint?.data ?? new Uint8Array(),
      )) as Checkpoint,
      metadata: (stored.metadataJson ? JSON.parse(stored.metadataJson) : {}) as CheckpointMetadata,
      pendingWrites,
    };
    if (tuple.checkpoint.v < 4 && stored.parentCheckpointId) {
      await this.migratePendingSends(tuple.checkpoint, threadId, checkpointNs, stored.parentCheckpointId);
    }
    if (stored.parentCheckpointId) {
      tuple.parentConfig = {
        configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: stored.parentCheckpointId },
      };
    }
    return tuple;
  }
}
