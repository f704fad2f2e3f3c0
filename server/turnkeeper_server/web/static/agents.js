// The agents page: ListAgents polled every two seconds; each agent's live replicas with
// their graph versions, and the turns no live replica may take (docs/versions.md).
"use strict";

(() => {
  const {call, el, stateWord, when, tokenBox} = TK;
  const POLL_MS = 2000;
  const box = document.getElementById("agents");
  const errorBox = document.getElementById("agents-error");

  function version(ref) {
    if (!ref || !ref.fingerprint) return "(none: an SDK from before versions)";
    const short = ref.fingerprint.slice(0, 12);
    return ref.label ? short + " (" + ref.label + ")" : short;
  }

  function table(head, rows) {
    return el("table", {},
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows));
  }

  function agent(a) {
    const replicas = (a.replicas || []).map((r) => el("tr", {"data-replica": r.replica},
      el("td", {class: "mono"}, r.replica),
      el("td", {class: "mono"}, r.incarnation),
      el("td", {class: "mono"}, version(r.graph)),
      el("td", {}, when(r.announcedAt))));
    const waiting = (a.waiting || []).map((w) => el("tr", {"data-turn-id": w.turnId},
      el("td", {class: "mono"},
        el("a", {href: "/console/turn.html?id=" + encodeURIComponent(w.turnId)}, w.turnId)),
      el("td", {class: "mono"}, w.threadId),
      el("td", {}, stateWord(w.state)),
      el("td", {class: "mono"}, version(w.waitingFor)),
      el("td", {}, w.detail)));
    return el("section", {class: "agent", "data-agent": a.agent},
      el("h3", {}, a.agent + " · version policy " + a.policy),
      replicas.length ? table(["Replica", "Incarnation", "Version", "Announced"], replicas)
        : el("p", {}, "no live replicas"),
      waiting.length
        ? el("div", {},
          el("p", {class: "error"}, waiting.length + " turn(s) no live replica may take"),
          table(["Turn", "Thread", "State", "Waits for", "Detail"], waiting))
        : el("p", {}, "no turn waits for a version"));
  }

  async function refresh() {
    try {
      const response = await call("ListAgents", {});
      errorBox.textContent = "";
      const agents = response.agents || [];
      box.replaceChildren(...(agents.length ? agents.map(agent)
        : [el("p", {}, "no agents announced")]));
    } catch (e) {
      errorBox.textContent = e.code === "unauthenticated" || e.code === "permission_denied"
        ? "The agents page needs an operator token: " + e.message
        : "Could not list agents: " + e.message;
    }
  }

  function loop() {
    refresh().finally(() => setTimeout(loop, POLL_MS));
  }

  tokenBox();
  loop();
})();
