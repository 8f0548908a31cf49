"""The test cluster (tests/kubesim) for the Kubernetes backend's scrapes."""

from tests.kubesim.conftest import kubesim  # noqa: F401
