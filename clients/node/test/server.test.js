// Against the real turnkeeper service at TURNKEEPER_ADDRESS (tests/test_node_client.py
// starts one and runs `npm test` with it set). Skipped when the variable is unset.
//
// TURNKEEPER_TEST_TURN_ID, when set, names a finished turn the caller journaled;
// otherwise this file journals one of its own.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';

import { TurnkeeperClient } from '../src/client.js';
import { toValue } from '../src/values.js';
import { spawnFollow, until } from '../testing/helpers.js';

const address = process.env.TURNKEEPER_ADDRESS ?? '';
const skip = address ? false : 'TURNKEEPER_ADDRESS is not set (tests/test_node_client.py sets it)';

/** @type {TurnkeeperClient} */
let client;

/**
 * Journal a RUNNING turn with some events, as an executor would.
 *
 * @param {string} label
 * @param {{ type: string, data: unknown }[]} events
 */
async function startTurn(label, events) {
  const run = randomUUID().slice(0, 8);
  const turn = {
    turnId: `node-${label}-${run}`,
    threadId: `node-thread-${label}-${run}`,
    agent: 'node-client-test',
    replica: `node-replica-${run}`,
    incarnation: `node-incarnation-${run}-1`,
  };
  await client.startTurn({ ...turn, input: toValue({ messages: [{ role: 'user', content: label }] }) });
  if (events.length > 0) {
    await client.appendEvents({
      turnId: turn.turnId,
      attempt: 0,
      events: events.map(({ type, data }, index) => ({ seq: index + 1, type, dataJson: JSON.stringify(data) })),
    });
  }
  return turn;
}

/** Frames reduced to what the tests compare. */
const brief = (/** @type {any[]} */ frames) =>
  frames.map((frame) =>
    frame.frame === 'status'
      ? `status ${frame.state}`
      : frame.frame === 'reset'
        ? `reset ${frame.seq} a${frame.attempt}`
        : `event ${frame.seq} a${frame.attempt} ${frame.type}`,
  );

describe('follow.js against the real service', { skip }, () => {
  before(() => {
    client = new TurnkeeperClient(address);
  });

  after(() => {
    client?.close();
  });

  it('replays a finished turn exactly as the service retained it', async () => {
    let turnId = process.env.TURNKEEPER_TEST_TURN_ID;
    if (!turnId) {
      const turn = await startTurn('finished', [
        { type: 'token', data: { text: 'hello' } },
        { type: 'final', data: { text: 'hello' } },
      ]);
      await client.finishTurn({ turnId: turn.turnId, attempt: 0, outcome: 'OUTCOME_DONE' });
      turnId = turn.turnId;
    }
    const retained = await client.listEvents({ turnId, afterSeq: 0, pageSize: 0 });

    const follow = spawnFollow(['--address', address, turnId]);
    const code = await follow.exited;

    assert.equal(code, 0, follow.stderr());
    const [status, ...events] = follow.frames();
    assert.equal(status.frame, 'status');
    assert.ok(['DONE', 'FAILED'].includes(status.state), `state ${status.state}`);
    assert.equal(status.last_seq, retained.lastSeq);
    assert.deepEqual(
      events.map(({ frame, seq, attempt, type, data }) => ({ frame, seq, attempt, type, data })),
      retained.events.map((event) => ({
        frame: 'event',
        seq: event.seq,
        attempt: event.attempt,
        type: event.type,
        data: JSON.parse(event.dataJson || 'null'),
      })),
    );
    assert.ok(['turn.done', 'turn.failed'].includes(events.at(-1).type), 'no terminal event last');
  });

  it('follows a live turn through a re-drive: reset frame, replay, terminal event', async () => {
    const turn = await startTurn('redriven', [
      { type: 'step', data: { node: 'plan' } },
      { type: 'tool_call_start', data: { id: 'call-1', name: 'lookup' } },
    ]);

    const follow = spawnFollow(['--address', address, turn.turnId]);
    await until(() => follow.frames().length === 3, 10_000);

    // The agent process restarted: a new incarnation of the same replica re-drives
    // its orphaned turns. No checkpoint was written, so the rewind is to seq 0.
    const redriven = await client.redrive({
      agent: turn.agent,
      replica: turn.replica,
      incarnation: `${turn.incarnation}-restarted`,
    });
    const mine = redriven.turns.find((r) => r.turn?.turnId === turn.turnId);
    assert.ok(mine, 'the turn was not re-driven');
    assert.equal(mine.turn?.attempts, 1);
    assert.equal(mine.rewindSeq, 0);
    await until(() => follow.frames().some((frame) => frame.frame === 'reset'), 10_000);

    await client.appendEvents({
      turnId: turn.turnId,
      attempt: 1,
      events: [
        { seq: 1, type: 'step', dataJson: JSON.stringify({ node: 'plan' }) },
        { seq: 2, type: 'tool_call_start', dataJson: JSON.stringify({ id: 'call-1', name: 'lookup' }) },
        { seq: 3, type: 'tool_call_end', dataJson: JSON.stringify({ id: 'call-1', result: 42 }) },
      ],
    });
    await client.finishTurn({ turnId: turn.turnId, attempt: 1, outcome: 'OUTCOME_DONE' });
    const code = await follow.exited;

    assert.equal(code, 0, follow.stderr());
    assert.deepEqual(brief(follow.frames()), [
      'status RUNNING',
      'event 1 a0 step',
      'event 2 a0 tool_call_start',
      'reset 0 a1',
      'event 1 a1 step',
      'event 2 a1 tool_call_start',
      'event 3 a1 tool_call_end',
      'event 4 a1 turn.done',
    ]);
  });

  it('exits 3 for a turn id the journal never saw (TurnStatus UNKNOWN)', async () => {
    const turnId = `node-never-${randomUUID()}`;
    const status = await client.turnStatus({ turnId });
    assert.equal(status.state, 'TURN_STATE_UNKNOWN');

    const follow = spawnFollow(['--address', address, turnId]);
    const code = await follow.exited;

    assert.equal(code, 3, follow.stderr());
    assert.deepEqual(brief(follow.frames()), ['status UNKNOWN']);
  });
});
