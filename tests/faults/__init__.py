"""Fault injection: turns through real agents, a real service and a real
NATS while agents, the service and NATS are killed, turns poison their agents,
executors turn zombie and the disk refuses writes; invariants checked after every
round (tests/faults/invariants.py).

    pytest tests/faults                  # the CI-sized campaign, part of every run
    python -m tests.faults --full        # >= 200 agent kills; writes docs/reliability.md

``TURNKEEPER_FAULTS_SEED`` (pytest) or ``--seed`` replays a campaign's plan.
"""
