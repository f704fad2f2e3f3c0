"""gRPC's fork handlers off, in this process and in every child it starts. Every entry
point of the tests imports this module before gRPC: tests/conftest.py for pytest,
tests/faults/__init__.py for ``python -m tests.faults``.

The tests fork from a process whose gRPC threads are busy: nats-server is started
with a preexec_fn (PR_SET_PDEATHSIG) and pgserver's pg_ctl with user=, so subprocess
must fork() rather than vfork(). gRPC's pthread_atfork handlers, on by default in
grpcio's core, then run in the child: "Other threads are currently calling into gRPC,
skipping fork() handlers", and the child, holding half of gRPC's state, dies of
SIGSEGV or SIGABRT before it reaches exec. Those handlers exist for a child that goes
on using gRPC; every child here execs at once.
"""

from __future__ import annotations

import os
import sys

if "grpc" in sys.modules:
    raise RuntimeError("tests.support.forking must be imported before gRPC (fork support)")
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"
