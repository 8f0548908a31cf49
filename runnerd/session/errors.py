"""The session manager's refusals and failures, each with its HTTP answer as
data (`runnerd.errors.RunnerdError`). Pure."""

from __future__ import annotations

from runnerd.errors import RunnerdError


class StopFailed(RunnerdError):
    """The session did not reach a terminal status within the stop timeout,
    or (`reason` given) its backend refused to stop the workload, which is
    still running: the session is not marked stopped, a later stop may work."""

    code = "stop_failed"
    log_as_error = True

    def __init__(self, session_id: str, timeout_s: float, reason: str | None = None) -> None:
        super().__init__(
            f"session '{session_id}' did not stop within {timeout_s:g} s"
            if reason is None
            else f"session '{session_id}' could not be stopped and is still running: {reason}"
        )
        self.session_id = session_id
        self.timeout_s = timeout_s
        self.reason = reason


# Seconds a client should wait before retrying a start refused during shutdown
# (a restarting daemon is back within a few seconds under systemd).
SHUTDOWN_RETRY_AFTER_S = 5


class ManagerClosed(RunnerdError, RuntimeError):
    """`start()` outside `run()`, or after `stop_all()` began. Expected during
    shutdown: answered 503 with a hint to come back."""

    status_hint = 503
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__(
            "runnerd is shutting down and accepts no new sessions; retry later",
            headers={"retry-after": str(SHUTDOWN_RETRY_AFTER_S)},
        )


class DetachUnsupported(RunnerdError):
    """A detach asked of a backend that cannot leave its workloads running."""

    code = "detach_unsupported"

    def __init__(self, backend: str) -> None:
        super().__init__(
            f"the {backend} backend cannot leave sessions running for a successor daemon"
            " (detach is not supported); stop them instead"
        )
