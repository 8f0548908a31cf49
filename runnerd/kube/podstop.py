"""A session pod's deletion: a user stop's delete first, the run's teardown after.

Owns `PodStops` (one per backend):

- `stop(name)`, a user stop's first step (`Started.stop`): the pod's delete,
  which the apiserver must accept before the session is cancelled. Refused
  or failed, it raises `StopRefused` (the classified cause) and nothing else
  happens: the pod and the session run on, and a later stop may work. It
  goes out before the session's attach is closed, so N concurrent stops are
  N deletes in flight at once.
- `delete(name, sub, wait=)`, the run's teardown on every path but a detach:
  a pod whose stop was accepted is only waited for (until gone); any other
  is deleted then (with the grace on a stop, at once when it ended).

The backend's bookkeeping the reaper reads (`live`: pods not deleted yet;
`abandoned`: deletes given up on, which the sweep retries) is shared by
reference, so a refused teardown delete leaves the pod to the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import trio

import runnerd.kube.errors as errors
from runnerd.backend import StopRefused
from runnerd.kube.client import KubeClient
from runnerd.kube.informer import GONE, PodSubscription
from runnerd.kube.terminal import Splice, read_log

log = logging.getLogger(__name__)

OPERATION = "could not delete the session pod"
# A stopped session's pod gets this long to end (SIGTERM, then the kubelet's
# SIGKILL); runnerd waits for it to be gone at most STOP_WAIT_S, so a
# shutdown stays within the contract's 10 s whatever the cluster does.
STOP_GRACE_S = 1
STOP_WAIT_S = 5.0
# A session stopped before its attach came up: its output so far is read from
# the log for at most this long before the pod is deleted.
STOP_LOG_READ_S = 1.0


class PodStops:
    """See the module docstring. `live` and `abandoned` are the backend's."""

    def __init__(self, client: KubeClient, live: set[str], abandoned: dict[str, float]) -> None:
        self._client = client
        self._live = live
        self._abandoned = abandoned
        # Pods whose stop's delete was accepted: the teardown only waits.
        self._accepted: set[str] = set()
        # The splice of each supervised pod: a stop reads the log first if
        # no attach came up yet.
        self._splices: dict[str, Splice] = {}

    def stopper(self, name: str) -> Callable[[], Awaitable[None]]:
        """`Started.stop` for pod `name` (`stop`)."""
        return lambda: self.stop(name)

    def accepted(self, name: str) -> bool:
        """Whether a stop's delete of `name` was accepted (its cancellation follows)."""
        return name in self._accepted

    @contextmanager
    def supervising(self, name: str, splice: Splice) -> Iterator[None]:
        """While the pod's terminal is followed through `splice`."""
        self._splices[name] = splice
        try:
            yield
        finally:
            del self._splices[name]

    async def stop(self, name: str) -> None:
        """Delete pod `name` with its grace, for a user stop.

        Raises:
            StopRefused: the delete was refused or failed; the pod runs on.
        """
        splice = self._splices.get(name)
        if splice is not None and not splice.released:
            # No attach came up yet: what it wrote is only in the pod's log.
            with trio.move_on_after(STOP_LOG_READ_S):
                splice.release(await read_log(self._client, name))
        try:
            await self._client.delete_pod(name, operation=OPERATION, grace_period_s=STOP_GRACE_S)
        except errors.KubeError as exc:
            cause = exc.__cause__ or exc
            log.warning("could not delete pod %s: %r", name, cause, extra={"pod": name})
            raise StopRefused(str(exc)) from exc
        self._accepted.add(name)

    async def delete(self, name: str, sub: PodSubscription, *, wait: bool) -> bool:
        """Delete the pod; with `wait` (a stop), with a grace and until it is
        gone (at most STOP_WAIT_S); without (it ended, or never started), at
        once: there is nothing left in it to let finish. False: the apiserver
        did not take the delete (the pod is then `abandoned`)."""
        deleted = False
        with trio.move_on_after(STOP_WAIT_S):
            try:
                # A stop's delete already accepted: only the wait is left.
                existed = name in self._accepted or await self._client.delete_pod(
                    name, operation=OPERATION, grace_period_s=STOP_GRACE_S if wait else 0
                )
                deleted = True
            except errors.KubeError as exc:
                log.warning("could not delete pod %s: %r", name, exc.__cause__ or exc)
                return False
            finally:
                self._live.discard(name)
                self._accepted.discard(name)
                if not deleted:  # refused or unanswered: the sweep deletes it later
                    self._abandoned[name] = trio.current_time()
            while wait and existed and sub.latest() is not GONE:
                await sub.next()
        return deleted
