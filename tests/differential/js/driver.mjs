// The differential suite's client script through LangGraph's JS SDK
// (@langchain/langgraph-sdk), unchanged: every scenario of ../scenarios.json on a new
// thread, its runs one after another, and what the server showed, printed as one JSON
// line. The same script as ../driver.py (langgraph-sdk); compare.py normalises both.
//
//   node driver.mjs <apiUrl> <scenarios.json>
import { readFileSync } from "node:fs";
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, scenariosPath] = process.argv.slice(2);
const client = new Client({ apiUrl });
const { scenarios } = JSON.parse(readFileSync(scenariosPath, "utf8"));

// What a failed call is recorded as: its HTTP status, else its kind.
function failure(error) {
  const status = error.status ?? error.response?.status;
  return status ? `HTTP ${status}` : (error.name ?? String(error));
}

async function runOnce(threadId, spec, run) {
  const parts = [];
  try {
    const stream = client.runs.stream(threadId, spec.assistant, {
      input: run.input,
      command: run.command,
      streamMode: run.stream_mode,
      streamSubgraphs: run.stream_subgraphs ?? false,
      context: run.context,
      config: run.config,
    });
    for await (const part of stream) parts.push([part.event, part.data]);
  } catch (error) {
    return { parts, error: failure(error) };
  }
  return { parts, error: null };
}

// The scenario's own assistant, if it names one to create: its runs then use it (the
// graph's, if the server refuses to create one).
async function createAssistant(spec) {
  const made = spec.create_assistant;
  try {
    const created = await client.assistants.create({
      graphId: made.graph_id,
      context: made.context,
      config: made.config,
      metadata: made.metadata,
      ifExists: made.if_exists,
      name: made.name,
      description: made.description,
    });
    spec.assistant = created.assistant_id;
    return { data: created, error: null };
  } catch (error) {
    return { data: null, error: failure(error) };
  }
}

async function scenario(given) {
  const spec = { ...given };
  const made = spec.create_assistant ? await createAssistant(spec) : null;
  const thread = await client.threads.create();
  const tid = thread.thread_id;
  const runs = {};
  for (const run of spec.runs) runs[run.name] = await runOnce(tid, spec, run);
  const state = await client.threads.getState(tid);
  const listed = await client.runs.list(tid);
  return {
    assistant: made,
    runs,
    state,
    thread_status: (await client.threads.get(tid)).status,
    // Newest first, as both servers list them.
    run_statuses: listed.reverse().map((r) => r.status),
  };
}

const observed = {};
for (const spec of scenarios) observed[spec.name] = await scenario(spec);
console.log(JSON.stringify(observed));
