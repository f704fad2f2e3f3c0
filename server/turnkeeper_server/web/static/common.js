// Shared by the console and the chat panel: the token, Connect calls, and a turn's
// event stream read with fetch() (EventSource cannot send an Authorization header).
"use strict";

const TK = (() => {
  const TOKEN_KEY = "turnkeeper.token";
  const SERVICE = "/turnkeeper.v1.TurnService/";

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const t = token();
    if (t) h["Authorization"] = "Bearer " + t;
    return h;
  }

  // An error a page can show: the service's Connect code and its message.
  class ApiError extends Error {
    constructor(code, message, status, body) {
      super(message);
      this.code = code;
      this.status = status;
      this.body = body || {};
    }
  }

  async function errorOf(response) {
    let body = {};
    try {
      body = await response.json();
    } catch (e) {
      body = {};
    }
    return new ApiError(body.code || "unknown", body.message || response.statusText,
      response.status, body);
  }

  // One unary TurnService call in the Connect protocol's JSON form.
  async function call(method, request) {
    const response = await fetch(SERVICE + method, {
      method: "POST",
      headers: headers({"Content-Type": "application/json", "Connect-Protocol-Version": "1"}),
      body: JSON.stringify(request || {}),
    });
    if (!response.ok) throw await errorOf(response);
    return response.json();
  }

  async function getJson(path) {
    const response = await fetch(path, {headers: headers()});
    if (!response.ok) throw await errorOf(response);
    return response.json();
  }

  // Parses SSE text into {event, id, data} frames; keeps a partial frame for later.
  function sseParser(onFrame) {
    let buffer = "";
    return (text) => {
      buffer += text.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const f = {event: "message", id: null, data: ""};
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") f.event = value;
          else if (field === "id") f.id = value;
          else if (field === "data") f.data += (f.data ? "\n" : "") + value;
        }
        if (f.data) onFrame(f);
      }
    };
  }

  // A panel's follow (docs/durable-execution.md, "The panel's rule"; decision 190): on
  // every idle gap in the event stream it asks TurnStatus instead of assuming the turn
  // is over. RUNNING, PARKED or QUEUED, or a service it cannot reach: keep waiting;
  // anything else concludes, after one more gap for the stream to bring the end
  // itself. The deadline ends the wait whatever TurnStatus says. The defaults are the
  // Python and Node followers' own.
  const FOLLOW_DEFAULTS = Object.freeze({idleMs: 5000, deadlineMs: 15 * 60 * 1000});
  const LIVE = ["RUNNING", "PARKED", "QUEUED"];

  // Follows a turn's events: onReset(reset), onEvent(event), onEnd(end), onStatus(text).
  // Reconnects after a drop with Last-Event-ID (and the attempt of that event, so the
  // service can tell a rewind that happened meanwhile). `after` ({seq, attempt}) starts
  // after an event already shown. With `rules` ({idleMs, deadlineMs}, or {} for the
  // defaults) it follows the panel's rule above; `end` is then also {state, by:
  // "status"} when TurnStatus concluded, or {state (last known), by: "deadline"}.
  // Returns {stop()}.
  function follow(turnId, handlers, after, rules) {
    let lastId = after ? after.seq : 0;
    let lastAttempt = after ? after.attempt : null;
    let stopped = false;
    let controller = null;
    let delay = 250;
    const status = handlers.onStatus || (() => {});
    const panel = rules ? Object.assign({}, FOLLOW_DEFAULTS, rules) : null;
    let idleTimer = null;
    let deadlineTimer = null;
    let lastState = null;
    // Stops everything and reports how the follow ended, once.
    function finish(end) {
      if (stopped) return;
      stopped = true;
      clearTimeout(idleTimer);
      clearTimeout(deadlineTimer);
      if (controller) controller.abort();
      handlers.onEnd && handlers.onEnd(end);
    }
    // An idle gap: look at the turn; `over` is the state a look found it ended in.
    function idle(over) {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(async () => {
        let state = null;
        try {
          state = stateWord((await call("TurnStatus", {turnId})).state);
        } catch (e) {
          state = null;  // unreachable: keep waiting
        }
        if (stopped) return;
        if (state !== null) lastState = state;
        if (state === null || LIVE.includes(state)) {
          idle(null);
        } else if (over !== null) {
          finish({state, by: "status"});  // a whole gap more and the stream brought nothing
        } else {
          idle(state);
        }
      }, panel.idleMs);
    }
    // Any frame from the stream: the gap starts again.
    function active() {
      if (panel && !stopped) idle(null);
    }
    if (panel) {
      deadlineTimer = setTimeout(() => finish({state: lastState, by: "deadline"}), panel.deadlineMs);
      idle(null);
    }

    async function once() {
      controller = new AbortController();
      const query = lastAttempt === null ? "" : "?attempt=" + lastAttempt;
      const response = await fetch("/v1/turns/" + encodeURIComponent(turnId) + "/events" + query, {
        headers: headers({"Last-Event-ID": String(lastId), "Accept": "text/event-stream"}),
        signal: controller.signal,
        cache: "no-store",
      });
      if (!response.ok) throw await errorOf(response);
      status("live");
      delay = 250;
      let ended = false;
      const parse = sseParser((f) => {
        if (stopped) return;
        active();
        const data = JSON.parse(f.data);
        if (f.event === "reset") {
          lastId = 0;
          lastAttempt = null;
          handlers.onReset && handlers.onReset(data);
        } else if (f.event === "event") {
          lastId = data.seq;
          lastAttempt = data.attempt;
          handlers.onEvent && handlers.onEvent(data);
        } else if (f.event === "end") {
          ended = true;
          if (panel) finish(Object.assign({by: "stream"}, data));
          else handlers.onEnd && handlers.onEnd(data);
        } else if (f.event === "error") {
          throw new ApiError(data.code, data.message, 200, data);
        }
      });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const {value, done} = await reader.read();
        if (done || stopped) break;
        parse(decoder.decode(value, {stream: true}));
      }
      return ended || stopped;
    }

    (async () => {
      while (!stopped) {
        try {
          if (await once()) return;
          status("reconnecting");
        } catch (e) {
          if (stopped) return;
          if (e instanceof ApiError && e.status >= 400 && e.status < 500 && e.status !== 429) {
            stopped = true;
            clearTimeout(idleTimer);
            clearTimeout(deadlineTimer);
            status("refused");
            handlers.onError && handlers.onError(e);
            return;
          }
          status("reconnecting");
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 4000);
      }
    })();

    return {
      stop() {
        stopped = true;
        clearTimeout(idleTimer);
        clearTimeout(deadlineTimer);
        if (controller) controller.abort();
      },
    };
  }

  // The token box in every page's header.
  function tokenBox() {
    const input = document.getElementById("token");
    const save = document.getElementById("token-save");
    if (!input || !save) return;
    input.value = token();
    save.addEventListener("click", () => {
      const value = input.value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      else sessionStorage.removeItem(TOKEN_KEY);
      location.reload();
    });
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("data-") || k.startsWith("aria-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children) {
      if (c !== null && c !== undefined) node.append(c);
    }
    return node;
  }

  function stateWord(state) {
    return String(state || "").replace("TURN_STATE_", "");
  }

  function when(ts) {
    return ts ? new Date(ts).toLocaleString() : "";
  }

  return {ApiError, call, getJson, follow, headers, errorOf, tokenBox, el, stateWord, when,
    sseParser, token, FOLLOW_DEFAULTS};
})();
