"""The operator side: the `turnkeeper` command line (`python -m turnkeeper.operator`,
the entry point `turnkeeper.operator.__main__:main`). The command line is the
interface; the modules behind it are private."""

__all__: list[str] = []
