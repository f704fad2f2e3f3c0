"""turnkeeper's Python client: typed client, RemoteSaver, bridge and turn follower.

The generated stubs live in `turnkeeper.v1` (made by `python protos/generate.py`).
"""
