// LangGraph.js's own checkpointer suite (@langchain/langgraph-checkpoint-validation)
// against TurnkeeperSaver talking to a real turnkeeper service.
//
// Its 1.1.1 CLI (validate-checkpointer) rejects every initializer, so the suite's
// validate() is called from here; vitest runs with --globals because the suite
// uses describe/it/expect as globals. tests/node/test_node_client.py starts the
// service and sets TURNKEEPER_ADDRESS; without it there is no service to test against.

import { validate } from "@langchain/langgraph-checkpoint-validation";

import { TurnkeeperClient } from "../src/client.js";
import { TurnkeeperSaver } from "../src/saver.js";

const address = process.env.TURNKEEPER_ADDRESS;

/** Every thread the service holds, found by listing all checkpoints. */
async function wipe(client: TurnkeeperClient): Promise<void> {
  const threads = new Set<string>();
  for await (const response of client.checkpoints.listCheckpoints({}, { timeoutMs: 0 })) {
    threads.add(response.checkpoint?.ref?.threadId ?? "");
  }
  for (const threadId of threads) {
    await client.checkpoints.deleteThread({ threadId });
  }
}

if (address) {
  const client = new TurnkeeperClient(address);
  validate<TurnkeeperSaver>({
    checkpointerName: "TurnkeeperSaver",
    async createCheckpointer() {
      await wipe(client);
      return new TurnkeeperSaver({ client });
    },
    async destroyCheckpointer() {
      await wipe(client);
    },
    afterAll() {
      client.close();
    },
  });
} else {
  describe.skip("TurnkeeperSaver against a real service (TURNKEEPER_ADDRESS is not set)", () => {
    it("needs a running turnkeeper service", () => undefined);
  });
}
