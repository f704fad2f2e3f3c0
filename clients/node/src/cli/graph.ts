#!/usr/bin/env node
// turnkeeper-graph: one graph of a langgraph.json, written with LangGraph.js, served
// by a TurnRunner with the service's LangGraph API (its langgraph/* methods, its
// runs' options and parts). `turnkeeper agent langgraph.json` and `turnkeeper dev`
// start one per TypeScript or JavaScript graph; it can be started by hand too.
//
//   turnkeeper-graph [--max-turns N] ./src/agent.ts:graph
//
// The export is a compiled graph, a StateGraph (compiled here), or a function
// returning either (awaited; LangGraph's graph factory). A .ts file runs without a
// build (tsHooks.ts). Settings come from the environment as for any runner
// (runnerConfigFromEnv: TURNKEEPER_AGENT, TURNKEEPER_ADDRESS, TURNKEEPER_NATS_URL,
// TURNKEEPER_TOKEN, TURNKEEPER_MAX_TURNS ...; --max-turns N wins over the variable:
// turns run at once, past it a run waits `pending` until a slot frees, 64 unless
// set, 0 for no limit). Prints "ready <incarnation>" once serving; exits 0 after
// SIGTERM or SIGINT (or, with TURNKEEPER_STDIN_LIFELINE=1, when its stdin closes:
// the host that started it is gone), 2 on bad usage, 1 when the graph cannot be
// loaded.

import { register } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { USAGE, parseArgs, parseSpec } from "./graphArgs.js";

const isGraph = (value: unknown): boolean =>
  value !== null &&
  typeof value === "object" &&
  (typeof (value as { compile?: unknown }).compile === "function" ||
    typeof (value as { stream?: unknown }).stream === "function");

async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  if (args.help === true || args.spec === undefined) {
    process.stderr.write(`${args.error === undefined ? "" : `error: ${args.error}\n`}${USAGE}\n`);
    return args.help === true ? 0 : 2;
  }
  const { file, exportName } = parseSpec(args.spec);
  register(new URL("./tsHooks.js", import.meta.url));
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(resolve(file)).href)) as Record<string, unknown>;
  } catch (error) {
    process.stderr.write(`error: cannot load ${file}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return 1;
  }
  let graph = module[exportName];
  if (typeof graph === "function" && !isGraph(graph)) {
    graph = await (graph as (config: unknown) => unknown)({});
  }
  if (!isGraph(graph)) {
    const names = Object.keys(module).join(", ") || "none";
    process.stderr.write(`error: ${file} exports no graph named '${exportName}' (its exports: ${names})\n`);
    return 1;
  }
  const { TurnRunner, runnerConfigFromEnv } = await import("../agent.js");
  let config;
  try {
    config = runnerConfigFromEnv(undefined, process.env, {
      langgraphApi: true,
      ...(args.maxTurns === undefined ? {} : { maxTurns: args.maxTurns }),
    });
  } catch (error) {
    process.stderr.write(`error: ${(error as Error).message}\n`);
    return 2;
  }
  const runner = new TurnRunner(graph as ConstructorParameters<typeof TurnRunner>[0], config);
  const stop = (): void => void runner.shutdown().then(() => process.exit(0));
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  if (process.env.TURNKEEPER_STDIN_LIFELINE === "1") {
    // Started by `turnkeeper agent`: its pipe on our stdin closes when it ends, even
    // by SIGKILL; this runner ends with it (drained, as on SIGTERM) rather than
    // serving on as an orphan nobody stops.
    process.stdin.once("close", stop);
    process.stdin.once("end", stop);
    process.stdin.resume();
  }
  await runner.start();
  process.stdout.write(`ready ${runner.identity.incarnation}\n`);
  return -1;
}

const code = await main(process.argv.slice(2));
if (code >= 0) {
  process.exit(code);
}
