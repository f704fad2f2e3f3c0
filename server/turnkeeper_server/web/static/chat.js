// The chat panel: a conversation with one agent through the service's relay, and a
// sidebar of the run's steps drawn from its `step` events, whatever the agent's graph.
//
// Sidebar rule (decision 219): the entries are the agent's graph's nodes, in its
// order, read from the LangGraph API's assistant graph (`GET /assistants/{agent}/graph`)
// when the agent can describe itself; else the nodes as their steps finish. Each
// `step` event completes its node. While the run goes on, the first node not complete
// is active (a spinner; nothing is active before a run). When the run ends the
// sidebar says what the header says: done, every step that ran complete; parked,
// failed or cancelled, the next entry shows that word. A new question starts over.
// Each entry shows its label (the node's name capitalized: Analyze, Plan, Generate for
// the pipeline), a spinner when active, a check when complete, a circle when
// pending, and the line to the next entry is done once the entry is complete
// (decision 191).
//
// Client rules: the run is followed by the panel's rule (TK.follow with its rules:
// TurnStatus on every idle gap, a 15-minute deadline; decision 190). Retry re-sends
// the last request; its only guards are a run in flight and no last request. Which
// errors offer it is this banner's decision (decision 194): a request that reached no
// agent, one the agent refused, and a run that ended FAILED, CANCELLED or unknown;
// not a stream that broke without the end or a request that got no answer, which may
// have gone on: Check status asks the service and re-attaches or concludes.
// The status shown is the stream's (decision 640): an answer that comes after it
// (Approve's, when the resumed run ended first) does not write over it.
// Re-attaching resumes after the last event shown (Last-Event-ID), so nothing is shown
// twice. What was shown (the answer so far) stays until a new run writes over it.
//
// Input shape (decision 324): a graph whose input schema (the LangGraph API's
// `GET /assistants/{agent}/schemas`) has `messages` is a messages graph, the shape
// agent-chat-ui and useStream assume (unless the bridge maps its input, an
// `input_mapped` schema: then it takes its own shape): a question goes as
// `{messages: [{role: "user", content}]}` and the answer is the last AI message of the
// run's steps, streamed from its tokens (those of the node now streaming). Any other
// graph gets the pipeline's `{question, id}`. An interrupt is answered with
// `Command(resume=value)`, the value in the approval box, editable: `{"approved": true}`
// for the pipeline, agent-inbox's `[{"type": "accept", "args": null}]` for an
// interrupt that asks in its shape, `true` otherwise. A run that ends FAILED shows the
// service's error for it (TurnStatus), not only the word.
"use strict";

