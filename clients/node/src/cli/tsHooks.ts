// Module hooks for turnkeeper-graph (graph.ts): a langgraph.json's graph written in
// TypeScript runs as it is, without a build step, as LangGraph's own dev server
// runs one.
//
// - load: a .ts, .mts or .cts file is transpiled to JavaScript (TypeScript's own
//   transpileModule: types erased, nothing checked), from the project's
//   `typescript` where it has one, else the runner's;
// - resolve: a relative import of `./x.js` finds `./x.ts` (TypeScript's own rule
//   under nodenext), and a package the project has not installed is taken from the
//   runner's dependencies: a project beside this package needs no node_modules of
//   its own, and its graph and the runner share one @langchain/langgraph (a
//   Command or a checkpointer is recognized by class).

import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const TS = /\.(c|m)?ts$/;
const RUNNER = import.meta.url;

interface ResolveContext {
  parentURL?: string;
  conditions?: string[];
}
type NextResolve = (specifier: string, context?: ResolveContext) => Promise<{ url: string; format?: string }>;
type NextLoad = (url: string, context?: unknown) => Promise<{ format: string; source?: unknown; shortCircuit?: boolean }>;

const missing = (error: unknown): boolean =>
  (error as { code?: string }).code === "ERR_MODULE_NOT_FOUND";

export async function resolve(
  specifier: string,
  context: ResolveContext,
  nextResolve: NextResolve,
): Promise<{ url: string; format?: string; shortCircuit?: boolean }> {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    if (!missing(error)) {
      throw error;
    }
    const relative = specifier.startsWith("./") || specifier.startsWith("../");
    if (relative && context.parentURL !== undefined && TS.test(context.parentURL)) {
      const stem = specifier.replace(/\.(c|m)?js$/, "");
      for (const ext of [".ts", ".mts", ".cts", "/index.ts"]) {
        try {
          return await nextResolve(stem + ext, context);
        } catch {
          // the next spelling
        }
      }
    }
    if (!relative && !specifier.startsWith("/") && !specifier.includes(":")) {
      return await nextResolve(specifier, { ...context, parentURL: RUNNER });
    }
    throw error;
  }
}

interface TypeScript {
  transpileModule(
    source: string,
    options: { compilerOptions: Record<string, unknown>; fileName: string },
  ): { outputText: string };
  ModuleKind: Record<string, number>;
  ScriptTarget: Record<string, number>;
}

let typescript: TypeScript | undefined;

function typescriptFor(file: string): TypeScript {
  if (typescript === undefined) {
    for (const from of [file, fileURLToPath(RUNNER)]) {
      try {
        typescript = createRequire(from)("typescript") as TypeScript;
        break;
      } catch {
        // try the next place
      }
    }
  }
  if (typescript === undefined) {
    throw new Error(`${file} is TypeScript: install typescript in its project (npm install --save-dev typescript)`);
  }
  return typescript;
}

export async function load(
  url: string,
  context: unknown,
  nextLoad: NextLoad,
): Promise<{ format: string; source?: unknown; shortCircuit?: boolean }> {
  if (!url.startsWith("file:") || !TS.test(url)) {
    return nextLoad(url, context);
  }
  const file = fileURLToPath(url);
  const ts = typescriptFor(file);
  const cjs = file.endsWith(".cts");
  const output = ts.transpileModule(await readFile(file, "utf8"), {
    fileName: file,
    compilerOptions: {
      module: cjs ? ts.ModuleKind.CommonJS : ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      sourceMap: false,
      inlineSourceMap: true,
      esModuleInterop: true,
    },
  });
  return { format: cjs ? "commonjs" : "module", source: output.outputText, shortCircuit: true };
}
