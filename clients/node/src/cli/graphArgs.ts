// turnkeeper-graph's command line (graph.ts), apart from the command so that it can
// be tested without starting one.

export const USAGE =
  "usage: turnkeeper-graph [--max-turns N] FILE[:EXPORT]   (a langgraph.json graph, e.g. ./src/agent.ts:graph)\n" +
  "  --max-turns N   turns this runner executes at once; past it a run waits, shown pending,\n" +
  "                  until a slot frees (env TURNKEEPER_MAX_TURNS; default 64; 0: no limit)";

/** The command line: `--max-turns N` (or `--max-turns=N`) and one graph. */
export function parseArgs(argv: string[]): { spec?: string; maxTurns?: number; help?: boolean; error?: string } {
  let spec: string | undefined;
  let maxTurns: number | undefined;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === "-h" || arg === "--help") {
      return { help: true };
    }
    if (arg === "--max-turns" || arg.startsWith("--max-turns=")) {
      const raw = arg === "--max-turns" ? argv[++i] : arg.slice("--max-turns=".length);
      if (raw === undefined || !/^\d+$/.test(raw.trim())) {
        return { error: `--max-turns ${raw ?? "(nothing)"}: a whole number of turns, 0 or more (0: no limit)` };
      }
      maxTurns = Number(raw.trim());
    } else if (arg.startsWith("-")) {
      return { error: `unknown option ${arg}` };
    } else if (spec !== undefined) {
      return { error: `one graph at a time (got ${spec} and ${arg})` };
    } else {
      spec = arg;
    }
  }
  return spec === undefined ? { error: "a graph is required" } : { spec, maxTurns };
}

/** `FILE[:EXPORT]` as langgraph.json writes a graph; the export defaults to `default`. */
export function parseSpec(spec: string): { file: string; exportName: string } {
  const colon = spec.lastIndexOf(":");
  // A Windows drive letter ("C:\\...") is no export.
  if (colon <= 1) {
    return { file: spec, exportName: "default" };
  }
  return { file: spec.slice(0, colon), exportName: spec.slice(colon + 1) || "default" };
}

