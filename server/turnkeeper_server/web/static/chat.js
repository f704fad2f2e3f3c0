// The chat panel: a conversation with one agent through the service's relay, and the
// Pipeline sidebar drawn from the run's `step` events.
//
// Sidebar rule: `step` is the step that finished last. Steps before it are complete,
// it is active, the rest pending; with no `step` yet all are pending (nothing spins in
// the first node). When a run ends its last step stays active, and a second question
// starts from that stale value until its first step writes `step` again. Each entry
// shows the contract's label (Analyze, Plan, Generate) with a spinner when active, a
// check when complete and a circle when pending, and the line to the next entry is
// done once the entry is complete (decision 191).
//
// Client rules: the run is followed by the panel's rule (TK.follow with its rules:
// TurnStatus on every idle gap, a 15-minute deadline; decision 190). Retry re-sends
// the last request; its only guards are a run in flight and no last request. Which
// errors offer it is this banner's decision (decision 194): a request that reached no
// agent, one the agent refused, and a run that ended FAILED, CANCELLED or unknown;
// not a stream that broke without the end or a request that got no answer, which may
// have gone on: Check status asks the service and re-attaches or concludes.
// Re-attaching resumes after the last event shown (Last-Event-ID), so nothing is shown
// twice. What was shown (the answer so far) stays until a new run writes over it.
"use strict";

(() => {
  const {call, follow, el, tokenBox, headers, errorOf, ApiError, stateWord} = TK;
  // The pipeline's nodes and the contract's labels for them.
  const STEPS = [
    {id: "analyze", label: "Analyze"},
    {id: "plan", label: "Plan"},
    {id: "generate", label: "Generate"},
  ];
  const MARKERS = {active: "spinner", complete: "check", pending: "circle"};
  const params = new URLSearchParams(location.search);
  const agentInput = document.getElementById("agent");
  agentInput.value = params.get("agent") || "pipeline";

  const chat = {
    threadId: params.get("thread") || crypto.randomUUID(),
    step: null,          // the `step` value last seen on this thread
    turnId: null,        // the run being followed
    lastRequest: null,   // what Retry would send again
    running: false,
    offerRetry: false,   // the banner offers Retry for the error shown
    interrupted: false,
    follower: null,
    seen: null,          // {seq, attempt} of the last event applied from the run
    approval: null,      // the value of the run's pending interrupt(), while parked
  };

  const $ = (id) => document.getElementById(id);

  function sidebar() {
    const current = STEPS.findIndex((s) => s.id === chat.step);
    $("pipeline").replaceChildren(...STEPS.map((step, i) => {
      const state = current < 0 ? "pending" : i < current ? "complete" : i === current ? "active" : "pending";
      const marker = MARKERS[state];
      return el("li", {class: state, "data-step": step.id, "data-state": state},
        el("span", {class: "marker " + marker, "data-marker": marker, "aria-hidden": "true"}),
        el("span", {class: "label"}, step.label),
        i < STEPS.length - 1
          ? el("span", {class: "line", "data-line": state === "complete" ? "done" : "pending",
            "aria-hidden": "true"})
          : null);
    }));
  }

  function buttons() {
    $("submit").disabled = chat.running;
    $("stop").hidden = !chat.running;
    $("retry").hidden = !(chat.offerRetry && !chat.running && chat.lastRequest);
    $("check").hidden = !(chat.interrupted && chat.turnId);
    $("regenerate").hidden = chat.running || !chat.turnId || chat.interrupted;
  }

  // The run's pending approval: shown from its `interrupt` event until it is answered
  // or the run moves on; an interrupted stream leaves it shown.
  function approval(value) {
    chat.approval = value;
    $("approval").hidden = value === null;
    $("approval-value").textContent = value === null ? "" : JSON.stringify(value);
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
    chat.follower = follow(turnId, {
      onReset() {
        draft = "";
        chat.seen = null;
        approval(null);
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
        if (e.type === "step" && e.data && e.data.update && typeof e.data.update.step === "string") {
          chat.step = e.data.update.step;
          sidebar();
          const answer = answerOf(e.data.update);
          if (answer !== null) reply.querySelector(".text").textContent = answer;
        } else if (e.type === "token" && e.data && e.data.node === "generate") {
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
        $("chat-status").textContent = state.toLowerCase();
        if (state === "UNKNOWN") setError("the service does not know this run", {retry: true});
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
        setError("cannot follow the run: " + e.message);
      },
    }, after, {});
    buttons();
  }

  async function send(request, reply) {
    chat.lastRequest = request;
    chat.running = true;
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
    send({input: {question, id: crypto.randomUUID()}, thread_id: chat.threadId, background: true}, reply);
  });

  $("retry").addEventListener("click", () => {
    // Two guards only; whether to offer it was the banner's decision.
    if (chat.running || !chat.lastRequest) return;
    const replies = $("messages").querySelectorAll(".message.agent");
    send(chat.lastRequest, replies[replies.length - 1] || message("agent", ""));
  });

  $("approve").addEventListener("click", async () => {
    if (chat.approval === null || !chat.turnId) return;
    try {
      await relay("responses/resumeDetached", {turn_id: chat.turnId, resume: {approved: true}});
      approval(null);
      $("chat-status").textContent = "running";
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

  tokenBox();
  sidebar();
  buttons();
})();
