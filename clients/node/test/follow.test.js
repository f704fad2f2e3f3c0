// The follower against an in-memory TurnService (testing/fake-service.js).

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import * as grpc from '@grpc/grpc-js';

import { TurnkeeperClient } from '../src/client.js';
import { followTurn } from '../src/follow.js';
import { startFakeService } from '../testing/fake-service.js';
import { until } from '../testing/helpers.js';

/** @type {Awaited<ReturnType<typeof startFakeService>>} */
let fake;
/** @type {TurnkeeperClient} */
let client;
let counter = 0;
const newTurnId = () => `turn-${++counter}`;

before(async () => {
  fake = await startFakeService();
  client = new TurnkeeperClient(fake.address);
});

after(async () => {
  client.close();
  await fake.close();
});

/**
 * Follow a turn, collecting frames.
 *
 * @param {string} turnId
 * @param {Partial<import('../src/follow.js').FollowOptions>} [options]
 */
function follow(turnId, options = {}) {
  /** @type {import('../src/follow.js').Frame[]} */
  const frames = [];
  const done = followTurn(client, turnId, {
    retryMinMs: 20,
    retryMaxMs: 50,
    deadlineMs: 10_000,
    ...options,
    onFrame: (frame) => frames.push(frame),
  });
  return { frames, done };
}

/** The frames, reduced to what a test compares. */
const brief = (/** @type {import('../src/follow.js').Frame[]} */ frames) =>
  frames.map((frame) => {
    switch (frame.frame) {
      case 'status':
        return `status ${frame.state} a${frame.attempts} s${frame.last_seq}`;
      case 'event':
        return `event ${frame.seq} a${frame.attempt} ${frame.type}`;
      default:
        return `reset ${frame.seq} a${frame.attempt}${frame.local ? ' local' : ''}`;
    }
  });

