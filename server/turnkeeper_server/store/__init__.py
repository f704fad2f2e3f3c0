"""Storage: SQLite connections, PRAGMAs, the group-commit writer, migrations."""
