"""`python -m turnkeeper.operator` and the `turnkeeper` command."""

import sys

from turnkeeper._io_engine import prefer_iomgr


def main() -> int:
    # Before anything imports grpc: its I/O engine is chosen when it loads
    # (`turnkeeper serve` runs the service in this process).
    prefer_iomgr()
    from turnkeeper.operator._cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
