// The chat panel: a conversation with one agent through the service's relay, and a
// sidebar of the run's steps drawn from its `step` events, whatever the agent's graph.
//
// Sidebar rule: each `step` event is a node of the graph that finished; the nodes
// finished so far are complete, in the order they finished, and while the run goes
// on one more item is active (the node running now, not yet named). When the run
// ends the active item goes: the sidebar says what the header says (done: every
// step complete; parked, failed or cancelled: that word last). A new question starts
// an empty sidebar.
//
// Client rules: Retry re-sends the last request only after an error that is
// retryable (the request reached no agent); a stream that broke without the end is
// interrupted, not retryable: Check status asks the service and re-attaches or
// concludes. Re-attaching resumes after the last event shown (Last-Event-ID), so
// nothing is shown twice.
"use strict";

(() => {
  const {call, follow, el, tokenBox, headers, errorOf, ApiError, stateWord} = TK;
  const params = new URLSearchParams(location.search);
  const agentInput = document.getElementById("agent");
  agentInput.value = params.get("agent") || "";

  const chat = {
    threadId: params.get("thread") || crypto.randomUUID(),
    steps: [],           // the nodes of the run that finished, in order
    ended: null,         // how the run ended (its state's word), null while it runs
    turnId: null,        // the run being followed
    lastRequest: null,   // what Retry would send again
    running: false,
    retryable: false,
    interrupted: false,
    follower: null,
    seen: null,          // {seq, attempt} of the last event applied from the run
  };

  const $ = (id) => document.getElementById(id);

  function sidebar() {
    const items = chat.steps.map((name) => el("li", {class: "complete", "data-step": name, "data-state": "complete"}, name));
    if (chat.running) {
      items.push(el("li", {class: "active", "data-step": "", "data-state": "active"}, "running"));
    } else if (chat.ended && chat.ended !== "done") {
      items.push(el("li", {class: chat.ended, "data-step": "", "data-state": chat.ended}, chat.ended));
    }
    $("pipeline").replaceChildren(...items);
  }

  function buttons() {
    sidebar();
    $("submit").disabled = chat.running;
    $("stop").hidden = !chat.running;
    $("retry").hidden = !(chat.retryable && !chat.running && chat.lastRequest);
    $("check").hidden = !(chat.interrupted && chat.turnId);
    $("regenerate").hidden = chat.running || !chat.turnId || chat.interrupted;
  }

  function setError(text, {retryable = false, interrupted = false} = {}) {
    $("chat-error").textContent = text;
    chat.retryable = retryable;
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
        data.message || reply.error.message, 200, {dispatched: true});
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
    chat.follower = follow(turnId, {
      onReset() {
        draft = "";
        chat.seen = null;
        chat.steps = [];
        sidebar();
        reply.querySelector(".text").textContent = "";
      },
      onEvent(e) {
        chat.seen = {seq: e.seq, attempt: e.attempt};
        reply.dataset.lastSeq = String(e.seq);
        if (e.type === "step" && e.data && typeof e.data.node === "string") {
          chat.steps.push(e.data.node);
          sidebar();
          const answer = answerOf(e.data.update);
          if (answer !== null) reply.querySelector(".text").textContent = answer;
        } else if (e.type === "token" && e.data) {
          draft += e.data.text || "";
          reply.querySelector(".text").textContent = draft;
        } else if (e.type === "error") {
          setError("the agent failed: " + ((e.data && e.data.message) || "error"));
        }
      },
      onEnd(end) {
        chat.running = false;
        chat.follower = null;
        chat.ended = end.state.toLowerCase();
        sidebar();
        $("chat-status").textContent = chat.ended;
        if (end.state !== "DONE" && end.state !== "PARKED") setError("the run ended " + end.state.toLowerCase());
        buttons();
      },
      onStatus(s) {
        if (s === "reconnecting" && chat.running) {
          $("chat-status").textContent = "connection lost, re-attaching";
          setError("The stream was interrupted; the run may still be going.", {interrupted: true});
        } else if (s === "live") {
          $("chat-status").textContent = "running";
          if (chat.interrupted) setError("");
        }
      },
      onError(e) {
        chat.running = false;
        setError("cannot follow the run: " + e.message);
      },
    }, after);
    buttons();
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
      const retryable = e.body && e.body.dispatched === false;
      setError((retryable ? "Not sent: " : "Failed: ") + e.message, {retryable});
    }
  }

  $("submit").addEventListener("click", () => {
    const question = $("question").value.trim();
    if (!question || chat.running) return;
    $("question").value = "";
    message("user", question);
    const reply = message("agent", "");
    send({input: {question, id: crypto.randomUUID()}, thread_id: chat.threadId, background: true}, reply);
  });

  $("retry").addEventListener("click", () => {
    if (!chat.retryable || chat.running || !chat.lastRequest) return;
    const replies = $("messages").querySelectorAll(".message.agent");
    send(chat.lastRequest, replies[replies.length - 1] || message("agent", ""));
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
      setError(state === "FAILED" ? "the run failed" : "");
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

  // The agents replicas announced, offered in the agent field; the first one when the
  // address names none.
  TK.getJson("/v1/agents").then((answer) => {
    const names = answer.agents || [];
    $("agents").replaceChildren(...names.map((name) => el("option", {value: name})));
    if (!agentInput.value && names.length) agentInput.value = names[0];
  }).catch(() => {});

  tokenBox();
  sidebar();
  buttons();
})();
