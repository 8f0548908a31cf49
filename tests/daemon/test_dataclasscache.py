"""The dataclass method cache (runnerd/daemon/dataclasscache.py), each case
in a fresh interpreter: what a class made from the cache does equals what
one compiled at start does, and a stale, corrupt or foreign cache changes
nothing but the time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runnerd.daemon import dataclasscache

pytestmark = pytest.mark.skipif(not dataclasscache.supported(), reason="CPython 3.11 only")

# A module with frozen and plain dataclasses, and what a user of them sees.
MODULE = """
from dataclasses import FrozenInstanceError, dataclass, field

@dataclass(frozen=True)
class Spec:
    name: str
    ports: tuple[int, ...] = ()
    env: dict = field(default_factory=dict, compare=False)

@dataclass(order=True)
class Seq:
    n: int
    label: str = "x"
"""
OBSERVE = """
import json, sys
from runnerd.daemon import dataclasscache
dataclasscache.install(__import__("pathlib").Path(sys.argv[1]), record=sys.argv[2] == "record")
sys.path.insert(0, sys.argv[3])
import sample
a, b = sample.Spec("a", (1, 2)), sample.Spec("a", (1, 2), {"K": "v"})
try:
    a.name = "b"
    frozen = "assigned"
except sample.FrozenInstanceError as exc:
    frozen = type(exc).__name__
seen = {
    "repr": repr(a), "eq": a == b, "hash": hash(a) == hash(b), "frozen": frozen,
    "order": sorted([sample.Seq(2), sample.Seq(1, "y")]) == [sample.Seq(1, "y"), sample.Seq(2)],
    "default": sample.Seq(3).label, "counts": dataclasscache.counts(),
}
if sys.argv[2] == "record":
    dataclasscache.write(__import__("pathlib").Path(sys.argv[1]))
print(json.dumps(seen))
"""


def _observe(tmp_path: Path, cache: Path, mode: str) -> dict[str, object]:
    (tmp_path / "sample.py").write_text(MODULE)
    done = subprocess.run(
        [sys.executable, "-c", OBSERVE, str(cache), mode, str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


def test_a_class_made_from_the_cache_behaves_as_one_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "methods.marshal"
    compiled = _observe(tmp_path, cache, "record")
    cached = _observe(tmp_path, cache, "read")
    taken, compiled_now = cached.pop("counts")  # type: ignore[misc]
    compiled.pop("counts")
    assert cached == compiled
    assert compiled["frozen"] == "FrozenInstanceError" and compiled["eq"] is True
    assert taken > 0 and compiled_now == 0  # every method came from the cache


def test_a_stale_cache_compiles_what_it_lacks(tmp_path: Path) -> None:
    cache = tmp_path / "methods.marshal"
    _observe(tmp_path, cache, "record")
    # The source changed after the cache was built: a field added.
    changed = MODULE.replace('    label: str = "x"', '    label: str = "x"\n    extra: int = 0')
    (tmp_path / "sample.py").write_text(changed)
    OBSERVE_CHANGED = OBSERVE.replace(
        "import sample", "import sample; assert sample.Seq(1).extra == 0"
    )
    done = subprocess.run(
        [sys.executable, "-c", OBSERVE_CHANGED, str(cache), "read", str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    taken, compiled = json.loads(done.stdout)["counts"]
    assert taken > 0 and compiled > 0  # Spec's methods cached, Seq's new ones compiled


@pytest.mark.parametrize(
    "content",
    [b"", b"not a cache at all", b"\x00\x00\r\n" + b"\xff" * 64],
    ids=["empty", "junk", "foreign"],
)
def test_a_corrupt_or_foreign_cache_is_ignored(tmp_path: Path, content: bytes) -> None:
    cache = tmp_path / "methods.marshal"
    cache.write_bytes(content)
    assert dataclasscache.read_cache(cache) == {}
    seen = _observe(tmp_path, cache, "read")
    taken, compiled = seen["counts"]  # type: ignore[misc]
    assert taken == 0 and compiled > 0 and seen["frozen"] == "FrozenInstanceError"


def test_the_daemon_build_covers_what_a_start_makes(tmp_path: Path) -> None:
    cache = tmp_path / "methods.marshal"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from runnerd.daemon import dataclasscache
        print(dataclasscache.build(Path({str(cache)!r})))
    """)
    built = int(subprocess.run([sys.executable, "-c", script], capture_output=True,
                               text=True, check=True).stdout)  # fmt: skip
    assert built > 100
    # A start's imports (the serve path, local backend) all found there.
    start = textwrap.dedent(f"""
        from pathlib import Path
        from runnerd.daemon import dataclasscache
        dataclasscache.install(Path({str(cache)!r}))
        import runnerd.daemon.main, runnerd.local.backend, runnerd.backends
        print(*dataclasscache.counts())
    """)
    taken, compiled = map(int, subprocess.run([sys.executable, "-c", start], capture_output=True,
                                              text=True, check=True).stdout.split())  # fmt: skip
    assert taken > 100 and compiled == 0
