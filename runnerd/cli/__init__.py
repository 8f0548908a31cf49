"""The `runnerd` command line.

Owns `main` (the `runnerd` entry point: `serve`, `check-config`, and the
dispatch to the client verbs in `runnerd.client`). The client verbs keep
their own package because they must not import the server: a user types
them, and their start-up cost matters.

May import every layer.
"""
