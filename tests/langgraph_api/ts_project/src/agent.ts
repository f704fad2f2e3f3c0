// A LangGraph.js project for tests/langgraph_api/test_ts_graphs.py: two graphs
// served by the TypeScript runner under `turnkeeper agent langgraph.json`.
//
// chat:      reply (a fake chat model streamed word by word) -> END
// approval:  write -> review (interrupt({question})) -> finish
//
// In a turn's first attempt whose thread's first message is "hold", reply prints
// "holding <turn_id>" and waits until the process is killed (a test's SIGKILL lands
// mid-run); any later attempt replies at once.

import { AIMessage, type BaseMessage } from "@langchain/core/messages";
import { FakeListChatModel } from "@langchain/core/utils/testing";
import { Annotation, END, MessagesAnnotation, START, StateGraph, interrupt } from "@langchain/langgraph";
import type { RunnableConfig } from "@langchain/core/runnables";

function text(message: BaseMessage | undefined): string {
  return typeof message?.content === "string" ? message.content : "";
}

export const chat = new StateGraph(MessagesAnnotation)
  .addNode("reply", async (state: typeof MessagesAnnotation.State, config: RunnableConfig) => {
    const asked = text(state.messages[state.messages.length - 1]);
    const attempt = Number(config.configurable?.attempt ?? 0);
    if (text(state.messages[0]) === "hold" && attempt === 0) {
      console.log(`holding ${String(config.configurable?.turn_id)}`);
      await new Promise(() => undefined);
    }
    const model = new FakeListChatModel({ responses: [`you said ${asked}`] });
    let content = "";
    let id: string | undefined;
    for await (const chunk of await model.stream(state.messages, config)) {
      content += typeof chunk.content === "string" ? chunk.content : "";
      id ??= chunk.id;
    }
    return { messages: [new AIMessage({ content, id: id ?? `reply-${state.messages.length}` })] };
  })
  .addEdge(START, "reply")
  .addEdge("reply", END)
  .compile();

const Approval = Annotation.Root({
  topic: Annotation<string>(),
  draft: Annotation<string>(),
  verdict: Annotation<string>(),
});

export const approval = new StateGraph(Approval)
  .addNode("write", (state: typeof Approval.State) => ({ draft: `a note on ${state.topic}` }))
  .addNode("review", (state: typeof Approval.State) => {
    const answer = interrupt({ question: `approve ${state.draft}?` }) as string;
    return { verdict: answer };
  })
  .addNode("finish", (state: typeof Approval.State) => ({ draft: `${state.draft} (${state.verdict})` }))
  .addEdge(START, "write")
  .addEdge("write", "review")
  .addEdge("review", "finish")
  .addEdge("finish", END);
