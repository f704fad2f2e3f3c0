"""The engine: the one floor the servicers (rpc/, web/), the reaper and the retention
sweeper go through to reach the journal and the store.

The concepts `Engine` composes:

- `turns` (engine/turns.py): every transition of a turn, one transaction each,
  and what follows its commit (watchers woken, the outbox, hand-offs); the reads
  TurnStatus, GetTurn and ListTurns answer with; WatchTurn (engine/watch.py);
- `checkpoints` (engine/checkpoints.py): LangGraph's saver operations, and how a
  graph step's batch of writes reaches the store;
- `handoffs` (engine/handoffs.py): work handed to live replicas over NATS, and
  stop notices to executors of turns the service ended;
- `effects` (engine/effects.py): the ledger of a turn's effects.
- `threads`, `assistants` (engine/threads.py, engine/assistants.py): the LangGraph
  API's threads and assistants, kept in the journal.
- `store` (engine/store_items.py): LangGraph's long-term memory (its BaseStore),
  kept in the journal.
- `crons` (engine/crons.py): the LangGraph API's crons and runs due later, kept
  in the journal, each tick claimed by one replica at a time.
- `versions` (engine/versions.py): the live replicas of each agent with the graph
  versions they announce (messaging/directory.py), and which of them the agent's
  version policy lets take a turn (docs/versions.md).
"""

from __future__ import annotations

import asyncio
import contextvars

from turnkeeper_server.engine.assistants import Assistants
from turnkeeper_server.engine.checkpoints import Checkpoints
from turnkeeper_server.engine.crons import Crons
from turnkeeper_server.engine.effects import Effects
from turnkeeper_server.engine.handoffs import Handoffs
from turnkeeper_server.engine.store_index import IndexConfig
from turnkeeper_server.engine.store_items import StoreItems, TtlConfig
from turnkeeper_server.engine.threads import Threads
from turnkeeper_server.engine.turns import Turns
from turnkeeper_server.engine.versions import Versions
from turnkeeper_server.engine.watch import Reset, TurnNotifier
from turnkeeper_server.journal.versions import VersionPolicies
from turnkeeper_server.messaging.directory import AgentDirectory
from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import Policy
from turnkeeper_server.store.contract import WRITE_FOLLOWED, WRITE_QUEUED, Store

__all__ = ["Checkpoints", "Effects", "Engine", "Handoffs", "Reset", "TurnNotifier", "Turns"]


class Engine:
    """Turns, checkpoints and hand-offs over one store (see the module docstring)."""

    def __init__(
        self,
        db: Store,
        policy: Policy,
        notifier: TurnNotifier,
        outbox: OutboxPublisher,
        link: NatsLink,
        metrics: Metrics,
        *,
        namespace: str = "default",
        dispatch_timeout: float = 2.0,
        store_ttl: TtlConfig | None = None,
        store_index: IndexConfig | None = None,
        version_policies: VersionPolicies | None = None,
    ) -> None:
        self.db = db
        self.policy = policy
        self.directory = AgentDirectory(link, prefix=policy.subject_prefix, namespace=namespace)
        self.versions = Versions(db, self.directory, version_policies or VersionPolicies())
        self.handoffs = Handoffs(
            link,
            policy,
            namespace=namespace,
            dispatch_timeout=dispatch_timeout,
            route=self.versions.route,
        )
        self.turns = Turns(db, policy, notifier, outbox, metrics, self.handoffs, self.versions)
        self.checkpoints = Checkpoints(db, notifier, policy)
        self.threads = Threads(db)
        self.assistants = Assistants(db)
        self.effects = Effects(db)
        self.store = StoreItems(db, store_ttl, store_index)
        self.crons = Crons(db)

    def pipelined(self, *, followed: bool) -> tuple[contextvars.Context, asyncio.Future[None]]:
        """A context to run one write's handler in, and a future set as soon as the
        store has queued that write (or once it is done, where the store does not
        queue writes): a caller that pipelines writes (a checkpoint stream's batch)
        starts the next one then, and order holds. `followed`: another write comes
        right after this one (store/contract.py's WRITE_QUEUED, WRITE_FOLLOWED)."""
        queued: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def mark(*_: object) -> None:
            if not queued.done():
                queued.set_result(None)

        context = contextvars.copy_context()
        context.run(WRITE_QUEUED.set, mark)
        context.run(WRITE_FOLLOWED.set, followed)
        return context, queued

    async def stop(self) -> None:
        """Cancel the hand-offs still under way (at shutdown)."""
        await self.handoffs.stop()
