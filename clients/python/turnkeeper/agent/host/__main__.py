"""``python -m turnkeeper.agent.host langgraph.json`` (``turnkeeper agent`` runs it too)."""

import sys

from turnkeeper.agent.host._run import main

if __name__ == "__main__":
    sys.exit(main())
