// One turn: its facts (GetTurn), its events live over SSE (a reset clears the list and
// is kept in the resets list above it), and the actions its state allows.
"use strict";

(() => {
  const {call, getJson, follow, el, stateWord, when, tokenBox} = TK;
  const turnId = new URLSearchParams(location.search).get("id") || "";
  const timeline = document.getElementById("timeline");
  const resets = document.getElementById("resets");
  let role = null;
  let ended = false;

  document.getElementById("turn-id").textContent = turnId;

  function fact(name, value) {
    return [el("dt", {}, name), el("dd", {"data-fact": name}, value)];
  }

  function json(value) {
    return value === undefined ? "" : JSON.stringify(value);
  }

  // Where the turn was last rewound to: the reset this page saw, else (the rewind
  // came before the page opened) the newest retained event an earlier attempt wrote,
  // since a re-drive deletes what its turn's events had after the boundary.
  function boundary(turn, lastReset) {
    if (lastReset) return "seq " + lastReset.dataset.boundary;
    if (!turn.rewinds) return "not rewound";
    let seq = 0;
    for (const li of timeline.querySelectorAll("li[data-seq]")) {
      if (Number(li.dataset.attempt) < (turn.attempts || 0)) seq = Math.max(seq, Number(li.dataset.seq));
    }
    return "seq " + seq;
  }

  function showTurn(turn) {
    const state = stateWord(turn.state);
    const owner = turn.owner || {};
    const lastReset = resets.lastElementChild;
    document.getElementById("facts").replaceChildren(
      ...fact("state", el("span", {class: "state state-" + state, id: "state"}, state)),
      // Why nobody runs it, when the service knows (an agent no replica announced).
      ...(turn.detail ? fact("waiting", el("span", {class: "error"}, turn.detail)) : []),
      ...fact("agent", turn.agent),
      ...fact("thread", turn.threadId),
      ...fact("attempts", String(turn.attempts)),
      ...fact("last seq", String(turn.lastSeq)),
      ...fact("owner", owner.replica ? owner.replica + " / " + owner.incarnation : "none"),
      ...fact("lease until", when(owner.leaseExpiresAt) || "none"),
      ...fact("rewinds", String(turn.rewinds)),
      ...fact("boundary", boundary(turn, lastReset)),
      ...fact("error", turn.error || ""),
      ...fact("created", when(turn.createdAt)),
      ...fact("input", json(turn.input)),
    );
    const parked = state === "PARKED";
    document.getElementById("parked").hidden = !parked;
    if (parked) document.getElementById("interrupt").textContent = json(turn.interrupt);
    const mayRedrive = role === null || role === "operator" || role === "admin";
    document.getElementById("redrive").hidden = !(mayRedrive && state === "RUNNING");
    // An agent token may cancel its own turns as well; the service has the last word.
    const mayCancel = mayRedrive || role === "agent";
    const live = state === "RUNNING" || state === "PARKED" || state === "QUEUED";
    document.getElementById("cancel").hidden = !(mayCancel && live);
  }

  async function refresh() {
    try {
      const response = await call("GetTurn", {turnId});
      document.getElementById("turn-error").textContent = "";
      showTurn(response.turn);
      await refreshWebhook(response.turn.threadId);
    } catch (e) {
      document.getElementById("turn-error").textContent = e.message;
    }
    await refreshEffects();
  }

  // A LangGraph run's webhook (GET /threads/{thread}/runs/{run}/webhook): its
  // delivery's state and every attempt at it, in flight ones too.
  function attemptRow(a) {
    return el("tr", {"data-attempt": String(a.attempt), "data-outcome": a.outcome},
      el("td", {}, String(a.attempt)),
      el("td", {class: "mono"}, a.replica || ""),
      el("td", {}, a.started_at || ""),
      el("td", {}, a.finished_at || ""),
      el("td", {}, a.outcome),
      el("td", {}, a.http_status == null ? "" : String(a.http_status)),
      el("td", {class: "mono"}, a.detail || ""));
  }

  // Looked at again every second while the delivery is waiting or due, so each
  // attempt shows as it is made.
  let webhookTimer = null;

  async function refreshWebhook(threadId) {
    clearTimeout(webhookTimer);
    const body = document.querySelector("#webhook-attempts tbody");
    const note = document.getElementById("webhook-note");
    try {
      const path = "/threads/" + encodeURIComponent(threadId) + "/runs/" +
        encodeURIComponent(turnId) + "/webhook";
      const found = await getJson(path);
      body.replaceChildren(...found.attempts.map(attemptRow));
      const w = found.webhook;
      note.textContent = w
        ? w.url + ": " + w.state + (w.next_attempt_at && w.state === "pending"
          ? ", next attempt " + w.next_attempt_at : "") + (w.last_error ? " (" + w.last_error + ")" : "")
        : "no webhook";
      if (w && (w.state === "waiting" || w.state === "pending")) {
        webhookTimer = setTimeout(() => refreshWebhook(threadId), 1000);
      }
    } catch (e) {
      body.replaceChildren();
      note.textContent = e.message;
    }
  }

  // The turn's effect ledger (ListEffects): operators, admins and the turn's own
  // agent read it; another token sees the service's refusal instead.
  function effectRow(f) {
    const state = (f.state || "").replace("EFFECT_STATE_", "");
    const outcome = state === "SUPERSEDED" ? f.detail || "" : f.outcomeJson || "";
    return el("tr", {"data-key": f.key, "data-state": state},
      el("td", {class: "mono"}, f.key),
      el("td", {}, f.name),
      el("td", {}, state),
      el("td", {}, (f.policy || "").replace("EFFECT_POLICY_", "").toLowerCase()),
      el("td", {}, String(f.attempt || 0)),
      el("td", {class: "mono"}, f.argsJson || ""),
      el("td", {class: "mono"}, outcome));
  }

  async function refreshEffects() {
    const body = document.querySelector("#effects tbody");
    const note = document.getElementById("effects-note");
    try {
      const effects = (await call("ListEffects", {turnId})).effects || [];
      body.replaceChildren(...effects.map(effectRow));
      note.textContent = effects.length ? "" : "no effects recorded";
    } catch (e) {
      body.replaceChildren();
      note.textContent = e.message;
    }
  }

  function eventItem(e) {
    return el("li", {"data-seq": String(e.seq), "data-type": e.type, "data-attempt": String(e.attempt)},
      el("span", {class: "mono"}, "#" + e.seq),
      el("span", {}, "attempt " + e.attempt),
      el("span", {class: "mono"}, e.type),
      el("pre", {class: "mono"}, json(e.data)));
  }

  function start() {
    follow(turnId, {
      onReset(r) {
        timeline.replaceChildren();
        const text = r.local
          ? "rewound while disconnected: replaying from seq 1 (attempt " + r.attempt + ")"
          : "reset: rewound to seq " + r.seq + " by attempt " + r.attempt + "; replaying from seq 1";
        resets.append(el("li", {class: "reset", "data-boundary": String(r.seq),
          "data-attempt": String(r.attempt)}, text));
        refresh();
      },
      onEvent(e) {
        timeline.append(eventItem(e));
        // A superseded effect is announced by an event; the ledger changed with it.
        if (e.type === "effect.superseded") refreshEffects();
      },
      onEnd(end) {
        ended = true;
        document.getElementById("stream-status").textContent = "ended (" + end.state + ")";
        refresh();
      },
      onStatus(s) {
        if (!ended) document.getElementById("stream-status").textContent = s;
      },
      onError(e) {
        document.getElementById("stream-status").textContent = "refused: " + e.message;
      },
    });
  }

  document.getElementById("resume").addEventListener("click", async () => {
    const out = document.getElementById("resume-result");
    let value;
    try {
      value = JSON.parse(document.getElementById("resume-value").value);
    } catch (e) {
      out.className = "error";
      out.textContent = "not JSON: " + e.message;
      return;
    }
    try {
      const r = await call("ResumeDetached", {turnId, resume: value});
      out.className = "";
      out.textContent = "resumed (" + stateWord(r.turn.state) + (r.dispatched ? ", handed to a replica)" : ", waiting for a replica)");
      refresh();
    } catch (e) {
      out.className = "error";
      out.textContent = "refused (" + e.code + "): " + e.message;
    }
  });

  document.getElementById("redrive").addEventListener("click", async () => {
    const out = document.getElementById("action-result");
    try {
      const r = await call("Redrive", {turnId});
      const redriven = (r.turns || [])[0] || {};
      const turn = redriven.turn || {};
      out.className = redriven.failedAtCap ? "error" : "";
      // The number the turn's error and its turn.failed event give: the re-drives
      // charged to it, which the cap counts (decision 196).
      out.textContent = redriven.failedAtCap
        ? "FAILED at the re-drive cap after " + (turn.crashesCharged || 0) + " re-drives"
        : "re-driven";
      refresh();
    } catch (e) {
      out.className = "error";
      out.textContent = "refused (" + e.code + "): " + e.message;
    }
  });

  document.getElementById("cancel").addEventListener("click", async () => {
    const out = document.getElementById("action-result");
    try {
      const r = await call("CancelTurn", {turnId, reason: "cancelled from the console"});
      out.className = "";
      out.textContent = "cancelled (" + stateWord(r.turn.state) + ")";
      refresh();
    } catch (e) {
      out.className = "error";
      out.textContent = "refused (" + e.code + "): " + e.message;
    }
  });

  tokenBox();
  getJson("/v1/whoami").then((me) => { role = me.role; }).catch(() => {}).finally(() => {
    refresh();
    start();
    setInterval(() => { if (!ended) refresh(); }, 2000);
  });
})();
