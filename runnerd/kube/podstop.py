"""A session pod's deletes: a user stop's first, the run's teardown after.

Owns the two deletes of a session pod (`podrun.PodRun` decides when):

- `delete_for_stop(client, name)`, a user stop's first step (`Started.stop`):
  the pod's delete, which the apiserver must accept before the session is
  cancelled. Refused or failed, it raises `StopRefused` (the classified
  cause) and nothing else happens: the pod and the session run on, and a
  later stop may work. It goes out before the session's attach is closed,
  so N concurrent stops are N deletes in flight at once.
- `tear_down(client, ledger, name, sub, plan)`, the run's teardown on every
  path but a detach (`podphase.Teardown`): a pod whose stop was accepted is
  only waited for (until gone); any other is deleted then (with the grace
  on a stop, at once when it ended). The outcome goes to the `ledger`, so a
  refused or unanswered delete leaves the pod to the sweep.
"""

from __future__ import annotations

import logging

import trio

import runnerd.kube.errors as errors
from runnerd.backend import StopRefused
from runnerd.kube.client import KubeClient
from runnerd.kube.informer import GONE, PodSubscription
from runnerd.kube.ledger import PodLedger
from runnerd.kube.podphase import Teardown

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


async def delete_for_stop(client: KubeClient, name: str) -> None:
    """Delete pod `name` with its grace, for a user stop.

    Raises:
        StopRefused: the delete was refused or failed; the pod runs on.
    """
    try:
        await client.delete_pod(name, operation=OPERATION, grace_period_s=STOP_GRACE_S)
    except errors.KubeError as exc:
        cause = exc.__cause__ or exc
        log.warning("could not delete pod %s: %r", name, cause, extra={"pod": name})
        raise StopRefused(str(exc)) from exc


async def tear_down(
    client: KubeClient, ledger: PodLedger, name: str, sub: PodSubscription, plan: Teardown
) -> bool:
    """Carry out `plan` (never `LEAVE`) for pod `name`, at most STOP_WAIT_S:
    with a wait (a cancelled run), until the informer shows it gone. False:
    the apiserver did not take the delete (the ledger then has it abandoned)."""
    wait = plan in (Teardown.AWAIT_GONE, Teardown.DELETE_AND_WAIT)
    deleted = False
    with trio.move_on_after(STOP_WAIT_S):
        try:
            # A stop's delete already accepted: only the wait is left.
            existed = plan in (Teardown.AWAIT_GONE, Teardown.NOTHING) or await client.delete_pod(
                name, operation=OPERATION, grace_period_s=STOP_GRACE_S if wait else 0
            )
            deleted = True
        except errors.KubeError as exc:
            log.warning("could not delete pod %s: %r", name, exc.__cause__ or exc)
            return False
        finally:  # refused or unanswered: abandoned, the sweep deletes it later
            ledger.torn_down(name, deleted=deleted, now=trio.current_time())
        while wait and existed and sub.latest() is not GONE:
            await sub.next()
    return deleted
