"""The modules `runnerd serve` defers still work for whoever does use them.

Each check runs in a fresh interpreter (the deferral is process-wide and
must come before quart is imported): the stand-ins, then the real modules
once one deferred name is used.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_fresh(code: str) -> str:
    """`code` after `defer_unused_modules()` and the serving stack's import."""
    prelude = (
        "from runnerd.daemon.deferred import defer_unused_modules\n"
        "defer_unused_modules()\n"
        "import sys, quart_trio, hypercorn.trio\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_nothing_deferred_is_loaded_until_used() -> None:
    out = run_fresh(
        """
        print(sorted(m for m in ("pdb", "http.server", "h2.connection") if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


def test_quarts_test_client_works_and_brings_the_real_modules() -> None:
    out = run_fresh(
        """
        import trio
        import quart.app
        app = quart_trio.QuartTrio("probe")

        @app.route("/")
        async def hello():
            return "hi"

        async def main():
            response = await app.test_client().get("/")
            print(response.status_code, (await response.get_data()).decode())

        trio.run(main)
        import quart.testing, quart.testing.utils
        # The client's class, checked against a deferred name: the real one.
        print(issubclass(type(app.test_client()), quart.testing.QuartClient))
        print(type(sys.modules["quart.testing"]).__name__, "pdb" in sys.modules)
        # A default bound at import is the real sentinel (compared by identity).
        json_default = quart.app.Quart.test_request_context.__kwdefaults__["json"]
        print(json_default is quart.testing.sentinel is quart.testing.utils.sentinel)
        """
    )
    assert out.split("\n")[:4] == ["200 hi", "True", "module True", "True"]


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("werkzeug.serving", "run_simple"),
        ("hypercorn.protocol.h2", "H2Protocol"),
        ("http.cookiejar", "CookieJar"),
    ],
)
def test_an_attribute_read_imports_the_real_module_bound_in_its_parent(
    module: str, name: str
) -> None:
    out = run_fresh(
        f"""
        import importlib
        stand_in = importlib.import_module("{module}")
        print(type(stand_in).__name__)
        getattr(stand_in, "not_a_name_here", None)  # any other name: the real module
        import {module}
        real = {module}
        print(real.__file__.endswith(".py"), callable(real.{name}), sys.modules["{module}"] is real)
        """
    )
    assert out.split("\n")[:2] == ["_StandIn", "True True True"]


def test_a_deferred_class_is_subclassed_and_checked_as_the_real_one() -> None:
    out = run_fresh(
        """
        from http.cookiejar import CookieJar  # the stand-in's proxy
        class Jar(CookieJar):
            pass
        import http.cookiejar as real
        print(Jar.__mro__[1] is real.CookieJar, isinstance(Jar(), CookieJar))
        print(issubclass(Jar, CookieJar), isinstance(real.CookieJar(), CookieJar))
        """
    )
    assert out.split("\n")[:2] == ["True True", "True True"]
