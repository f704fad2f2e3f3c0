#!/usr/bin/env node
// A LangGraph.js agent run by TurnRunner, for the tests that drive it from pytest
// (tests/node/test_node_agent_crash.py, tests/node/test_node_sdk.py). Not part of the package.
//
//   TURNKEEPER_ADDRESS, TURNKEEPER_NATS_URL, TURNKEEPER_AGENT, TURNKEEPER_REPLICA:
//     as for any runner (runnerConfigFromEnv)
//   AGENT_GRAPH   "steps" (plan -> work -> answer), "approval" (ask -> answer,
//                 where ask calls interrupt()) or "effects" (plan -> work -> answer,
//                 where work calls the effect `charge`, policy EFFECT_POLICY, which
//                 appends "charge <turn_id> <attempt> <key>" to SIDE_LOG: the
//                 receiver's count). In the first attempt of a turn whose id starts
//                 with "hold-in-", charge emits the token "charging" and waits inside
//                 the function (its intent recorded, its outcome not: uncertain);
//                 with "hold-after-", work emits "charged" after charge's outcome is
//                 recorded and waits before its step's checkpoint; from the second
//                 attempt on, a "hold-after-diverge-" turn charges another input and
//                 a "hold-after-skip-" turn does not charge (a re-run that diverges)
//   SIDE_LOG      a file each node appends "<node> <turn_id> <attempt>" to when it
//                 runs, so a test can count runs
//   HOLD_WORK     "1": in a turn whose id starts with "hold-", the first attempt's
//                 work node emits its event and then waits until killed, until
//                 the runner aborts the graph (it prints "aborted in work <turn_id>"),
//                 or until the process gets SIGUSR2 (the test lets it go on)
//   STARVE_HEARTBEATS "1": the runner's heartbeats never reach the service (a
//                 starved machine at its worst): its leases lapse while it runs
//   RUN_UNTIL_SIGNAL "1": serve through TurnRunner.run() (until SIGTERM or SIGINT,
//                 then print "stopped" and end by itself) instead of start()
//   STEP_MS       each node of "steps" works for a random while up to this long
//                 after its event (the window a kill lands in); default 0
//
// Prints "ready <incarnation>" on stdout once the startup Redrive is done.

import { appendFileSync } from "node:fs";

import { Annotation, END, START, StateGraph, getConfig, interrupt } from "@langchain/langgraph";

import { TurnRunner, effect, emitEvent, runnerConfigFromEnv } from "../dist/agent.js";

const State = Annotation.Root({
  job: Annotation(),
  log: Annotation({ reducer: (left, right) => left.concat(right), default: () => [] }),
});

function ran(node, config) {
  const { turn_id: turnId, attempt } = config.configurable;
  if (process.env.SIDE_LOG) {
    appendFileSync(process.env.SIDE_LOG, `${node} ${turnId} ${attempt}\n`);
  }
  emitEvent(config, "token", { node, text: `${node} is running` });
  return { turnId, attempt };
}

// Random, not synchronisation: nothing waits for it; it widens the window a test's
// SIGKILL lands in.
const work = () => new Promise((resolve) => setTimeout(resolve, Math.random() * Number(process.env.STEP_MS ?? 0)));

function steps() {
  return new StateGraph(State)
    .addNode("plan", async (_state, config) => {
      ran("plan", config);
      await work();
      return { log: ["planned"] };
    })
    .addNode("work", async (_state, config) => {
      const { turnId, attempt } = ran("work", config);
      if (process.env.HOLD_WORK === "1" && turnId.startsWith("hold-") && attempt === 0) {
        appendFileSync(process.env.SIDE_LOG ?? "/dev/null", `holding ${turnId}\n`);
        // Until SIGKILL, or until the runner aborts the graph (a cancel): then say so,
        // so a test knows the abort reached the node.
        await new Promise((resolve, reject) => {
          config.signal?.addEventListener("abort", () => {
            console.log(`aborted in work ${turnId}`);
            reject(config.signal.reason);
          });
          process.once("SIGUSR2", resolve);
        });
      }
      await work();
      return { log: ["worked"] };
    })
    .addNode("answer", async (_state, config) => {
      ran("answer", config);
      await work();
      return { log: ["answered"] };
    })
    .addEdge(START, "plan")
    .addEdge("plan", "work")
    .addEdge("work", "answer")
    .addEdge("answer", END);
}

