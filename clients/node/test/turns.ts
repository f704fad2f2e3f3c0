// What the tests against the real service share: a turn of their own, started as an
// executor of a test agent would start it.

import { randomUUID } from "node:crypto";

import type { TurnkeeperClient } from "../src/client.js";
import { toValue } from "../src/values.js";

/** Start a RUNNING turn with ids no other test uses; returns its turn id. */
export async function startOwnTurn(client: TurnkeeperClient, name: string, input: unknown): Promise<string> {
  const run = randomUUID().slice(0, 8);
  const turnId = `node-${name}-${run}`;
  await client.turns.startTurn({
    turnId,
    threadId: `node-${name}-thread-${run}`,
    agent: "node-client-test",
    replica: `node-replica-${run}`,
    incarnation: `node-incarnation-${run}`,
    input: toValue(input),
  });
  return turnId;
}
