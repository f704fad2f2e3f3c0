"""Stops a test session's PostgreSQL and removes its files once the session's process
is gone, however it went: teardown, Ctrl-C, SIGKILL (tests/support/postgres.py).

Run as ``python pg_reaper.py PG_CTL PGDATA ROOT [USER]`` with a pipe as stdin. It waits
for the end of that pipe, which comes when the process that holds the other end
exits (the kernel closes it), then stops the server (a no-op when teardown already
did) and removes ROOT. In a session of its own, so a Ctrl-C aimed at the tests does
not end it first. Removing a few hundred databases' files happens here, not in a
test's teardown.
"""

from __future__ import annotations

import shutil
import subprocess
import sys


def main() -> None:
    pg_ctl, pgdata, root, *user = sys.argv[1:]
    sys.stdin.buffer.read()  # until the session's process has exited
    subprocess.run(
        [pg_ctl, "-D", pgdata, "-m", "immediate", "-w", "stop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        user=user[0] if user else None,
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
