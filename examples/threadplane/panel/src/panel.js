// The threadplane panel: the Pipeline sidebar (Analyze, Plan, Generate) and the
// conversation, driven by LangGraph's JS SDK. Its whole configuration is `apiUrl`
// and `assistantId` (query parameters here), as for any LangGraph server: point it
// at turnkeeper and every run survives the death of the agent running it.
//
// The state shown is the `values` the server streams (useStream's rule: the latest
// `values` is the whole state), and messages are drawn by id from it, so a message
// is never shown twice, whatever the server re-runs.
import { Client } from "@langchain/langgraph-sdk";

const params = new URLSearchParams(location.search);
const config = {
  apiUrl: params.get("apiUrl") ?? "http://127.0.0.1:2024",
  assistantId: params.get("assistantId") ?? "durable-execution",
};
const client = new Client({ apiUrl: config.apiUrl });
const STEPS = [
  ["analyze", "Analyze"],
  ["plan", "Plan"],
  ["generate", "Generate"],
];

const ui = {
  steps: document.getElementById("steps"),
  conversation: document.getElementById("conversation"),
  composer: document.getElementById("composer"),
  question: document.getElementById("question"),
  send: document.getElementById("send"),
  regenerate: document.getElementById("regenerate"),
  approval: document.getElementById("approval"),
  approvalQuestion: document.getElementById("approval-question"),
  error: document.getElementById("error"),
};

const state = { threadId: null, values: {}, running: false, done: new Set(), active: null, interrupt: null };

function drawSidebar() {
  ui.steps.replaceChildren(
    ...STEPS.map(([id, label]) => {
      const li = document.createElement("li");
      li.dataset.step = id;
      li.className = state.done.has(id) ? "done" : state.active === id ? "active" : "pending";
      const icon = document.createElement("span");
      icon.className = "icon";
      const text = document.createElement("span");
      text.textContent = label;
      li.append(icon, text);
      return li;
    }),
  );
}

function drawConversation() {
  const seen = new Set();
  const items = [];
  for (const message of state.values.messages ?? []) {
    if (message.id && seen.has(message.id)) continue;
    seen.add(message.id);
    const li = document.createElement("li");
    li.className = message.type;
    li.dataset.id = message.id ?? "";
    li.textContent = typeof message.content === "string" ? message.content : JSON.stringify(message.content);
    items.push(li);
  }
  ui.conversation.replaceChildren(...items);
}

function draw() {
  drawSidebar();
  drawConversation();
  ui.send.disabled = state.running;
  ui.regenerate.disabled = state.running || !state.values.completed_answer_id;
  ui.approval.hidden = !state.interrupt;
  if (state.interrupt) ui.approvalQuestion.textContent = JSON.stringify(state.interrupt.value);
  document.body.dataset.running = String(state.running);
  document.body.dataset.thread = state.threadId ?? "";
}

function nextStep(node) {
  const k = STEPS.findIndex(([id]) => id === node);
  return k >= 0 && k + 1 < STEPS.length ? STEPS[k + 1][0] : null;
}

async function run(payload) {
  state.running = true;
  state.interrupt = null;
  state.done = new Set();
  state.active = payload.command ? state.active : STEPS[0][0];
  ui.error.hidden = true;
  draw();
  try {
    if (!state.threadId) state.threadId = (await client.threads.create()).thread_id;
    const stream = client.runs.stream(state.threadId, config.assistantId, {
      ...payload,
      streamMode: ["values", "updates"],
    });
    for await (const part of stream) {
      if (part.event === "updates") {
        for (const node of Object.keys(part.data)) {
          if (node === "__interrupt__") {
            state.interrupt = part.data[node][0];
            continue;
          }
          state.done.add(node);
          state.active = nextStep(node);
        }
      } else if (part.event === "values") {
        const { __interrupt__: pending, ...values } = part.data;
        state.values = values;
        if (pending) state.interrupt = pending[0];
      } else if (part.event === "error") {
        throw new Error(part.data.message ?? "the run failed");
      }
      draw();
    }
    if (!state.interrupt) state.active = null;
  } catch (error) {
    ui.error.textContent = String(error.message ?? error);
    ui.error.hidden = false;
  } finally {
    state.running = false;
    draw();
  }
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.question.value.trim();
  if (!text || state.running) return;
  ui.question.value = "";
  run({ input: { messages: [{ role: "user", content: text }] } });
});
// submit(null) with a resume: the interrupted run goes on with the person's answer.
document.getElementById("approve").addEventListener("click", () => run({ command: { resume: "yes" } }));
document.getElementById("continue").addEventListener("click", () => run({ command: { resume: null } }));
// regenerate(): the thread as if `plan` had just run, without the old answer, then a
// run from there (update_state as_node, as the guide's panel does).
ui.regenerate.addEventListener("click", async () => {
  const answer = state.values.completed_answer_id;
  await client.threads.updateState(state.threadId, {
    values: { messages: [{ role: "remove", content: "", id: answer }], step: "plan" },
    asNode: "plan",
  });
  run({ input: null });
});

draw();
