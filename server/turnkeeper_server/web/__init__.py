"""The HTTP surface: the same TurnService contract for browsers, served on its own port.

- `connect.py`: the Connect protocol's unary JSON form of TurnService, run through
  the gRPC servicer's own methods as a typed protocol (`BrowserMethods`);
- `sse.py`: a turn's events as Server-Sent Events, WatchTurn's semantics, through
  the operations beneath both surfaces (`turnkeeper_server.operations`);
- `pump.py`: the one SSE pump of this stream and the LangGraph API's run streams;
- `relay.py`: the chat panel's JSON-RPC calls to agents, over the service's NATS link;
- `auth.py`: the same bearer tokens and roles as on gRPC;
- `app.py`: the aiohttp application and its lifecycle, in the gRPC server's loop;
- `static/`: the console and the chat panel (HTML, JS, CSS; no build step).
"""
