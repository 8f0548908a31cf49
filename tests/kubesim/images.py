"""Which container images exist in the simulated cluster, and how each one runs.

Owns the image map (a fixture's choice: image name or pattern → `Image`),
image-reference parsing (what the kubelet rejects as `InvalidImageName`), and
the stand-in programs images put on PATH: `telo` (the kernel in kernel.py) and
`wget` (this file run as a script: a real HTTP fetch, so a body-fetch init
container exercises the daemon's bundle route end to end). Everything else a
container's command names (`sh`, `tar`, `cat`, ...) comes from the host.

This file is also executed as a program (`python images.py wget ...`), so it
imports only the standard library.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The interpreter stand-ins run under: isolated (-I), so no PYTHON* variable or
# user site of the host leaks into a container.
_PY = (sys.executable, "-I")
KERNEL_PROGRAM = (*_PY, str(HERE / "kernel.py"))
WGET_PROGRAM = (*_PY, str(HERE / "images.py"), "wget")


@dataclass(frozen=True)
class Image:
    """How the simulated runtime starts a container of one image.

    `entrypoint`/`cmd` are the image's ENTRYPOINT and CMD (a pod's `command`
    replaces the first, its `args` the second, as in Kubernetes). `programs`
    are stand-ins installed on the container's PATH ahead of the host's.
    """

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    programs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


SHELL_IMAGE = Image(cmd=("sh",), programs={"wget": WGET_PROGRAM})
KERNEL_IMAGE = Image(entrypoint=("telo",), cmd=("--help",), programs={"telo": KERNEL_PROGRAM})


# Images whose `telo run ENTRY` runs ENTRY under a host interpreter instead of
# the stand-in kernel: runnerd's end-to-end tests run the same `sh` and
# `python` bundles on both backends (the local backend's runtimes of those names).
INTERPRETER_IMAGES = {
    name: Image(
        entrypoint=("telo",),
        programs={
            "telo": (
                "/bin/sh",
                "-c",
                f'[ "$1" = run ] || exit 2; exec {shlex.join(argv)} "$2"',
                "telo",
            )
        },
    )
    for name, argv in (("sh", ("/bin/sh",)), ("python", (sys.executable, "-u")))
}


def build_app_image(entry: Path) -> Image:
    """A catalog-style app image whose own entrypoint runs the kernel on `entry` (a host path)."""
    return Image(entrypoint=("telo", "run", str(entry)), programs={"telo": KERNEL_PROGRAM})


class ImageMap:
    """Patterns (fnmatch) over familiar references, first match wins.

    A pattern without `:` or `@` matches the repository whatever the tag
    (`busybox` matches `docker.io/library/busybox:1.36`); one with a tag
    matches `repo:tag` (`telorun/node:0.3*`).
    """

    def __init__(self, entries: Sequence[tuple[str, Image]]) -> None:
        self._entries = list(entries)

    def resolve(self, ref: ImageRef) -> Image | None:
        for pattern, image in self._entries:
            subject = ref.familiar if (":" in pattern or "@" in pattern) else ref.repository
            if fnmatch.fnmatchcase(subject, pattern):
                return image
        return None


class FileImages(ImageMap):
    """`fallback`, after the images named in a JSON file (`{"name": [argv...]}`:
    an image whose ENTRYPOINT is that argv), read at each pull: a test adds
    the images its catalog names while the cluster runs (the standalone
    cluster's `--images-file`)."""

    def __init__(self, path: Path, fallback: ImageMap) -> None:
        super().__init__([])
        self._path = path
        self._fallback = fallback

    def resolve(self, ref: ImageRef) -> Image | None:
        import json

        try:
            named = json.loads(self._path.read_text())
        except FileNotFoundError:
            named = {}
        argv = named.get(ref.repository)
        if argv is not None:
            return Image(entrypoint=tuple(argv))
        return self._fallback.resolve(ref)


def build_default_images() -> ImageMap:
    """busybox/alpine-like images run the host shell; `telorun/node` runs the kernel."""
    return ImageMap(
        [
            ("busybox", SHELL_IMAGE),
            ("alpine", SHELL_IMAGE),
            ("*/busybox", SHELL_IMAGE),
            ("*/alpine", SHELL_IMAGE),
            ("telorun/node", KERNEL_IMAGE),
            *INTERPRETER_IMAGES.items(),
        ]
    )


# ---- image references (distribution/reference grammar, simplified) -------------------

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]{32,}))?$"
)


