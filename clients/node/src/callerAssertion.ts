// Caller assertions: who sent a JSON-RPC request to an agent, said by the service.
// The TypeScript twin of the Python `turnkeeper.caller_assertion`: the same format,
// keys and checks, so a value one signs the other verifies.
//
// A caller's bearer token never leaves the service. When the service has tokens, a
// request on NATS to an agent carries instead, in the header Turnkeeper-Assertion, a
// statement the service signed for that one request: the agent it is for, the
// method, the request's id (the JSON-RPC envelope's `id`), who the caller is (token
// name and role) and which of the agent's methods that role may call, and when it
// expires (LIFETIME after issue). The service issues one when it relays a request
// (POST /v1/agents/{agent}/rpc) and on request (OperationsService/IssueAssertion).
//
// It is signed with HMAC-SHA256 under a key per token of the agent:
//
//     key = HMAC-SHA256(key = SHA-256(agent token), msg = "turnkeeper caller assertion v1")
//
// so a runner verifies with its own token and nothing else. The header value is
// `<payload>.<kid>=<mac>[,<kid>=<mac>...]`: the payload is base64url (no padding)
// of the JSON object {v, aud, method, rid, name, role, agent, methods, exp} (keys
// sorted, no spaces), one signature per token of the agent, each named by a key id
// derived from its key (which says nothing of the token).

import { createHash, createHmac, timingSafeEqual } from "node:crypto";

/** The NATS header that carries the assertion. */
export const HEADER = "Turnkeeper-Assertion";
/** gRPC metadata under which a runner passes its caller's assertion on to the
 * service (which then applies the caller's rights as well as the agent's). */
export const METADATA = "turnkeeper-caller-assertion";
/** Seconds an assertion is good for after the service issued it. */
export const LIFETIME = 60;
/** Seconds the clocks of the service and an agent's host may disagree by. */
export const SKEW = 30;
/** The longest header value taken. */
export const MAX_LENGTH = 8192;
const KEY_LABEL = "turnkeeper caller assertion v1";
const KID_LABEL = "turnkeeper assertion key id v1";

/** The assertion is missing, malformed, not for this request, expired, used
 * already, or not signed with this agent's key. The message says which. */
export class AssertionRefused extends Error {
  override name = "AssertionRefused";
}

export interface CallerAssertion {
  agent: string;
  method: string;
  requestId: string;
  /** The caller's token name and role (agent, panel, operator, admin). */
  name: string;
  role: string;
  /** For an agent token, the agent it acts for; "" otherwise. */
  callerAgent: string;
  /** The agent methods the caller's role may call. */
  methods: readonly string[];
  /** Seconds since the epoch. */
  expiresAt: number;
}

/** The caller as the audit log names it: "alice (operator)". */
export function who(assertion: CallerAssertion): string {
  const role = assertion.role === "agent" ? `agent:${assertion.callerAgent}` : assertion.role;
  return `${assertion.name} (${role})`;
}

/** SHA-256 of a token, hex: what the tokens file holds. */
export function tokenDigest(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** The signing key of the token whose SHA-256 (hex) is `digest`. */
export function keyOf(digest: string): Buffer {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(digest)) {
    throw new TypeError("digest must be hex");
  }
  return createHmac("sha256", Buffer.from(digest, "hex")).update(KEY_LABEL).digest();
}

/** The signing key of `token` itself (keyOf(tokenDigest(token))). */
export const keyOfToken = (token: string): Buffer => keyOf(tokenDigest(token));

export function keyId(key: Uint8Array): string {
  return b64(createHmac("sha256", key).update(KID_LABEL).digest().subarray(0, 9));
}

/** The header value: the payload, then a signature per key. Byte for byte what the
 * Python `sign` makes of the same assertion. */