describe('followTurn', () => {
  it('replays a finished turn and ends after the terminal event', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'token', { text: 'hel' });
    fake.append(id, 'token', { text: 'lo' });
    fake.finish(id, 'DONE');

    const { frames, done } = follow(id);
    const result = await done;

    assert.equal(result.outcome, 'terminal');
    assert.equal(result.state, 'DONE');
    assert.deepEqual(brief(frames), [
      'status DONE a0 s3',
      'event 1 a0 token',
      'event 2 a0 token',
      'event 3 a0 turn.done',
    ]);
    const first = /** @type {import('../src/follow.js').EventFrame} */ (frames[1]);
    assert.deepEqual(first.data, { text: 'hel' });
    assert.equal(first.turn_id, id);
    assert.match(String(first.created_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it('follows live events until the terminal event', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'step', { node: 'plan' });

    const { frames, done } = follow(id);
    await until(() => frames.length === 2 && fake.watcherCount(id) === 1);
    fake.append(id, 'tool_call_start', { id: 'c1' });
    fake.append(id, 'tool_call_end', { id: 'c1' });
    fake.finish(id, 'FAILED', 'boom');
    const result = await done;

    assert.equal(result.outcome, 'terminal');
    assert.equal(result.state, 'FAILED');
    assert.deepEqual(brief(frames), [
      'status RUNNING a0 s1',
      'event 1 a0 step',
      'event 2 a0 tool_call_start',
      'event 3 a0 tool_call_end',
      'event 4 a0 turn.failed',
    ]);
  });

  it('passes on the reset frame and the replay that follows it', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'step', { node: 'a' });
    fake.append(id, 'tool_call_start', { id: 'c1' });
    fake.append(id, 'tool_call_end', { id: 'c1' });

    const { frames, done } = follow(id);
    await until(() => frames.length === 4 && fake.watcherCount(id) === 1);
    fake.rewind(id, 1); // the latest checkpoint's boundary is seq 1
    fake.append(id, 'tool_call_start', { id: 'c1' });
    fake.append(id, 'tool_call_end', { id: 'c1' });
    fake.finish(id, 'DONE');
    const result = await done;

    assert.equal(result.outcome, 'terminal');
    assert.deepEqual(brief(frames), [
      'status RUNNING a0 s3',
      'event 1 a0 step',
      'event 2 a0 tool_call_start',
      'event 3 a0 tool_call_end',
      'reset 1 a1',
      'event 1 a0 step',
      'event 2 a1 tool_call_start',
      'event 3 a1 tool_call_end',
      'event 4 a1 turn.done',
    ]);
    assert.equal(/** @type {import('../src/follow.js').ResetFrame} */ (frames[4]).checkpoint_id, 'cp-1');
  });

  it('re-opens a dropped stream after the last seq it showed', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'token', { text: 'a' });
    fake.append(id, 'token', { text: 'b' });

    const { frames, done } = follow(id);
    await until(() => frames.length === 3 && fake.watcherCount(id) === 1);
    fake.dropWatchers(id);
    fake.append(id, 'token', { text: 'c' }); // while no stream is open
    await until(() => fake.watcherCount(id) === 1);
    fake.finish(id, 'DONE');
    const result = await done;

    assert.equal(result.outcome, 'terminal');
    assert.deepEqual(
      fake.watchRequests.filter((request) => request.turnId === id).map((request) => request.afterSeq),
      [0, 2],
    );
    assert.deepEqual(brief(frames), [
      'status RUNNING a0 s2',
      'event 1 a0 token',
      'event 2 a0 token',
      'status RUNNING a0 s3',
      'event 3 a0 token',
      'event 4 a0 turn.done',
    ]);
  });

  it('resets by itself when the turn was rewound while the stream was down', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'tool_call_start', { id: 'c1' });
    fake.append(id, 'tool_call_end', { id: 'c1' });

    const { frames, done } = follow(id);
    await until(() => frames.length === 3 && fake.watcherCount(id) === 1);
    // In one tick, so the rewind is done before the follower asks TurnStatus.
    fake.dropWatchers(id);
    fake.rewind(id, 0);
    fake.append(id, 'tool_call_start', { id: 'c1' });
    await until(() => fake.watcherCount(id) === 1);
    fake.finish(id, 'DONE');
    const result = await done;

    assert.equal(result.outcome, 'terminal');
    assert.deepEqual(brief(frames), [
      'status RUNNING a0 s2',
      'event 1 a0 tool_call_start',
      'event 2 a0 tool_call_end',
      'status RUNNING a1 s1',
      'reset 1 a1 local',
      'event 1 a1 tool_call_start',
      'event 2 a1 turn.done',
    ]);
  });

  it('reports a turn the service never saw as unknown', async () => {
    const { frames, done } = follow('never-journaled');
    const result = await done;

    assert.equal(result.outcome, 'unknown');
    assert.deepEqual(brief(frames), ['status UNKNOWN a0 s0']);
  });

  it('asks TurnStatus on an idle gap and concludes when the turn is over', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.append(id, 'step', { node: 'a' });

    const { frames, done } = follow(id, { idleMs: 50 });
    await until(() => frames.length === 2);
    fake.setState(id, 'DONE'); // the terminal event never comes
    const result = await done;

    assert.equal(result.outcome, 'concluded');
    assert.equal(result.state, 'DONE');
    assert.equal(frames.at(-1)?.frame, 'status');
  });

  it('keeps waiting on a parked turn until the deadline', async () => {
    const id = newTurnId();
    fake.create(id, 'PARKED');
    fake.append(id, 'interrupt', { question: 'approve?' });

    const started = Date.now();
    const { frames, done } = follow(id, { idleMs: 40, deadlineMs: 300 });
    const result = await done;

    assert.equal(result.outcome, 'deadline');
    assert.equal(result.state, 'PARKED');
    assert.ok(Date.now() - started >= 290, 'ended before the deadline');
    assert.ok(frames.filter((frame) => frame.frame === 'status').length >= 3, 'no idle look-ups');
  });

  it('stops when the signal aborts', async () => {
    const id = newTurnId();
    fake.create(id);
    const controller = new AbortController();

    const { done } = follow(id, { signal: controller.signal });
    await until(() => fake.watcherCount(id) === 1);
    controller.abort();
    const result = await done;

    assert.equal(result.outcome, 'aborted');
  });

  it('rejects with an error a retry cannot fix', async () => {
    const id = newTurnId();
    fake.create(id);
    fake.watchNotFound.add(id);

    const { done } = follow(id);

    await assert.rejects(done, (/** @type {any} */ error) => error.code === grpc.status.NOT_FOUND);
  });
});