// GRAPH_VARIANT (docs/versions.md): "renamed" names approval's ask node "confirm";
// "reducer" gives `log` another reducer. TURNKEEPER_VERSION_LABEL, when set, tags
// the answer ("answered@<label>"), so a test sees which code ran it.
const VARIANT = process.env.GRAPH_VARIANT ?? "";
const LABEL = process.env.TURNKEEPER_VERSION_LABEL ?? "";

function approval() {
  const ask = VARIANT === "renamed" ? "confirm" : "ask";
  const state =
    VARIANT === "reducer"
      ? Annotation.Root({
          job: Annotation(),
          log: Annotation({ reducer: (left, right) => [...left, ...right], default: () => [] }),
        })
      : State;
  return new StateGraph(state)
    .addNode(ask, (state, config) => {
      // interrupt() first: the resume re-runs this node from its start.
      const decision = interrupt({ question: `approve ${JSON.stringify(state.job)}?` });
      ran("ask", config);
      return { log: [`decision:${JSON.stringify(decision)}`] };
    })
    .addNode("answer", (_state, config) => {
      ran("answer", config);
      return { log: [LABEL ? `answered@${LABEL}` : "answered"] };
    })
    .addEdge(START, ask)
    .addEdge(ask, "answer")
    .addEdge("answer", END);
}

// Until SIGKILL: the window a test's kill lands in.
const forever = () => new Promise(() => {});

function effects() {
  const charge = effect(
    "charge",
    async (job, { key }) => {
      const config = getConfig();
      const { turn_id: turnId, attempt } = config.configurable;
      appendFileSync(process.env.SIDE_LOG, `charge ${turnId} ${attempt} ${key}\n`);
      emitEvent(config, "token", { node: "work", text: "charging" });
      if (turnId.startsWith("hold-in-") && attempt === 0) {
        await forever();
      }
      return { charged: job, key };
    },
    { policy: process.env.EFFECT_POLICY || undefined },
  );
  return new StateGraph(State)
    .addNode("plan", async (_state, config) => {
      ran("plan", config);
      await work();
      return { log: ["planned"] };
    })
    .addNode("work", async (state, config) => {
      const { turnId, attempt } = ran("work", config);
      await work();
      const diverge = attempt > 0 && turnId.startsWith("hold-after-diverge-");
      const skip = attempt > 0 && turnId.startsWith("hold-after-skip-");
      const receipt = skip ? "skipped" : await charge(diverge ? `${state.job}-again` : state.job);
      emitEvent(config, "token", { node: "work", text: "charged" });
      if (turnId.startsWith("hold-after-") && attempt === 0) {
        await forever();
      }
      await work();
      return { log: [`receipt:${JSON.stringify(receipt)}`] };
    })
    .addNode("answer", (_state, config) => {
      ran("answer", config);
      return { log: ["answered"] };
    })
    .addEdge(START, "plan")
    .addEdge("plan", "work")
    .addEdge("work", "answer")
    .addEdge("answer", END);
}

const graphs = { steps, approval, effects };
const graph = (graphs[process.env.AGENT_GRAPH] ?? steps)();
const runner = new TurnRunner(graph, runnerConfigFromEnv(), {
  inputMapper: (input) => ({ job: input }),
});
if (process.env.STARVE_HEARTBEATS === "1") {
  // Answered as if sent, never sent: the execution goes on, its lease lapses.
  runner.client.turns.heartbeat = async () => ({});
}
if (process.env.RUN_UNTIL_SIGNAL === "1") {
  // TurnRunner.run() as the guides write it: its own signal handling, and the
  // process ends by itself once run() returns (nothing left open).
  await runner.run();
  process.stdout.write("stopped\n");
} else {
  const stop = () => void runner.shutdown().then(() => process.exit(0));
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  await runner.start();
  process.stdout.write(`ready ${runner.identity.incarnation}\n`);
}