class InvalidReference(ValueError):
    """An image string the kubelet cannot parse (→ waiting reason InvalidImageName)."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference: `docker.io/library/busybox:latest` and its familiar forms."""

    domain: str
    path: str
    tag: str
    digest: str

    @property
    def repository(self) -> str:
        """Familiar repository name: `busybox`, `telorun/node`, `ghcr.io/x/y`."""
        if self.domain == "docker.io":
            return self.path.removeprefix("library/")
        return f"{self.domain}/{self.path}"

    @property
    def familiar(self) -> str:
        return f"{self.repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")

    @property
    def normalized(self) -> str:
        """What `containerStatuses[].image` shows: `docker.io/library/busybox:1.36`."""
        return f"{self.domain}/{self.path}:{self.tag}"

    @property
    def image_id(self) -> str:
        """A stable `imageID` (`repo@sha256:…`), derived from the name (no registry here)."""
        digest = self.digest or "sha256:" + hashlib.sha256(self.normalized.encode()).hexdigest()
        return f"{self.domain}/{self.path}@{digest}"


def parse_image_ref(image: str) -> ImageRef:
    """Parse like the kubelet's `ParseNormalizedNamed` + default tag; raises InvalidReference."""
    match = _REFERENCE.match(image)
    domain = match["domain"] if match else None
    is_registry = domain is not None and ("." in domain or ":" in domain or domain == "localhost")
    if match is None or not image or (domain and not is_registry and domain.lower() != domain):
        hint = ": repository name must be lowercase" if image.lower() != image else ""
        raise InvalidReference(
            f'Failed to apply default image tag "{image}": couldn\'t parse image name '
            f'"{image}": invalid reference format{hint}'
        )
    path = match["path"]
    if not is_registry:
        # No registry in the name: the first component belongs to the path (docker.io).
        path = f"{domain}/{path}" if domain else path
        domain = "docker.io"
        if "/" not in path:
            path = f"library/{path}"
    return ImageRef(str(domain), path, match["tag"] or "latest", match["digest"] or "")


# ---- the wget stand-in ---------------------------------------------------------------


def run_wget(argv: list[str]) -> int:
    """busybox-style `wget [-q] [-O FILE|-] [-T S] [--header H] URL`: a real HTTP(S) fetch."""
    import urllib.error
    import urllib.request

    out, quiet, timeout_s, headers, urls = "", False, 30.0, {}, []
    args = iter(_split_short_flags(argv))
    for arg in args:
        if arg == "-q":
            quiet = True
        elif arg in ("-O", "--output-document"):
            out = next(args, "-")
        elif arg in ("-T", "--timeout"):
            timeout_s = float(next(args, "30"))
        elif arg == "--header":
            name, _, value = next(args, ":").partition(":")
            headers[name.strip()] = value.strip()
        elif arg.startswith("-"):
            print(f"wget: unrecognized option '{arg}'", file=sys.stderr)
            return 1
        else:
            urls.append(arg)
    if len(urls) != 1:
        print("Usage: wget [-q] [-O FILE] [-T SEC] [--header 'H: V'] URL", file=sys.stderr)
        return 1
    url = urls[0]
    target = out or url.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "index.html"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout_s
        ) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        print(f"wget: server returned error: HTTP/1.1 {exc.code} {exc.reason}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"wget: can't connect to remote host: {reason}", file=sys.stderr)
        return 1
    if target == "-":
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
    else:
        Path(target).write_bytes(body)
        if not quiet:
            print(f"saving to '{target}'", file=sys.stderr)
    return 0


def _split_short_flags(argv: list[str]) -> list[str]:
    """`-qO-` → `-q -O -` (busybox getopt style)."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            if arg[1] == "q":
                out.append("-q")
                arg = "-" + arg[2:]
            if arg[1] in "OT" and len(arg) > 2:
                out += [arg[:2], arg[2:]]
                continue
        out.append(arg)
    return out


def build_wrapper_script(program: tuple[str, ...]) -> str:
    """The PATH entry for a stand-in program: a shell script that execs it."""
    return f'#!/bin/sh\nexec {shlex.join(program)} "$@"\n'


if __name__ == "__main__":
    if sys.argv[1:2] == ["wget"]:
        sys.exit(run_wget(sys.argv[2:]))
    sys.exit(f"usage: {sys.argv[0]} wget ARGS...")
