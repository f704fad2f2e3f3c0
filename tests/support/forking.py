"""gRPC's fork handlers off, in this process and in every child it starts. The tests
package imports this module first (tests/__init__.py), before gRPC, whichever entry
point it is: pytest's tests/conftest.py, or ``python -m tests.faults``.

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
