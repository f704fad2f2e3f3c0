// Conversions between JSON-like JavaScript values and the protobuf well-known types
// the contract uses (google.protobuf.Value, google.protobuf.Timestamp), in the shape
// that src/proto.js's LOADER_OPTIONS give them.

/** @typedef {import('../generated/google/protobuf/Value').Value} Value */
/** @typedef {import('../generated/google/protobuf/Value').Value__Output} ValueOutput */
/** @typedef {import('../generated/google/protobuf/Timestamp').Timestamp__Output} TimestampOutput */
/**
 * @typedef {null | boolean | number | string | JsonArray | JsonObject} JsonValue
 * @typedef {{ [key: string]: JsonValue }} JsonObject
 * @typedef {Array<JsonValue>} JsonArray
 */

/**
 * A JSON value as a google.protobuf.Value message.
 *
 * @param {unknown} value
 * @returns {Value}
 */
export function toValue(value) {
  if (value === null || value === undefined) {
    return { nullValue: 'NULL_VALUE' };
  }
  if (typeof value === 'boolean') {
    return { boolValue: value };
  }
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) {
      throw new TypeError(`not a JSON number: ${value}`);
    }
    return { numberValue: value };
  }
  if (typeof value === 'string') {
    return { stringValue: value };
  }
  if (Array.isArray(value)) {
    return { listValue: { values: value.map(toValue) } };
  }
  if (typeof value === 'object') {
    /** @type {{ [key: string]: Value }} */
    const fields = {};
    for (const [key, item] of Object.entries(value)) {
      fields[key] = toValue(item);
    }
    return { structValue: { fields } };
  }
  throw new TypeError(`not a JSON value: ${typeof value}`);
}

/**
 * A google.protobuf.Value message as a JSON value. An unset Value is null.
 *
 * @param {ValueOutput | null | undefined} message
 * @returns {JsonValue}
 */
export function fromValue(message) {
  if (!message) {
    return null;
  }
  switch (message.kind) {
    case 'boolValue':
      return Boolean(message.boolValue);
    case 'numberValue':
      return Number(message.numberValue);
    case 'stringValue':
      return message.stringValue ?? '';
    case 'listValue':
      return (message.listValue?.values ?? []).map(fromValue);
    case 'structValue': {
      /** @type {{ [key: string]: JsonValue }} */
      const object = {};
      for (const [key, item] of Object.entries(message.structValue?.fields ?? {})) {
        object[key] = fromValue(item);
      }
      return object;
    }
    default:
      return null;
  }
}

/**
 * A google.protobuf.Timestamp as RFC 3339 text in UTC, or null when unset.
 * Millisecond precision: what a JavaScript Date holds.
 *
 * @param {TimestampOutput | null | undefined} timestamp
 * @returns {string | null}
 */
export function timestampToIso(timestamp) {
  if (!timestamp) {
    return null;
  }
  const millis = Number(timestamp.seconds) * 1000 + Math.floor(Number(timestamp.nanos) / 1e6);
  return new Date(millis).toISOString();
}

/**
 * Event data as stored (JSON text) made a JSON value; text that is not JSON is
 * kept as a string rather than dropped.
 *
 * @param {string} text
 * @returns {JsonValue}
 */
export function parseDataJson(text) {
  if (text === '') {
    return null;
  }
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
