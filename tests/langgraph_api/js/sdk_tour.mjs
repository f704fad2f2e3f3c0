// LangGraph's JS SDK (@langchain/langgraph-sdk), unchanged, against turnkeeper.
//
//   node sdk_tour.mjs <apiUrl> tour <user>
//                                       every method of assistants, threads and runs,
//                                       its thread's metadata naming <user> (a value
//                                       no other test writes: the deployment is shared);
//                                       prints one JSON object of what each answered
//   node sdk_tour.mjs <apiUrl> stream   one streamed run, each part printed as a JSON
//                                       line as it arrives (the crash test reads them)
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, mode, user] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey: process.env.LANGGRAPH_API_KEY || undefined });
const ASSISTANT = "durable-execution";
const question = (text) => ({ messages: [{ role: "user", content: text, id: "q-1" }] });
const MODES = ["values", "updates", "messages-tuple"];

async function collect(iterable) {
  const out = [];
  for await (const part of iterable) out.push(part);
  return out;
}

async function statusOf(promise) {
  try {
    await promise;
    return 200;
  } catch (error) {
    return error.status ?? error.response?.status ?? String(error);
  }
}

async function tour() {
  const out = {};
  out.assistants = (await client.assistants.search()).map((a) => a.graph_id).sort();
  out.assistant = (await client.assistants.get(ASSISTANT)).graph_id;
  out.graphNodes = (await client.assistants.getGraph(ASSISTANT)).nodes.map((n) => n.id);
  out.schemaKeys = Object.keys((await client.assistants.getSchemas(ASSISTANT)).input_schema.properties);

  const thread = await client.threads.create({ metadata: { user } });
  out.created = thread.status;
  out.duplicate = await statusOf(client.threads.create({ threadId: thread.thread_id }));
  out.found = (await client.threads.search({ metadata: { user } })).map((t) => t.thread_id);
  out.threadId = thread.thread_id;
  out.updated = (await client.threads.update(thread.thread_id, { metadata: { team: "red" } })).metadata;

  const parts = await collect(
    client.runs.stream(thread.thread_id, ASSISTANT, { input: question("tour?"), streamMode: MODES }),
  );
  out.streamEvents = parts.map((p) => p.event);
  out.updates = parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
  const runId = parts[0].data.run_id;
  out.runId = runId;
  out.lastValues = parts.filter((p) => p.event === "values").at(-1).data;

  out.state = (await client.threads.getState(thread.thread_id)).values;
  const history = await client.threads.getHistory(thread.thread_id, { limit: 10 });
  out.historySteps = history.map((h) => h.values.step ?? null);
  const afterPlan = history.find((h) => h.values.step === "plan");
  out.earlierNext = (await client.threads.getState(thread.thread_id, afterPlan.checkpoint.checkpoint_id)).next;
  out.edited = Boolean((await client.threads.updateState(thread.thread_id, { values: { step: "plan" }, asNode: "plan" })).checkpoint);
  out.afterEditNext = (await client.threads.getState(thread.thread_id)).next;

  const run = await client.runs.create(thread.thread_id, ASSISTANT, { input: question("again?") });
  out.joined = (await client.runs.join(thread.thread_id, run.run_id)).step;
  out.got = (await client.runs.get(thread.thread_id, run.run_id)).status;
  out.listed = (await client.runs.list(thread.thread_id)).map((r) => r.status);
  const joinedParts = await collect(client.runs.joinStream(thread.thread_id, runId, { streamMode: ["updates"] }));
  out.joinStreamUpdates = joinedParts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
  out.waited = (await client.runs.wait(null, ASSISTANT, { input: question("stateless?") })).step;
  const batch = await client.runs.createBatch([
    { assistantId: ASSISTANT, input: question("first of a batch?") },
    { assistantId: ASSISTANT, input: question("second of a batch?") },
  ]);
  out.batched = [];
  for (const run of batch) out.batched.push((await client.runs.join(run.thread_id, run.run_id)).step);

  const approval = await client.threads.create();
  await client.runs.wait(approval.thread_id, "approval", { input: { topic: "js" } });
  out.interrupted = (await client.threads.get(approval.thread_id)).status;
  out.busy = await statusOf(client.runs.create(approval.thread_id, "approval", { input: { topic: "js" } }));
  out.resumed = (await client.runs.wait(approval.thread_id, "approval", { command: { resume: "yes" } })).verdict;
  const parked = await client.threads.create();
  const parkedRun = await client.runs.create(parked.thread_id, "approval", { input: { topic: "js" } });
  await client.runs.join(parked.thread_id, parkedRun.run_id);
  await client.runs.cancel(parked.thread_id, parkedRun.run_id, true, "rollback");
  out.cancelled = (await client.runs.get(parked.thread_id, parkedRun.run_id)).status;
  // Another run parked on it, cancelled by id with cancelMany (a shared deployment:
  // a status would reach other tests' runs).
  const again = await client.runs.create(parked.thread_id, "approval", { input: { topic: "js" } });
  await client.runs.join(parked.thread_id, again.run_id);
  await client.runs.cancelMany({ threadId: parked.thread_id, runIds: [again.run_id], action: "rollback" });
  out.cancelledMany = (await client.runs.get(parked.thread_id, again.run_id)).status;
  out.noneToCancel = await statusOf(client.runs.cancelMany({ threadId: parked.thread_id, runIds: ["nobody"] }));

  const copy = await client.threads.copy(thread.thread_id);
  out.copied = copy.thread_id !== thread.thread_id;
  await client.threads.delete(thread.thread_id);
  out.deleted = await statusOf(client.threads.get(thread.thread_id));
  out.unknownAssistant = await statusOf(client.assistants.get("nobody"));
  out.badMode = await statusOf(client.runs.create(null, ASSISTANT, { input: question("x"), streamMode: "sideways" }));
  return out;
}

async function stream() {
  const thread = await client.threads.create();
  console.log(JSON.stringify({ thread_id: thread.thread_id }));
  for await (const part of client.runs.stream(thread.thread_id, ASSISTANT, {
    input: question("crash?"),
    streamMode: MODES,
  })) {
    console.log(JSON.stringify(part));
  }
  const state = await client.threads.getState(thread.thread_id);
  console.log(JSON.stringify({ final: state.values }));
}

if (mode === "tour") console.log(JSON.stringify(await tour()));
else if (mode === "stream") await stream();
else {
  console.error(`unknown mode ${mode}: tour or stream`);
  process.exit(2);
}
