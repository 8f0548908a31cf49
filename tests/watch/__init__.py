"""Unit tests of watch sessions' pure core (`runnerd.watch`): no sockets, no processes, no clock."""
