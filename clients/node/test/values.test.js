import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { fromValue, parseDataJson, timestampToIso, toValue } from '../src/values.js';

describe('google.protobuf.Value', () => {
  it('round-trips JSON values', () => {
    const value = { approved: true, n: 3.5, tags: ['a', null, { deep: 'x' }], none: null, s: '' };
    assert.deepEqual(fromValue(/** @type {any} */ (withKinds(toValue(value)))), value);
  });

  it('refuses what JSON cannot carry', () => {
    assert.throws(() => toValue(Number.NaN), TypeError);
    assert.throws(() => toValue(() => 1), TypeError);
  });

  it('reads an unset Value as null', () => {
    assert.equal(fromValue(null), null);
    assert.equal(fromValue({}), null);
  });
});

describe('event data and timestamps', () => {
  it('parses JSON text and keeps anything else as text', () => {
    assert.deepEqual(parseDataJson('{"a":1}'), { a: 1 });
    assert.equal(parseDataJson(''), null);
    assert.equal(parseDataJson('not json'), 'not json');
  });

  it('prints timestamps as RFC 3339 in UTC', () => {
    assert.equal(timestampToIso({ seconds: 1_700_000_000, nanos: 123_456_789 }), '2023-11-14T22:13:20.123Z');
    assert.equal(timestampToIso(null), null);
  });
});

/**
 * Add the `kind` oneof field that grpc-js sets on a decoded Value, so a Value built
 * by toValue reads like one that came off the wire.
 *
 * @param {any} value
 * @returns {any}
 */
function withKinds(value) {
  const kind = Object.keys(value)[0];
  const inner = value[kind];
  if (kind === 'listValue') {
    return { kind, listValue: { values: inner.values.map(withKinds) } };
  }
  if (kind === 'structValue') {
    const fields = Object.fromEntries(Object.entries(inner.fields).map(([k, v]) => [k, withKinds(v)]));
    return { kind, structValue: { fields } };
  }
  return { kind, [kind]: inner };
}
