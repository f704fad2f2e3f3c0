// The turns list: ListTurns polled every second with the filters; rows keyed by turn id
// and updated in place, so a state change shows without a reload.
"use strict";

(() => {
  const {call, getJson, el, stateWord, when, tokenBox} = TK;
  const POLL_MS = 1000;
  const body = document.querySelector("#turns tbody");
  const errorBox = document.getElementById("list-error");

  function filters() {
    const request = {pageSize: 200};
    const state = document.getElementById("f-state").value;
    const agent = document.getElementById("f-agent").value.trim();
    const thread = document.getElementById("f-thread").value.trim();
    if (state) request.state = state;
    if (agent) request.agent = agent;
    if (thread) request.threadId = thread;
    return request;
  }

  function since() {
    const value = document.getElementById("f-since").value;
    return value ? new Date(value).getTime() : null;
  }

  function row(turn) {
    const state = stateWord(turn.state);
    const owner = turn.owner ? turn.owner.replica : "";
    const link = el("a", {href: "/console/turn.html?id=" + encodeURIComponent(turn.turnId)},
      turn.turnId);
    return el("tr", {"data-turn-id": turn.turnId, "data-state": state},
      el("td", {class: "mono"}, link),
      el("td", {class: "state state-" + state}, state),
      el("td", {}, turn.agent),
      el("td", {class: "mono"}, turn.threadId),
      el("td", {}, String(turn.attempts)),
      el("td", {}, String(turn.lastSeq)),
      el("td", {class: "mono"}, owner),
      el("td", {}, when(turn.updatedAt)));
  }

  async function refresh() {
    try {
      const response = await call("ListTurns", filters());
      const from = since();
      const turns = response.turns.filter((t) => from === null || Date.parse(t.createdAt) >= from);
      errorBox.textContent = "";
      const existing = new Map([...body.children].map((tr) => [tr.dataset.turnId, tr]));
      const rows = turns.map((t) => {
        const fresh = row(t);
        const old = existing.get(t.turnId);
        // Replace only a row that changed: an unchanged row keeps its DOM node.
        if (old && old.outerHTML === fresh.outerHTML) return old;
        return fresh;
      });
      body.replaceChildren(...rows);
    } catch (e) {
      errorBox.textContent = e.code === "unauthenticated" || e.code === "permission_denied"
        ? "The turns list needs an operator token: " + e.message
        : "Could not list turns: " + e.message;
    }
  }

  async function health() {
    const box = document.getElementById("health-status");
    try {
      const h = await getJson("/v1/health");
      box.textContent = "service " + h.status + ", NATS " + h.nats;
    } catch (e) {
      box.textContent = "service unreachable";
    }
    try {
      const m = await getJson("/v1/metrics");
      const grid = document.getElementById("metrics");
      grid.replaceChildren(...Object.entries(m).map(([name, value]) => {
        const text = typeof value === "number" ? String(value)
          : Object.entries(value).map(([k, v]) => k + " " + v).join(", ");
        return el("div", {class: "metric"}, el("b", {}, text || "0"),
          el("span", {}, name.replace("turnkeeper_", "").replaceAll("_", " ")));
      }));
    } catch (e) {
      document.getElementById("metrics").textContent = "metrics: " + e.message;
    }
  }

  function loop() {
    refresh().finally(() => setTimeout(loop, POLL_MS));
  }

  tokenBox();
  document.getElementById("filters").addEventListener("input", refresh);
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  loop();
  health();
  setInterval(health, 5000);
})();
