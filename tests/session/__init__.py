"""Unit tests of the pure core: no sockets, no processes, no clock."""
