// CancelTurn against the real turnkeeper service at TURNKEEPER_ADDRESS
// (tests/node/test_node_client.py runs `npm test` with it set): the turn ends
// CANCELLED once, the follower ends on turn.cancelled, a second cancel is refused.

import { Code, ConnectError } from "@connectrpc/connect";

import { TurnkeeperClient } from "../src/client.js";
import { type Frame, followTurn } from "../src/follow.js";
import { TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import { startOwnTurn } from "./turns.js";

const address = process.env.TURNKEEPER_ADDRESS;

describe.skipIf(!address)("cancelTurn against the real service (needs TURNKEEPER_ADDRESS)", () => {
  it("cancels a running turn once; the follower ends on turn.cancelled", async () => {
    const client = new TurnkeeperClient(address);
    try {
      const turnId = await startOwnTurn(client, "cancel", { q: "stop me" });
      const frames: Frame[] = [];
      let sawStatus!: () => void;
      const statusShown = new Promise<void>((resolve) => {
        sawStatus = resolve;
      });
      const following = followTurn(client, turnId, {
        onFrame: (frame) => {
          frames.push(frame);
          sawStatus();
        },
      });
      await statusShown;

      const response = await client.turns.cancelTurn({ turnId, reason: "from node" });
      expect(response.turn?.state).toBe(TurnState.CANCELLED);
      expect(response.turn?.endReason).toBe("cancelled");
      const followed = await following;
      expect(followed).toMatchObject({ outcome: "terminal", state: "CANCELLED" });
      expect(frames.map((frame) => (frame.frame === "event" ? frame.type : frame.frame === "status" ? frame.state : "reset"))).toEqual([
        "RUNNING",
        "turn.cancelled",
      ]);

      const again = await client.turns.cancelTurn({ turnId }).catch((error: unknown) => error);
      expect(again).toBeInstanceOf(ConnectError);
      expect((again as ConnectError).code).toBe(Code.FailedPrecondition);
    } finally {
      client.close();
    }
  });
});
