// JSON values and the protobuf well-known types the contract uses.

import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { type Timestamp, type Value, ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";

export type { JsonValue };

/** A JSON value as a google.protobuf.Value (undefined becomes null). */
export function toValue(value: unknown): Value {
  if (value === undefined) {
    return create(ValueSchema, { kind: { case: "nullValue", value: 0 } });
  }
  return fromJson(ValueSchema, value as JsonValue);
}

/** A google.protobuf.Value as a JSON value; an unset one is null. */
export function fromValue(value: Value | undefined): JsonValue {
  return value === undefined ? null : toJson(ValueSchema, value);
}

/** An event's data_json, parsed; text that is not JSON is kept as a string. */
export function parseDataJson(text: string): JsonValue {
  if (!text) {
    return null;
  }
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return text;
  }
}

export function timestampToIso(timestamp: Timestamp | undefined): string | null {
  return timestamp === undefined ? null : timestampDate(timestamp).toISOString();
}

/** JSON text for any value LangGraph hands over: what JSON cannot say becomes a string. */
export function toJsonText(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, item: unknown) => {
    if (typeof item === "bigint") {
      return item.toString();
    }
    if (item instanceof Error) {
      return `${item.name}: ${item.message}`;
    }
    if (item instanceof Uint8Array) {
      return Buffer.from(item).toString("base64");
    }
    return item;
  });
}

/** A value made plain JSON (class instances lose their methods, bigints become strings). */
export function toJsonable(value: unknown): JsonValue {
  return JSON.parse(toJsonText(value)) as JsonValue;
}
