"""The kubelet's image manager: resolve a container's image, with the real states and events.

A reference that does not parse: `InvalidImageName` (event InspectFailed). An
image the map knows: Pulling + Pulled ("Successfully pulled … in …") the first
time on this node or with `imagePullPolicy: Always`, else Pulled ("already
present on machine"). Unknown with policy Never: `ErrImageNeverPull`. Unknown
otherwise: `ErrImagePull` and `ImagePullBackOff` in turn, the back-off doubling
from `backoff_s` up to 300 s (real kubelets: 10 s), each step with its events.

Stuck states last until `stopping` is set; `pull` then returns None (the caller
starts nothing). Cancellation propagates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from . import kubelet_status as st
from .images import Image, ImageMap, InvalidReference, parse_image_ref
from .kubelet_events import NORMAL, WARNING, EventRecorder, PodRef, pulled_message

BACKOFF_CAP_S = 300.0
Obj = dict[str, object]


class ImagePuller:
    """One node's images: what it has pulled, and how it reports pulling."""

    def __init__(self, images: ImageMap, events: EventRecorder, backoff_s: float) -> None:
        self._images = images
        self._events = events
        self._pulled: set[str] = set()  # normalized refs this node has (IfNotPresent skips)
        self.backoff_s = backoff_s

    async def pull(
        self,
        ref: PodRef,
        spec: dict[str, object],
        model: st.ContainerModel,
        path: str,
        *,
        stopping: trio.Event,
        publish: Callable[[], Awaitable[None]],
    ) -> Image | None:
        """The image to run, or None once `stopping` is set while stuck in an error state.

        `model.state` is set for every waiting state and `publish()` writes it out.
        """

        async def event(type_: str, reason: str, message: str) -> None:
            await self._events.pod_event(ref, type_, reason, message, field_path=path)

        async def stuck(state: Obj) -> None:
            model.state = state
            await publish()
            await stopping.wait()

        text = str(spec.get("image", ""))
        try:
            parsed = parse_image_ref(text)
        except InvalidReference as exc:
            await event(WARNING, "InspectFailed", str(exc))
            await event(WARNING, "Failed", "Error: InvalidImageName")
            await stuck(st.waiting("InvalidImageName", str(exc)))
            return None
        image = self._images.resolve(parsed)
        policy = spec.get("imagePullPolicy")
        if image is not None:
            model.image_id = parsed.image_id
            if policy == "Always" or (policy != "Never" and parsed.normalized not in self._pulled):
                began = trio.current_time()
                await event(NORMAL, "Pulling", f'Pulling image "{text}"')
                await event(NORMAL, "Pulled", pulled_message(text, trio.current_time() - began))
                self._pulled.add(parsed.normalized)
            else:
                await event(
                    NORMAL, "Pulled", f'Container image "{text}" already present on machine'
                )
            return image
        if policy == "Never":
            message = st.never_pull_message(text)
            await event(WARNING, "ErrImageNeverPull", message)
            await event(WARNING, "Failed", "Error: ErrImageNeverPull")
            await stuck(st.waiting("ErrImageNeverPull", message))
            return None
        await self._fail_forever(text, parsed.normalized, model, event, stopping, publish)
        return None

    async def _fail_forever(
        self,
        text: str,
        normalized: str,
        model: st.ContainerModel,
        event: Callable[[str, str, str], Awaitable[None]],
        stopping: trio.Event,
        publish: Callable[[], Awaitable[None]],
    ) -> None:
        """ErrImagePull and ImagePullBackOff in turn until `stopping` is set."""
        pull_message = st.pull_error_message(text, normalized)
        backoff_s = self.backoff_s
        while not stopping.is_set():
            await event(NORMAL, "Pulling", f'Pulling image "{text}"')
            await event(WARNING, "Failed", f'Failed to pull image "{text}": {pull_message}')
            await event(WARNING, "Failed", "Error: ErrImagePull")
            model.state = st.waiting("ErrImagePull", pull_message)
            await publish()
            with trio.move_on_after(min(self.backoff_s, backoff_s)):
                await stopping.wait()
            if stopping.is_set():
                return
            await event(NORMAL, "BackOff", f'Back-off pulling image "{text}"')
            await event(WARNING, "Failed", "Error: ImagePullBackOff")
            model.state = st.waiting("ImagePullBackOff", st.backoff_message(text, pull_message))
            await publish()
            with trio.move_on_after(backoff_s):
                await stopping.wait()
            backoff_s = min(backoff_s * 2, BACKOFF_CAP_S)
