"""A watch session's apps, in order: `AppSet`.

Owns the session's `AppChannel`s (declaration order, `PUT /apps` order once
applied), their generations (`runnerd.watch.runs.SessionRuns`) and what
outlives an app dropped from the set: its last `/io` seq by name (bounded,
`RETIRED_KEPT`), so a name given again continues its seqs and never reuses
one (a client resuming `/io` by `lastSeq` must not take new output for
what it saw; the output of its earlier life is gone, replayed as a gap).
`swap` replaces the set; kept apps keep their counters, output and slot,
new ones get the lowest free slots. The IO (stopping and starting each
app's generations) is the session's and the driver's.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from runnerd.session.apps import AppChannel
from runnerd.session.rings import ByteRing
from runnerd.watch.apps import AppSpec
from runnerd.watch.runs import RETIRED_KEPT, SessionRuns


class AppSet:
    """The apps of one session (see the module docstring)."""

    def __init__(
        self,
        apps: tuple[AppSpec, ...],
        *,
        ring_bytes: int,
        notify: Callable[[], None],
        session_id: str,
    ) -> None:
        self.runs = SessionRuns(app.name for app in apps)
        self._ring_bytes = ring_bytes
        self._notify = notify
        self._session_id = session_id
        self._retired_seqs: dict[str, int] = {}
        self.channels = {app.name: self._new_channel(app, slot) for slot, app in enumerate(apps)}

    def _new_channel(self, app: AppSpec, slot: int) -> AppChannel:
        return AppChannel(
            app,
            self.runs.apps[app.name],
            slot=slot,
            ring_bytes=self._ring_bytes,
            notify=self._notify,
            session_id=self._session_id,
            seq_floor=self._retired_seqs.pop(app.name, 0),
        )

    def adopt(
        self,
        name: str,
        *,
        slot: int,
        generation: int,
        open_: bool,
        seq_floor: int,
        kernel_frames: int = 0,
    ) -> None:
        """Continue app `name` where a previous daemon left it: its slot, its
        counter (and open generation), its seqs above `seq_floor`, the kernel
        frames of its process already projected."""
        channel = self.channels[name]
        channel.kernel_frames = kernel_frames
        channel.slot = slot
        channel.ring = ByteRing(self._ring_bytes, seq_floor)
        channel.runs.adopt(generation, open_, trio.current_time())

    def swap(self, apps: tuple[AppSpec, ...]) -> set[str]:
        """The set becomes `apps` (see the module docstring); the dropped
        channels are marked gone. Returns the names kept."""
        names = [app.name for app in apps]
        for name, channel in self.channels.items():
            if name not in names:
                channel.gone = True
                self._retired_seqs[name] = channel.ring.last_id
        while len(self._retired_seqs) > RETIRED_KEPT:
            del self._retired_seqs[next(iter(self._retired_seqs))]
        old = {name: c for name, c in self.channels.items() if name in names}
        self.runs.replace(names)
        used = {c.slot for c in old.values()}
        free = (slot for slot in range(len(old) + len(apps)) if slot not in used)
        for app in apps:
            if app.name in old:
                old[app.name].spec = app
        self.channels = {
            app.name: old.get(app.name) or self._new_channel(app, next(free)) for app in apps
        }
        return set(old)