export function sign(assertion: CallerAssertion, keys: Iterable<Uint8Array>): string {
  // Python's json.dumps(..., separators=(",", ":"), sort_keys=True), written out.
  const json =
    `{"agent":${pyString(assertion.callerAgent)},"aud":${pyString(assertion.agent)},` +
    `"exp":${pyFloat(round3(assertion.expiresAt))},"method":${pyString(assertion.method)},` +
    `"methods":[${assertion.methods.map(pyString).join(",")}],"name":${pyString(assertion.name)},` +
    `"rid":${pyString(assertion.requestId)},"role":${pyString(assertion.role)},"v":1}`;
  const payload = b64(Buffer.from(json, "utf8"));
  const signatures = [...keys].map((key) => `${keyId(key)}=${b64(mac(key, payload))}`);
  if (signatures.length === 0) {
    throw new TypeError(`no key to sign for agent ${pyRepr(assertion.agent)}`);
  }
  return `${payload}.${signatures.join(",")}`;
}

export interface VerifyOptions {
  agent: string;
  method?: string;
  requestId?: string;
  /** Seconds since the epoch; now by default. */
  now?: number;
}

/** The assertion `value` states, once it is signed with one of `keys`, names
 * `agent` (and `method` and `requestId` where given), and has not expired. */
export function verify(value: string, keys: Iterable<Uint8Array>, options: VerifyOptions): CallerAssertion {
  const { agent, method, requestId } = options;
  if (!value) {
    throw new AssertionRefused(`no ${HEADER} header: the service signs one for every request`);
  }
  if (value.length > MAX_LENGTH) {
    throw new AssertionRefused(`the ${HEADER} header is over ${MAX_LENGTH} characters`);
  }
  const dot = value.indexOf(".");
  const payload = dot < 0 ? value : value.slice(0, dot);
  const signed = dot < 0 ? "" : value.slice(dot + 1);
  const given = new Map<string, string>();
  for (const part of signed.split(",")) {
    const eq = part.indexOf("=");
    given.set(eq < 0 ? part : part.slice(0, eq), eq < 0 ? "" : part.slice(eq + 1));
  }
  let signedHere = false;
  for (const key of keys) {
    const mac_ = given.get(keyId(key));
    if (mac_ !== undefined && sameText(mac_, b64(mac(key, payload)))) {
      signedHere = true;
      break;
    }
  }
  if (!signedHere) {
    throw new AssertionRefused(
      `the ${HEADER} is not signed for agent ${pyRepr(agent)} with this replica's token: ` +
        "it was not issued by the service this agent's token belongs to, or the " +
        "token was rotated out of its tokens file",
    );
  }
  const found = parsePayload(payload);
  if (found.agent !== agent) {
    throw new AssertionRefused(`the ${HEADER} is for agent ${pyRepr(found.agent)}, not ${pyRepr(agent)}`);
  }
  if (method !== undefined && found.method !== method) {
    throw new AssertionRefused(`the ${HEADER} is for ${found.method}, not ${method}`);
  }
  if (requestId !== undefined && found.requestId !== requestId) {
    throw new AssertionRefused(
      `the ${HEADER} is for request ${pyRepr(found.requestId)}, not ${pyRepr(requestId)}`,
    );
  }
  const now = options.now ?? Date.now() / 1000;
  if (found.expiresAt + SKEW < now) {
    throw new AssertionRefused(
      `the ${HEADER} expired ${pyWhole(now - found.expiresAt)} s ago: ask the service for ` +
        "a new one (each is good for one request, for a minute)",
    );
  }
  return found;
}

/** Request ids already taken, until their assertions expire: a copied assertion is
 * refused the second time. Bounded: past `capacity` the oldest go first (an
 * assertion that old has expired at the rate the service could issue them). */
export class ReplayGuard {
  readonly #seen = new Map<string, number>();

  constructor(readonly capacity = 65_536) {}

  get size(): number {
    return this.#seen.size;
  }

  take(assertion: CallerAssertion, now: number = Date.now() / 1000): void {
    // Insertion order is issue order, near enough: the oldest go first.
    for (const [key, expires] of this.#seen) {
      if (expires + SKEW >= now && this.#seen.size < this.capacity) {
        break;
      }
      this.#seen.delete(key);
    }
    const key = JSON.stringify([assertion.method, assertion.requestId]);
    if (this.#seen.has(key)) {
      throw new AssertionRefused(
        `request ${pyRepr(assertion.requestId)} was already taken with this assertion; ` +
          "a request is answered once: send a new request with a new id",
      );
    }
    this.#seen.set(key, assertion.expiresAt);
  }
}

