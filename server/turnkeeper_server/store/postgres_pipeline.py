"""The PostgreSQL writer's connection: psycopg's pipeline mode, made to send all of
a statement however large it is (decision 269).

psycopg (3.3) runs libpq non-blocking. In pipeline mode it stops sending once its
own queue of commands is empty, whatever libpq's `flush()` answered, and then waits
only to read results (`_pipeline_communicate`; a sync's and a COMMIT's fetch). A
statement larger than the socket's buffers, a batch of large events say, leaves
its tail in libpq's output buffer: the server waits for the rest of the message,
psycopg waits for the server's answer, and neither ever comes. `SendingConnection`
waits to read *or write* for as long as libpq holds bytes to send, and sends them
as the socket takes them; an answer that arrives meanwhile is read as before.
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen
from psycopg.pq.abc import PGconn
from psycopg.waiting import Ready, Wait

RV = TypeVar("RV")


class SendingConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait to read first sends what libpq holds."""

    def wait(self, gen: PQGen[RV], *args: Any, **kwargs: Any) -> RV:
        return super().wait(sending(gen, self.pgconn), *args, **kwargs)


def sending(gen: PQGen[RV], pgconn: PGconn) -> PQGen[RV]:
    """`gen`, except that where it would wait only to read while libpq still holds
    bytes to send, it waits to read or write: writable, it sends more (libpq's
    `flush()` answers 1 while bytes remain) and waits again; readable, `gen` reads."""
    try:
        wait = next(gen)
        while True:
            pending = wait == Wait.R and pgconn.flush() == 1
            ready = yield (Wait.RW if pending else wait)
            if pending and not ready & Ready.R:
                continue  # only writable: send more, or wait to read once all is sent
            wait = gen.send(ready)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
