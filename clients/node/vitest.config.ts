import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One service behind every file: run them one at a time.
    fileParallelism: false,
    // In one module graph: no file mocks a module or changes a global, and a graph
    // per file imported LangGraph, gRPC and the TypeScript compiler again each time
    // (twice the CPU of the whole run).
    isolate: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The one test of LangGraph.js's checkpointer suite that is not run: it asks a
    // saver to store only the channel values whose versions changed. The suite
    // skips it for MemorySaver and for SqliteSaver ("doesn't store channel
    // deltas"), and TurnkeeperSaver stores whole checkpoints exactly as they do
    // (the service keeps them in langgraph-checkpoint-sqlite's tables).
    testNamePattern: /^(?!.*should only store channel_values that have changed)/,
  },
});
