"""The modules `runnerd serve` defers still work for whoever does use them.

Each check runs in a fresh interpreter (the deferral is process-wide and
must come before quart is imported): the stand-ins, then the real modules
once one deferred name is used.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
        unused = ("pdb", "http.server", "h2.connection", "jinja2.environment")
        print(sorted(m for m in unused if m in sys.modules))
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


def test_templates_render_and_bring_the_real_jinja2(tmp_path: Path) -> None:
    # Quart's templating, deferred with jinja2 under it, still renders: a
    # string, and a file from the app's template folder (jinja2's
    # FileSystemLoader, named at import by flask's scaffold).
    (tmp_path / "page.html").write_text("<p>{{ greeting }}, {{ request.path }}</p>")
    out = run_fresh(
        f"""
        import trio
        from quart import render_template, render_template_string
        print(type(sys.modules["jinja2"]).__name__, "jinja2.environment" in sys.modules)
        app = quart_trio.QuartTrio("probe", template_folder={str(tmp_path)!r})

        @app.route("/string")
        async def string():
            return await render_template_string("{{{{ 6 * 7 }}}} <{{{{ tag }}}}>", tag="&")

        @app.route("/file")
        async def file():
            return await render_template("page.html", greeting="hello")

        async def main():
            client = app.test_client()
            for path in ("/string", "/file"):
                response = await client.get(path)
                print(response.status_code, (await response.get_data()).decode())

        trio.run(main)
        import jinja2, quart.templating
        print(type(sys.modules["jinja2"]).__name__, isinstance(app.jinja_env, jinja2.Environment))
        print(issubclass(quart.templating.Environment, jinja2.Environment))
        """
    )
    assert out.split("\n")[:5] == [
        "_StandIn False",
        "200 42 <&amp;>",
        "200 <p>hello, /file</p>",
        "module True",
        "True",
    ]
