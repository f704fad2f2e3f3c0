// The public API of @turnkeeper/client, pinned: the names each entry point of
// package.json's `exports` exports, types included (read by the TypeScript compiler
// from src/, as the published .d.ts files are made). A name added, removed or renamed
// fails here, on purpose: a rename is a decision. If you mean it, update the list
// below and the docs that show the import (README.md, docs/, `npm run docs`); if not,
// leave the name out of the entry point.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import ts from "typescript";

const root = fileURLToPath(new URL("..", import.meta.url));

const DECISION =
  "the public API of @turnkeeper/client changed. A rename is a decision: if you mean it, " +
  "update test/exports.test.ts and the docs that show the import; if not, leave the name " +
  "out of the entry point.";

// package.json's `exports`: subpath -> the source of its entry point.
const ENTRY_POINTS: Record<string, string> = {
  ".": "src/index.ts",
  "./agent": "src/agent.ts",
};

const EXPORTS: Record<string, string[]> = {
  ".": [
    "CheckpointServiceClient",
    "Code",
    "ConnectError",
    "ConnectionOptions",
    "DEFAULT_ADDRESS",
    "EXIT_CODES",
    "EventFrame",
    "FOLLOW_DEFAULTS",
    "FollowOptions",
    "FollowResult",
    "Frame",
    "JsonValue",
    "LIVE_STATES",
    "NatsIdentity",
    "ON_BEHALF_OF",
    "OperationsServiceClient",
    "ResetFrame",
    "RetryPolicy",
    "STREAM_CALL",
    "StatusFrame",
    "TurnServiceClient",
    "TurnStateName",
    "TurnStatusView",
    "TurnkeeperClient",
    "callerAssertion",
    "checkpointsProto",
    "codeName",
    "codeOf",
    "connectionFromEnv",
    "contractWord",
    "followTurn",
    "fromValue",
    "isFenced",
    "isRetryable",
    "messageOf",
    "natsIdentityOf",
    "onBehalfOf",
    "operationsProto",
    "stateFromWire",
    "stateName",
    "stateOfAnswer",
    "statusView",
    "statusWord",
    "toValue",
    "turnsProto",
  ],
  "./agent": [
    "ATTEMPT_KEY",
    "BoundarySaver",
    "BranchLike",
    "CheckpointLike",
    "Compilable",
    "DURABILITY",
    "Describable",
    "EFFECT_KEY_PREFIX",
    "EffectContext",
    "EffectError",
    "EffectFailed",
    "EffectOptions",
    "EffectOutsideTurnkeeperSaver",
    "EffectPolicyName",
    "EffectUncertain",
    "EventLog",
    "GraphVersion",
    "Identity",
    "NodeLike",
    "RunnableGraph",
    "RunnerConfig",
    "Stamp",
    "TURN_ID_KEY",
    "TurnRunner",
    "TurnRunnerOptions",
    "TurnkeeperSaver",
    "TurnkeeperSaverOptions",
    "UNCERTAIN_INTERRUPT",
    "agentSubject",
    "durableConfig",
    "durableRunOptions",
    "effect",
    "effectKey",
    "emitEvent",
    "graphShape",
    "idempotencyKey",
    "runnerConfigFromEnv",
  ],
};

// One program for every entry point, made at the first one's test: the compiler reads
// the sources and the types of their dependencies once (a program per entry point read
// them all again, seconds each).
let program: ts.Program | undefined;

function exportedNames(source: string): string[] {
  const file = `${root}${source}`;
  program ??= ts.createProgram(
    Object.values(ENTRY_POINTS).map((entry) => `${root}${entry}`),
    {
      strict: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      noEmit: true,
    },
  );
  const checker = program.getTypeChecker();
  const sourceFile = program.getSourceFile(file);
  if (sourceFile === undefined) throw new Error(`cannot read ${file}`);
  const module = checker.getSymbolAtLocation(sourceFile);
  if (module === undefined) throw new Error(`${file} is not a module`);
  return checker
    .getExportsOfModule(module)
    .map((symbol) => symbol.getName())
    .sort();
}

function sorted(names: readonly string[]): string[] {
  return [...names].sort();
}

test("package.json's entry points are the pinned ones", () => {
  const manifest = JSON.parse(readFileSync(`${root}package.json`, "utf8")) as {
    exports: Record<string, { types: string; default: string }>;
  };
  const built = (source: string, suffix: string): string =>
    `./${source.replace(/^src\//, "dist/").replace(/\.ts$/, suffix)}`;
  const dist = Object.fromEntries(
    Object.entries(ENTRY_POINTS).map(([subpath, source]) => [
      subpath,
      { types: built(source, ".d.ts"), default: built(source, ".js") },
    ]),
  );
  expect(manifest.exports, DECISION).toEqual(dist);
});

describe.each(Object.keys(ENTRY_POINTS))("the entry point %s", (subpath) => {
  const source = ENTRY_POINTS[subpath]!;

  test("exports exactly the pinned names, types included", () => {
    const pinned = EXPORTS[subpath]!;
    expect(pinned, "keep the list sorted").toEqual(sorted(pinned));
    expect(exportedNames(source), DECISION).toEqual(pinned);
  });

  test("has every value it exports at run time", async () => {
    const module = (await import(`../${source.replace(/\.ts$/, ".js")}`)) as Record<string, unknown>;
    const values = Object.keys(module).sort();
    const missing = values.filter((name) => !EXPORTS[subpath]!.includes(name));
    expect(missing, DECISION).toEqual([]);
  });
});
