// A chat page as LangGraph's docs write one: useStream with apiUrl and assistantId
// (query parameters here), the conversation drawn from `stream.messages`. The test
// submits through window.__send and watches #conversation.
import { useStream } from "@langchain/langgraph-sdk/react";
import { createRoot } from "react-dom/client";

const params = new URLSearchParams(location.search);

function Chat() {
  const stream = useStream({
    apiUrl: params.get("apiUrl"),
    assistantId: params.get("assistantId") ?? "chat",
    messagesKey: "messages",
  });
  window.__send = (text) =>
    stream.submit(
      { messages: [{ type: "human", content: text, id: "q-1" }] },
      { streamMode: ["values", "messages-tuple"] },
    );
  return (
    <main data-loading={String(stream.isLoading)}>
      <ul id="conversation">
        {stream.messages.map((m) => (
          <li key={m.id} data-id={m.id} className={m.type}>
            {typeof m.content === "string" ? m.content : JSON.stringify(m.content)}
          </li>
        ))}
      </ul>
      {stream.error ? <p id="error">{String(stream.error)}</p> : null}
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
