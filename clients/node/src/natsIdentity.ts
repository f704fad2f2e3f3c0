// The NATS user a turnkeeper token stands for on the service's bundled nats-server:
// turnkeeper.nats_identity, for TypeScript (docs/operators.md, "The NATS side").
//
// The service gives every token of its tokens file a NATS user allowed only its own
// subjects; name and password derive from the token, so a runner holding its
// TURNKEEPER_TOKEN connects as itself with nothing else to configure:
//
//   key      = HMAC-SHA256(key=SHA-256(token), msg="turnkeeper caller assertion v1")
//   user     = "tk-" + keyId(key)
//   password = base64url(HMAC-SHA256(key, "turnkeeper nats password v1"))
//
// Replies come back on the user's own inbox prefix, `_INBOX_<key id>`.

import { createHmac } from "node:crypto";

import { keyId, keyOfToken } from "./callerAssertion.js";

export interface NatsIdentity {
  user: string;
  pass: string;
  inboxPrefix: string;
}

export function natsIdentityOf(token: string): NatsIdentity {
  const key = keyOfToken(token);
  const kid = keyId(key);
  const pass = createHmac("sha256", key).update("turnkeeper nats password v1").digest("base64url");
  return { user: `tk-${kid}`, pass, inboxPrefix: `_INBOX_${kid}` };
}
