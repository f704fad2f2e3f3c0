"""The HTTP surface: the same TurnService contract for browsers, served on its own port.

- `connect.py`: the Connect protocol's unary JSON form of TurnService, generated from
  the service descriptor and run through the gRPC servicer itself;
- `sse.py`: a turn's events as Server-Sent Events, WatchTurn's semantics;
- `relay.py`: the chat panel's JSON-RPC calls to agents, over the service's NATS link;
- `auth.py`: the same bearer tokens and roles as on gRPC;
- `app.py`: the aiohttp application and its lifecycle, in the gRPC server's loop;
- `static/`: the console and the chat panel (HTML, JS, CSS; no build step).
"""
