// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Long } from '@grpc/proto-loader';

/**
 * Sent when the turn was rewound: drop every event shown so far; the frames that
 * follow replay the turn's retained events from seq 1.
 */
export interface Reset {
  /**
   * The boundary the turn was rewound to.
   */
  'seq'?: (number | string | Long);
  'attempt'?: (number);
  'checkpointId'?: (string);
}

/**
 * Sent when the turn was rewound: drop every event shown so far; the frames that
 * follow replay the turn's retained events from seq 1.
 */
export interface Reset__Output {
  /**
   * The boundary the turn was rewound to.
   */
  'seq': (number);
  'attempt': (number);
  'checkpointId': (string);
}
