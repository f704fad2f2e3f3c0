// CancelTurn against the real turnkeeper service at TURNKEEPER_ADDRESS
// (tests/panel/test_node_client.py runs `npm test` with it set). Skipped when unset.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';

import * as grpc from '@grpc/grpc-js';

import { TurnkeeperClient } from '../src/client.js';
import { toValue } from '../src/values.js';
import { spawnFollow, until } from '../testing/helpers.js';

const address = process.env.TURNKEEPER_ADDRESS ?? '';
const skip = address ? false : 'TURNKEEPER_ADDRESS is not set (tests/panel/test_node_client.py sets it)';

/** @type {TurnkeeperClient} */
let client;

describe('cancelTurn against the real service', { skip }, () => {
  before(() => {
    client = new TurnkeeperClient(address);
  });

  after(() => {
    client?.close();
  });

  it('cancels a running turn once; the follower ends on turn.cancelled', async () => {
    const run = randomUUID().slice(0, 8);
    const turnId = `node-cancel-${run}`;
    await client.startTurn({
      turnId,
      threadId: `node-cancel-thread-${run}`,
      agent: 'node-client-test',
      replica: `node-replica-${run}`,
      incarnation: `node-incarnation-${run}`,
      input: toValue({ q: 'stop me' }),
    });
    const follow = spawnFollow(['--address', address, turnId]);
    await until(() => follow.frames().length === 1, 10_000);

    const response = await client.cancelTurn({ turnId, reason: 'from node' });
    assert.equal(response.turn?.state, 'TURN_STATE_CANCELLED');
    assert.equal(response.turn?.endReason, 'cancelled');
    assert.equal(await follow.exited, 0, follow.stderr());
    assert.deepEqual(
      follow.frames().map((frame) => frame.type ?? frame.state),
      ['RUNNING', 'turn.cancelled'],
    );

    await assert.rejects(client.cancelTurn({ turnId }), (error) => {
      assert.equal(/** @type {grpc.ServiceError} */ (error).code, grpc.status.FAILED_PRECONDITION);
      return true;
    });
  });
});
