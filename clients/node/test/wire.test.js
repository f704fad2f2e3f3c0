// The status words of the NATS JSON-RPC wire, as a panel written to the contract reads them.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { LIVE_STATES, stateFromWire } from '../src/follow.js';

describe('stateFromWire', () => {
  it("reads the contract's lower-case words as state names", () => {
    assert.deepEqual(
      ['running', 'parked', 'done', 'failed', 'cancelled', 'queued', 'unknown'].map(
        stateFromWire,
      ),
      ['RUNNING', 'PARKED', 'DONE', 'FAILED', 'CANCELLED', 'QUEUED', 'UNKNOWN'],
    );
  });

  it('keeps a running, parked or queued turn live', () => {
    assert.ok(LIVE_STATES.includes(stateFromWire('running')));
    assert.ok(LIVE_STATES.includes(stateFromWire('parked')));
    assert.ok(LIVE_STATES.includes(stateFromWire('queued')));
    assert.ok(!LIVE_STATES.includes(stateFromWire('done')));
    assert.ok(!LIVE_STATES.includes(stateFromWire('cancelled')));
  });

  it('reads anything else as UNKNOWN', () => {
    assert.equal(stateFromWire('in_progress'), 'UNKNOWN');
    assert.equal(stateFromWire(undefined), 'UNKNOWN');
  });
});