(() => {
  const {call, follow, el, tokenBox, headers, errorOf, ApiError, stateWord} = TK;
  const MARKERS = {active: "spinner", complete: "check", pending: "circle"};
  const label = (node) => node.charAt(0).toUpperCase() + node.slice(1);
  const params = new URLSearchParams(location.search);
  const agentInput = document.getElementById("agent");
  agentInput.value = params.get("agent") || "";

  const chat = {
    threadId: params.get("thread") || crypto.randomUUID(),
    nodes: [],           // the agent's graph's nodes, in order (empty: not known)
    steps: [],           // the nodes of the run that finished, in order
    ended: null,         // how the run ended (its state's word), null while it runs
    turnId: null,        // the run being followed
    lastRequest: null,   // what Retry would send again
    running: false,
    offerRetry: false,   // the banner offers Retry for the error shown
    interrupted: false,
    follower: null,
    seen: null,          // {seq, attempt} of the last event applied from the run
    approval: null,      // the value of the run's pending interrupt(), while parked
    messagesGraph: false, // the graph takes {messages} (its input schema says so)
  };

  const $ = (id) => document.getElementById(id);

  function sidebar() {
    // The graph's nodes when known, then any node that ran beyond them.
    const nodes = [...chat.nodes];
    for (const name of chat.steps) if (!nodes.includes(name)) nodes.push(name);
    let next = nodes.findIndex((name) => !chat.steps.includes(name));
    const items = nodes.map((name) => ({name, state: chat.steps.includes(name) ? "complete" : "pending"}));
    // Past the last known node (or with no graph known), an unnamed item stands for
    // the node running now, or for how the run ended.
    const known = chat.nodes.length > 0;
    if (chat.running) {
      if (next >= 0) items[next].state = "active";
      else if (!known) items.push({name: "", state: "active"});
    } else if (chat.ended && chat.ended !== "done") {
      if (next >= 0) items[next].state = chat.ended;
      else items.push({name: "", state: chat.ended});
    }
    $("pipeline").replaceChildren(...items.map((item, i) => {
      const marker = MARKERS[item.state] || "circle";
      return el("li", {class: item.state, "data-step": item.name, "data-state": item.state},
        el("span", {class: "marker " + marker, "data-marker": marker, "aria-hidden": "true"}),
        el("span", {class: "label"}, item.name ? label(item.name) : item.state),
        i < items.length - 1
          ? el("span", {class: "line", "data-line": item.state === "complete" ? "done" : "pending",
            "aria-hidden": "true"})
          : null);
    }));
  }

  function buttons() {
    sidebar();
    $("submit").disabled = chat.running;
    $("stop").hidden = !chat.running;
    $("retry").hidden = !(chat.offerRetry && !chat.running && chat.lastRequest);
    $("check").hidden = !(chat.interrupted && chat.turnId);
    $("regenerate").hidden = chat.running || !chat.turnId || chat.interrupted;
  }

  // The run's pending approval: shown from its `interrupt` event until it is answered
  // or the run moves on; an interrupted stream leaves it shown.
  function approval(value) {
    const shown = chat.approval !== null;
    chat.approval = value;
    $("approval").hidden = value === null;
    $("approval-value").textContent = value === null ? "" : JSON.stringify(value);
    if (value !== null && !shown) $("resume-value").value = JSON.stringify(resumeFor(value));
  }

  // What Approve sends by default as Command(resume=...): see the header.
  function resumeFor(value) {
    const asks = Array.isArray(value) ? value[0] : value;
    if (asks && typeof asks === "object" && "action_request" in asks) return [{type: "accept", args: null}];
    return chat.messagesGraph ? true : {approved: true};
  }

  function setError(text, {retry = false, interrupted = false} = {}) {
    $("chat-error").textContent = text;
    chat.offerRetry = retry;
    chat.interrupted = interrupted;
    buttons();
  }

  function message(who, text, id) {
    const node = el("div", {class: "message " + who, "data-role": who},
      el("b", {}, who === "user" ? "you" : agentInput.value), el("span", {class: "text"}, text));
    if (id) node.dataset.turnId = id;
    $("messages").append(node);
    return node;
  }

  function answerOf(update) {
    const messages = (update && update.messages) || [];
    for (const m of messages.slice().reverse()) {
      const kwargs = m.kwargs || m;
      const type = m.type || kwargs.type;
      const content = kwargs.content;
      if (typeof content === "string" && type !== "remove" && (type === "ai" || (m.id || []).includes("AIMessage"))) {
        return content;
      }
    }
    return null;
  }

  async function relay(method, paramsOf) {
    const response = await fetch("/v1/agents/" + encodeURIComponent(agentInput.value) + "/rpc", {
      method: "POST",
      headers: headers({"Content-Type": "application/json"}),
      body: JSON.stringify({method, params: paramsOf}),
    });
    if (!response.ok) throw await errorOf(response);
    const reply = await response.json();
    if (reply.error) {
      const data = reply.error.data || {};
      throw new ApiError(String(data.code || reply.error.code).toLowerCase(),
        data.message || reply.error.message, 200, {dispatched: true, refused: true});
    }
    return reply.result;
  }

  function attach(turnId, reply, after) {
    if (chat.turnId !== turnId) chat.seen = null;
    chat.turnId = turnId;
    chat.running = true;
    setError("");
    $("chat-status").textContent = "running";
    let draft = after ? reply.querySelector(".text").textContent : "";
    let draftNode = null;  // the node whose tokens the draft is: a new node starts over
    chat.follower = follow(turnId, {
      onReset() {
        draft = "";
        chat.seen = null;
        approval(null);
        chat.steps = [];
        sidebar();
        reply.querySelector(".text").textContent = "";
      },
      onEvent(e) {
        chat.seen = {seq: e.seq, attempt: e.attempt};
        reply.dataset.lastSeq = String(e.seq);
        if (e.type === "interrupt") {
          approval(e.data && "value" in e.data ? e.data.value : e.data);
          $("chat-status").textContent = "parked";
        } else if (chat.approval !== null) {
          approval(null);  // resumed: the run moved on
          $("chat-status").textContent = "running";
        }
        if (e.type === "step" && e.data && typeof e.data.node === "string") {
          chat.steps.push(e.data.node);
          sidebar();
          const answer = answerOf(e.data.update);
          if (answer !== null) reply.querySelector(".text").textContent = answer;
        } else if (e.type === "token" && e.data) {
          if (chat.messagesGraph && draftNode !== null && e.data.node !== draftNode) draft = "";
          draftNode = e.data.node;
          draft += e.data.text || "";
          reply.querySelector(".text").textContent = draft;
        } else if (e.type === "error") {
          setError("the agent failed: " + ((e.data && e.data.message) || "error"));
        }
      },
      onEnd(end) {
        chat.running = false;
        chat.follower = null;
        if (end.state && end.state !== "PARKED") approval(null);
        if (end.by === "deadline") {
          // Given up waiting, whatever the run does: it may still be going.
          $("chat-status").textContent = "no end in time";
          const minutes = Math.round(TK.FOLLOW_DEFAULTS.deadlineMs / 60000);
          setError("No end of the run within " + minutes + " minutes; it may still be going.",
            {interrupted: true});
          return;
        }
        const state = String(end.state || "UNKNOWN");
        chat.ended = state.toLowerCase();
        sidebar();
        $("chat-status").textContent = chat.ended;
        if (state === "UNKNOWN") setError("the service does not know this run", {retry: true});
        else if (state === "FAILED") failed(turnId);
        else if (state !== "DONE" && state !== "PARKED") setError("the run ended " + state.toLowerCase(), {retry: true});
        else if (chat.interrupted) setError("");  // the stream's trouble no longer matters
        buttons();
      },
      onStatus(s) {
        if (s === "reconnecting" && chat.running) {
          $("chat-status").textContent = "connection lost, re-attaching";
          setError("The stream was interrupted; the run may still be going.", {interrupted: true});
        } else if (s === "live") {
          $("chat-status").textContent = chat.approval !== null ? "parked" : "running";
          if (chat.interrupted) setError("");
        }
      },
      onError(e) {
        chat.running = false;
        chat.follower = null;
        $("chat-status").textContent = "cannot follow";
        setError("cannot follow the run: " + e.message);
      },
    }, after, {});
    buttons();
  }

  // A failed run: the service's error for it on the page, where it can be acted on.
  async function failed(turnId) {
    setError("the run ended failed", {retry: true});
    try {
      const status = await call("TurnStatus", {turnId});
      if (status.error && chat.turnId === turnId) setError("the run failed: " + status.error, {retry: true});
    } catch (e) {
      // The word stays; Check status asks again.
    }
  }

  async function send(request, reply) {
    chat.lastRequest = request;
    chat.running = true;
    chat.steps = [];
    chat.ended = null;
    sidebar();
    setError("");
    try {
      const created = await relay("responses/create", request);
      if (!created.turn_id) {
        chat.running = false;
        reply.remove();
        buttons();
        return;
      }
      reply.dataset.turnId = created.turn_id;
      attach(created.turn_id, reply);
    } catch (e) {
      chat.running = false;
      const notSent = e.body && e.body.dispatched === false;
      const refused = e.body && e.body.refused === true;
      // Not offered for a request that went out and got no answer: it may have run.
      setError((notSent ? "Not sent: " : refused ? "Refused: " : "Failed: ") + e.message,
        {retry: notSent || refused});
    }
  }

  $("submit").addEventListener("click", () => {
    const question = $("question").value.trim();
    if (!question || chat.running) return;
    $("question").value = "";
    message("user", question);
    const reply = message("agent", "");
    const input = chat.messagesGraph
      ? {messages: [{role: "user", content: question}]}
      : {question, id: crypto.randomUUID()};
    send({input, thread_id: chat.threadId, background: true}, reply);
  });

  $("retry").addEventListener("click", () => {
    // Two guards only; whether to offer it was the banner's decision.
    if (chat.running || !chat.lastRequest) return;
    const replies = $("messages").querySelectorAll(".message.agent");
    send(chat.lastRequest, replies[replies.length - 1] || message("agent", ""));
  });

  $("approve").addEventListener("click", async () => {
    if (chat.approval === null || !chat.turnId) return;
    let resume;
    try {
      resume = JSON.parse($("resume-value").value);
    } catch (e) {
      setError("The resume value is not JSON: " + e.message, {interrupted: chat.interrupted});
      return;
    }
    const turnId = chat.turnId;
    const shown = chat.seen;  // the last event applied when Approve was pressed
    try {
      await relay("responses/resumeDetached", {turn_id: turnId, resume});
      // The answer can come after the stream told more: the resumed run's events,
      // another interrupt, its end (decision 640). What the stream told stands; the
      // answer only says what nothing newer has said yet.
      if (chat.turnId === turnId && chat.seen === shown && chat.approval !== null) {
        approval(null);
        if (chat.running && !chat.interrupted) $("chat-status").textContent = "running";
      }
    } catch (e) {
      setError("Could not approve: " + e.message, {interrupted: chat.interrupted});
    }
  });

  $("stop").addEventListener("click", () => {
    if (chat.follower) chat.follower.stop();
    chat.follower = null;
    chat.running = false;
    $("chat-status").textContent = "stopped following";
    setError("Stopped. The run may still be going.", {interrupted: true});
  });

  $("check").addEventListener("click", async () => {
    try {
      const status = await call("TurnStatus", {turnId: chat.turnId});
      const state = stateWord(status.state);
      $("chat-status").textContent = state.toLowerCase();
      if (state === "UNKNOWN") {
        setError("the service does not know this run");
        return;
      }
      setError(state === "FAILED" ? "the run failed" : "", {retry: state === "FAILED"});
      if (!chat.follower) {
        // Picks up after the last event shown: the rest of the run, then its end.
        const replies = $("messages").querySelectorAll(".message.agent");
        attach(chat.turnId, replies[replies.length - 1], chat.seen);
      }
    } catch (e) {
      setError("Could not check the status: " + e.message, {interrupted: true});
    }
  });

  $("regenerate").addEventListener("click", () => {
    if (chat.running) return;
    const replies = $("messages").querySelectorAll(".message.agent");
    const reply = replies[replies.length - 1] || message("agent", "");
    reply.querySelector(".text").textContent = "";
    send({input: null, regenerate: true, thread_id: chat.threadId, background: true}, reply);
  });

  // The agent's graph, for the sidebar's entries: its nodes in order, as the LangGraph
  // API describes the assistant (a replica answers); none when it cannot say.
  async function loadGraph() {
    const agent = agentInput.value;
    let nodes = [];
    let messagesGraph = false;
    if (agent) {
      const path = "/assistants/" + encodeURIComponent(agent);
      const [graph, schemas] = await Promise.allSettled(
        [TK.getJson(path + "/graph"), TK.getJson(path + "/schemas")]);
      if (graph.status === "fulfilled") {
        nodes = (graph.value.nodes || []).map((n) => String(n.id))
          .filter((id) => id !== "__start__" && id !== "__end__");
      }  // else no replica describes it: the steps as they finish
      if (schemas.status === "fulfilled") {
        const input = schemas.value.input_schema || {};
        // A bridge that maps its input (the pipeline's {question, id}) says so.
        messagesGraph = Boolean(input.properties && input.properties.messages) && !schemas.value.input_mapped;
      }
    }
    if (agentInput.value === agent) {
      chat.nodes = nodes;
      chat.messagesGraph = messagesGraph;
      document.body.dataset.input = messagesGraph ? "messages" : "question";
      sidebar();
    }
  }
  agentInput.addEventListener("change", loadGraph);

  // The agents replicas announced, offered in the agent field; the first one when the
  // address names none.
  TK.getJson("/v1/agents").then((answer) => {
    const names = answer.agents || [];
    $("agents").replaceChildren(...names.map((name) => el("option", {value: name})));
    if (!agentInput.value && names.length) agentInput.value = names[0];
  }).catch(() => {}).finally(loadGraph);

  tokenBox();
  sidebar();
  buttons();
})();
