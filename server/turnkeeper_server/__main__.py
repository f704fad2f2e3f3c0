"""`python -m turnkeeper_server` and `turnkeeper-server` are `turnkeeper serve`."""

import sys

from turnkeeper._io_engine import prefer_iomgr


def main() -> int:
    # Before anything imports grpc: its I/O engine is chosen when it loads.
    prefer_iomgr()
    from turnkeeper_server.main import main as serve

    return serve()


if __name__ == "__main__":
    sys.exit(main())
