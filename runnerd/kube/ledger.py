"""The backend's record of its session pods, across runs and processes: pure.

Owns, for one `KubeBackend` (one daemon process), what is known about each
session pod by name, which the runs write and the background tasks read:

- **live**: created (or adopted) by this process and not deleted yet. The
  reaper (`on_restart = "reap"`) and recovery spare them; a detach leaves
  them live, for a successor to adopt.
- **stopping**: a user stop's delete was accepted (`Started.stop`): the
  run's cancellation follows, and its teardown only waits for the pod to be
  gone instead of deleting it again.
- **abandoned** (name → when last given up on or seen): creates given up on
  at a stop (the create may still land) and deletes that failed. The sweep
  deletes each once the informer lists it, and it stays abandoned until a
  delete succeeds; one not seen for ABANDONED_KEEP_S is forgotten (a create
  never lands that late).
- **stopped before**: the pods the previous process stopped but could not
  delete (`runnerd.kube.giveup` loads them): never adopted, abandoned from the
  start so the sweep deletes them.
- **give-up** (`undeleted`): at exit, what `giveup.save` writes for the next
  process.

Invariants: a name is stopping only while live; a name is live or not, and
independently abandoned or not (a create given up on stays live until its
run's teardown). No IO and no clock: `now` is passed in (trio's clock).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

# An abandoned pod not seen for this long is forgotten: past the client's own
# per-call deadline, so a create cut short at a stop has landed by then or never.
ABANDONED_KEEP_S = 120.0


class PodLedger:
    """See the module docstring. Every method is synchronous and never raises."""

    def __init__(self, stopped_before: Iterable[str] = (), now: float = 0.0) -> None:
        self._live: set[str] = set()
        self._stopping: set[str] = set()
        self.stopped_before = frozenset(stopped_before)
        self._abandoned = dict.fromkeys(self.stopped_before, now)

    # -- what a run records -------------------------------------------------

    def created(self, name: str) -> None:
        """Pod `name` is this process's: about to be created, or adopted."""
        self._live.add(name)

    def gave_up_create(self, name: str, now: float) -> None:
        """The create of `name` went unanswered past its grace: if it lands
        later, the sweep deletes it."""
        self._abandoned[name] = now

    def abandon(self, names: Iterable[str], now: float) -> list[str]:
        """The pods among `names` no run of this process owns (a previous
        process's watch pods nobody adopted) are given up on: the sweep
        deletes them. Returns those."""
        left = [name for name in names if name not in self._live]
        self._abandoned.update(dict.fromkeys(left, now))
        return left

    def stop_accepted(self, name: str) -> None:
        """A user stop's delete of `name` was accepted."""
        if name in self._live:
            self._stopping.add(name)

    def torn_down(self, name: str, *, deleted: bool, now: float) -> None:
        """The run's teardown is over: `deleted` (or already gone), or not
        (refused, failed, unanswered: the sweep deletes it later)."""
        self._live.discard(name)
        self._stopping.discard(name)
        if not deleted:
            self._abandoned[name] = now

    # -- what is read -------------------------------------------------------

    @property
    def live(self) -> frozenset[str]:
        return frozenset(self._live)

    def is_live(self, name: str) -> bool:
        return name in self._live

    def is_stopping(self, name: str) -> bool:
        """Whether a stop's delete of `name` was accepted (its cancellation follows)."""
        return name in self._stopping

    @property
    def abandoned(self) -> frozenset[str]:
        return frozenset(self._abandoned)

    # -- what the sweep does -----------------------------------------------

    def take_landed(self, seen: Collection[str], now: float) -> list[str]:
        """The abandoned pods among `seen` (the informer's names) that no run
        owns, to delete: each stays abandoned (its time refreshed) until
        `swept`. Forgets the abandoned not seen for ABANDONED_KEEP_S."""
        landed = [n for n in self._abandoned if n in seen and n not in self._live]
        for name in list(self._abandoned):
            if name in landed:
                self._abandoned[name] = now
            elif now - self._abandoned[name] > ABANDONED_KEEP_S:
                del self._abandoned[name]
        return landed

    def swept(self, name: str) -> None:
        """The sweep's delete of `name` succeeded."""
        self._abandoned.pop(name, None)

    # -- what the next process is told --------------------------------------

    def undeleted(self, seen: Collection[str] | None) -> set[str]:
        """At exit: the pods given up on that may still exist (a detach's stay
        live, for the successor to adopt, and are not among them). The
        previous process's are kept unless the cluster was listed (`seen`;
        None: not listed yet) and they were not in it."""
        if seen is None:
            return set(self._abandoned) | self.stopped_before
        return set(self._abandoned) | (self.stopped_before & set(seen))