/** A JSON-RPC envelope's id as the request id an assertion names: what Python's
 * str() makes of it (the Python bridge compares `str(request.id)`). */
export function requestIdText(id: unknown): string {
  if (typeof id === "string") {
    return id;
  }
  if (id === null || id === undefined) {
    return "None";
  }
  if (typeof id === "boolean") {
    return id ? "True" : "False";
  }
  if (typeof id === "number") {
    return String(id);
  }
  return JSON.stringify(id);
}

function parsePayload(payload: string): CallerAssertion {
  try {
    const fields: unknown = JSON.parse(unb64(payload).toString("utf8"));
    if (fields === null || typeof fields !== "object" || Array.isArray(fields)) {
      throw new Error("not a JSON object");
    }
    const f = fields as Record<string, unknown>;
    const required = (name: string): unknown => {
      if (!(name in f)) {
        throw new Error(`'${name}' is missing`);
      }
      return f[name];
    };
    const methods = required("methods");
    if (!Array.isArray(methods)) {
      throw new Error("'methods' is not a list");
    }
    const exp = required("exp");
    const expiresAt = typeof exp === "number" ? exp : typeof exp === "string" && exp.trim() ? Number(exp) : NaN;
    if (Number.isNaN(expiresAt)) {
      throw new Error("'exp' is not a number");
    }
    return {
      agent: text(required("aud")),
      method: text(required("method")),
      requestId: text(required("rid")),
      name: text(required("name")),
      role: text(required("role")),
      callerAgent: f.agent ? text(f.agent) : "",
      methods: methods.map(text),
      expiresAt,
    };
  } catch (error) {
    throw new AssertionRefused(`the ${HEADER} payload is malformed: ${(error as Error).message}`);
  }
}

const text = (value: unknown): string => (typeof value === "string" ? value : requestIdText(value));

function mac(key: Uint8Array, payload: string): Buffer {
  return createHmac("sha256", key).update(payload, "utf8").digest();
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && timingSafeEqual(x, y);
}

function b64(data: Uint8Array): string {
  return Buffer.from(data).toString("base64url");
}

function unb64(value: string): Buffer {
  if (!/^[A-Za-z0-9_-]*={0,2}$/.test(value)) {
    throw new Error("not base64url");
  }
  return Buffer.from(value, "base64url");
}

/** A string as Python's json.dumps writes it (ensure_ascii: every character past
 * `~` as \uXXXX, a character beyond the BMP as its surrogate pair). */
function pyString(value: string): string {
  return JSON.stringify(value).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** A float as Python's repr writes those an assertion carries (timestamps: the
 * shortest round trip, always with a point). */
function pyFloat(value: number): string {
  if (!Number.isFinite(value)) {
    throw new TypeError(`exp must be a finite number, got ${value}`);
  }
  const shortest = String(value);
  return /[.e]/.test(shortest) ? shortest : `${shortest}.0`;
}

/** A count of seconds (positive) as Python's f"{x:.0f}" writes it: the nearest whole
 * number, an exact half to even (toFixed(0) takes the larger: 32.5 s read "33" here
 * and "32" there). */
function pyWhole(value: number): string {
  const floor = Math.floor(value);
  const fraction = value - floor; // exact for a double
  const whole = fraction > 0.5 || (fraction === 0.5 && floor % 2 !== 0) ? floor + 1 : floor;
  return String(whole);
}

/** Python's round(x, 3): the double nearest the exact value rounded to thousandths,
 * an exact tie to even. */
function round3(value: number): number {
  // toFixed rounds the exact value, a tie away from zero.
  let rounded = Number(value.toFixed(3));
  // A double is exactly halfway between thousandths only as an odd multiple of 1/16.
  const sixteenths = value * 16;
  if (Number.isInteger(sixteenths) && sixteenths % 2 !== 0) {
    const thousandths = Math.round(rounded * 1000);
    if (thousandths % 2 !== 0) {
      rounded = (thousandths - Math.sign(value)) / 1000;
    }
  }
  return rounded;
}

/** How Python's repr() quotes a string in a message ('agent'). */
function pyRepr(value: string): string {
  return value.includes("'") && !value.includes('"') ? `"${value}"` : `'${value}'`;
}
