# Before anything imports gRPC, for every entry point of the tests (pytest's
# tests/conftest.py, `python -m tests.faults`): its fork handlers off
# (tests/support/forking.py).
import tests.support.forking  # noqa: F401
