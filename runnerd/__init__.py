"""runnerd: a host daemon serving the Telo runner `/v1` contract."""

__version__ = "0.1.0"
