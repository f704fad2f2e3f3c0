// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { CheckpointRef as _turnkeeper_v1_CheckpointRef, CheckpointRef__Output as _turnkeeper_v1_CheckpointRef__Output } from '../../turnkeeper/v1/CheckpointRef';
import type { TypedValue as _turnkeeper_v1_TypedValue, TypedValue__Output as _turnkeeper_v1_TypedValue__Output } from '../../turnkeeper/v1/TypedValue';
import type { PendingWrite as _turnkeeper_v1_PendingWrite, PendingWrite__Output as _turnkeeper_v1_PendingWrite__Output } from '../../turnkeeper/v1/PendingWrite';

export interface CheckpointTuple {
  'ref'?: (_turnkeeper_v1_CheckpointRef | null);
  /**
   * Empty for the first checkpoint of a thread.
   */
  'parentCheckpointId'?: (string);
  'checkpoint'?: (_turnkeeper_v1_TypedValue | null);
  /**
   * The merged metadata as JSON text.
   */
  'metadataJson'?: (string);
  'pendingWrites'?: (_turnkeeper_v1_PendingWrite)[];
}

export interface CheckpointTuple__Output {
  'ref': (_turnkeeper_v1_CheckpointRef__Output | null);
  /**
   * Empty for the first checkpoint of a thread.
   */
  'parentCheckpointId': (string);
  'checkpoint': (_turnkeeper_v1_TypedValue__Output | null);
  /**
   * The merged metadata as JSON text.
   */
  'metadataJson': (string);
  'pendingWrites': (_turnkeeper_v1_PendingWrite__Output)[];
}
