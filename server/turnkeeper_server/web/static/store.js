// The store page: LangGraph's store over the LangGraph API (POST /store/namespaces,
// POST /store/items/search), with the console's token as the service's key: every
// namespace with its item count, and the items of the one picked, newest first.
"use strict";

(() => {
  const {el, token, tokenBox} = TK;
  const NAMESPACES = 1000;
  const ITEMS = 1000;
  const list = document.getElementById("namespaces");
  const items = document.getElementById("items");
  const errorBox = document.getElementById("store-error");

  async function post(path, body) {
    const headers = {"Content-Type": "application/json"};
    // The LangGraph API's key: the service's token even where end users authenticate.
    if (token()) headers["X-Api-Key"] = token();
    const response = await fetch(path, {method: "POST", headers, body: JSON.stringify(body)});
    if (!response.ok) {
      // The LangGraph API answers an error as {"detail": ...}.
      const body = await response.json().catch(() => ({}));
      const error = new Error(body.detail || response.statusText);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  function table(head, rows) {
    return el("table", {},
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows));
  }

  // The items whose namespace is exactly `ns` (a search answers those under it too).
  async function itemsOf(ns) {
    const found = await post("/store/items/search",
      {namespace_prefix: ns, limit: ITEMS, refresh_ttl: false});
    const key = JSON.stringify(ns);
    return (found.items || []).filter((i) => JSON.stringify(i.namespace) === key);
  }

  async function show(ns) {
    const found = await itemsOf(ns);
    items.replaceChildren(
      el("h3", {}, ns.join(" / ")),
      table(["Key", "Value", "Updated"], found.map((i) => el("tr", {"data-key": i.key},
        el("td", {class: "mono"}, i.key),
        el("td", {class: "mono"}, JSON.stringify(i.value)),
        el("td", {}, new Date(i.updated_at).toLocaleString())))));
  }

  async function refresh() {
    try {
      const answer = await post("/store/namespaces", {limit: NAMESPACES});
      const namespaces = answer.namespaces || [];
      const counts = await Promise.all(namespaces.map(itemsOf));
      errorBox.textContent = "";
      list.replaceChildren(namespaces.length
        ? table(["Namespace", "Items"], namespaces.map((ns, n) => {
          const count = counts[n].length >= ITEMS ? ITEMS + "+" : String(counts[n].length);
          const link = el("a", {href: "#"}, ns.join(" / "));
          link.addEventListener("click", (e) => {
            e.preventDefault();
            show(ns).catch((err) => { errorBox.textContent = err.message; });
          });
          return el("tr", {"data-namespace": ns.join(".")},
            el("td", {class: "mono"}, link), el("td", {}, count));
        }))
        : el("p", {}, "the store holds no items"));
    } catch (e) {
      errorBox.textContent = e.status === 401 || e.status === 403
        ? "The store page needs an operator's token: " + e.message
        : "Could not read the store: " + e.message;
    }
  }

  tokenBox();
  refresh();
})();
