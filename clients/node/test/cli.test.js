// follow.js as a person runs it: a child process printing JSON lines.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { startFakeService } from '../testing/fake-service.js';
import { runFollow } from '../testing/helpers.js';

/** @type {Awaited<ReturnType<typeof startFakeService>>} */
let fake;

before(async () => {
  fake = await startFakeService();
});

after(async () => {
  await fake.close();
});

describe('follow.js', () => {
  it('prints a finished turn as JSON lines and exits 0', async () => {
    fake.create('cli-done');
    fake.append('cli-done', 'final', { text: 'hi' });
    fake.finish('cli-done', 'DONE');

    const { code, frames, stderr } = await runFollow(['--address', fake.address, 'cli-done']);
    const lines = frames();

    assert.equal(code, 0, stderr);
    assert.deepEqual(lines[0], {
      frame: 'status',
      turn_id: 'cli-done',
      state: 'DONE',
      attempts: 0,
      last_seq: 2,
      error: '',
    });
    assert.deepEqual(
      lines.slice(1).map(({ frame, seq, type, data }) => ({ frame, seq, type, data })),
      [
        { frame: 'event', seq: 1, type: 'final', data: { text: 'hi' } },
        { frame: 'event', seq: 2, type: 'turn.done', data: {} },
      ],
    );
  });

  it('takes the address from TURNKEEPER_ADDRESS and honours --after-seq', async () => {
    fake.create('cli-after');
    fake.append('cli-after', 'token', { text: 'a' });
    fake.append('cli-after', 'token', { text: 'b' });
    fake.finish('cli-after', 'DONE');

    const { code, frames } = await runFollow(['--after-seq', '2', 'cli-after'], { env: { TURNKEEPER_ADDRESS: fake.address } });

    assert.equal(code, 0);
    assert.deepEqual(
      frames().map((line) => line.frame + (line.seq ?? '')),
      ['status', 'event3'],
    );
  });

  it('exits 3 for a turn the service never saw', async () => {
    const { code, frames, stderr } = await runFollow(['--address', fake.address, 'cli-nobody']);
    const lines = frames();

    assert.equal(code, 3);
    assert.equal(lines.length, 1);
    assert.equal(lines[0].state, 'UNKNOWN');
    assert.match(stderr, /never saw turn cli-nobody/);
  });

  it('exits 2 on bad usage', async () => {
    assert.equal((await runFollow([])).code, 2);
    assert.equal((await runFollow(['--after-seq', 'x', 't'])).code, 2);
    const help = await runFollow(['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^usage: follow\.js/);
  });

  it('exits 1 when the service refuses the request', async () => {
    fake.create('cli-refused');
    fake.watchNotFound.add('cli-refused');

    const { code, stderr } = await runFollow(['--address', fake.address, 'cli-refused']);

    assert.equal(code, 1);
    assert.match(stderr, /no turn cli-refused \(gRPC status 5\)/);
  });
});
