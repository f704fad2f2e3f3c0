// followTurn when a TurnStatus call overtakes the stream, against the real turnkeeper
// service at TURNKEEPER_ADDRESS (tests/node/test_node_client.py runs `npm test` with
// it set). The stream is the real WatchTurn, slowed down: after the first event it
// holds every frame until a TurnStatus call has answered DONE, and lets them go a
// moment later, as a stream that is behind the status would. The follower must still
// show the turn's last events and end on its terminal event.

import { TurnkeeperClient } from "../src/client.js";
import { type Frame, followTurn } from "../src/follow.js";
import { Outcome, TurnState } from "../src/gen/turnkeeper/v1/turns_pb.js";
import { startOwnTurn } from "./turns.js";

const address = process.env.TURNKEEPER_ADDRESS;

// How long the held frames stay behind the DONE answer: well inside the idle gap.
const BEHIND_MS = 100;
const IDLE_MS = 400;

describe.skipIf(!address)("followTurn with a stream behind TurnStatus (needs TURNKEEPER_ADDRESS)", () => {
  it("leaves the turn's end to the open stream for one more idle gap", async () => {
    const client = new TurnkeeperClient(address);
    try {
      const turnId = await startOwnTurn(client, "behind", { q: "slow stream" });
      await client.turns.appendEvents({ turnId, attempt: 0, events: [{ seq: 1n, type: "step", dataJson: "{}" }] });

      // TurnStatus, recording each DONE answer for the held stream.
      let answeredDone!: () => void;
      const doneAnswered = new Promise<void>((resolve) => {
        answeredDone = resolve;
      });
      const turnStatus = client.turns.turnStatus.bind(client.turns);
      client.turns.turnStatus = async (...args: Parameters<typeof turnStatus>) => {
        const status = await turnStatus(...args);
        if (status.state === TurnState.DONE) {
          answeredDone();
        }
        return status;
      };
      let held = 0;
      const watchTurn = client.turns.watchTurn.bind(client.turns);
      client.turns.watchTurn = (...args: Parameters<typeof watchTurn>) =>
        (async function* behind() {
          let first = true;
          for await (const response of watchTurn(...args)) {
            if (!first) {
              held += 1;
              await doneAnswered;
              await new Promise((resolve) => setTimeout(resolve, BEHIND_MS));
            }
            first = false;
            yield response;
          }
        })();

      const frames: Frame[] = [];
      let sawFirst!: () => void;
      const firstShown = new Promise<void>((resolve) => {
        sawFirst = resolve;
      });
      const following = followTurn(client, turnId, {
        idleMs: IDLE_MS,
        onFrame: (frame) => {
          frames.push(frame);
          if (frame.frame === "event") {
            sawFirst();
          }
        },
      });
      await firstShown;
      await client.turns.finishTurn({
        turnId,
        attempt: 0,
        outcome: Outcome.DONE,
        events: [{ seq: 2n, type: "final", dataJson: JSON.stringify({ text: "done" }) }],
      });

      const followed = await following;
      expect(held).toBeGreaterThan(0);
      expect(followed).toMatchObject({ outcome: "terminal", state: "DONE", lastSeq: 3 });
      expect(frames.filter((frame) => frame.frame === "event").map((frame) => (frame.frame === "event" ? frame.type : ""))).toEqual([
        "step",
        "final",
        "turn.done",
      ]);
    } finally {
      client.close();
    }
  });
});
