// useStream's own engine (StreamManager and MessageTupleManager from
// @langchain/langgraph-sdk/ui, what the React hook runs), unchanged, following one
// run of the `chat` graph in mode messages-tuple and values. After each part it
// prints the conversation useStream would render ({"event", "messages": [[id, text],
// ...]}), and at the end {"final": ...}: the test (test_sdk_live_tokens.py) kills the
// agent mid-reply and reads what the engine showed.
//
//   node use_stream_rewind.mjs API_URL
import { Client } from "@langchain/langgraph-sdk";
import { MessageTupleManager, StreamManager } from "@langchain/langgraph-sdk/ui";

const [apiUrl] = process.argv.slice(2);
const client = new Client({ apiUrl });
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

const shown = (values) =>
  (values?.messages ?? []).map((m) => [
    m.id,
    typeof m.content === "string" ? m.content : JSON.stringify(m.content),
  ]);

const manager = new StreamManager(new MessageTupleManager(), { throttle: false });
const thread = await client.threads.create();
let lastEvent = null;
manager.subscribe(() => print({ event: lastEvent, messages: shown(manager.values) }));

await manager.start(
  async (signal) => {
    const stream = client.runs.stream(thread.thread_id, "chat", {
      input: { messages: [{ type: "human", content: "count", id: "q-1" }] },
      streamMode: ["values", "messages-tuple"],
      signal,
    });
    return (async function* () {
      for await (const part of stream) {
        lastEvent = part.event;
        yield part;
      }
    })();
  },
  {
    getMessages: (values) => values.messages ?? [],
    setMessages: (values, messages) => ({ ...values, messages }),
    initialValues: {},
    callbacks: {},
    onSuccess: () => undefined,
    onError: (error) => print({ error: String(error) }),
  },
);
const state = await client.threads.getState(thread.thread_id);
print({ final: shown(manager.values), state: shown(state.values) });
