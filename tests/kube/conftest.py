"""Fixtures for the Kubernetes backend's parts: the test cluster (tests/kubesim)."""

from tests.kubesim.conftest import apiserver, kubesim  # noqa: F401
