// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { PruneStrategy as _turnkeeper_v1_PruneStrategy, PruneStrategy__Output as _turnkeeper_v1_PruneStrategy__Output } from '../../turnkeeper/v1/PruneStrategy';

export interface PruneThreadsRequest {
  'threadIds'?: (string)[];
  'strategy'?: (_turnkeeper_v1_PruneStrategy);
}

export interface PruneThreadsRequest__Output {
  'threadIds': (string)[];
  'strategy': (_turnkeeper_v1_PruneStrategy__Output);
}
