"""Modules the serving stack imports that serving never uses, loaded on first use.

Owns `defer_unused_modules`, which `runnerd serve` calls before it imports
quart-trio and hypercorn: from then on the first import of a module of
`DEFERRED` gets a stand-in module, whose listed names are proxies. A proxy
used (or any other name read from the stand-in) imports the real module in
the stand-in's place and defers to it, so whoever does use one gets the
real thing; the daemon's start pays for none of them (bench/README.md,
"Start"):

- `quart.testing`, `quart_trio.testing`: the test client, imported by
  `quart.app` for class attributes and defaults; they pull `click.testing`
  and with it `pdb`, `bdb`, `cmd`, `glob`, `shlex`;
- `werkzeug.serving`: the development server (`run_simple`,
  `is_running_from_reloader`), imported by `werkzeug/__init__` and
  `flask.app`; it pulls `http.server` and `socketserver`;
- `hypercorn.protocol.h2`: HTTP/2, imported by `hypercorn.protocol` for the
  one constructor it calls when a client speaks h2 (ALPN, or the h2c
  preface: still served, its modules loaded then); it pulls `h2.connection`,
  `hpack`, `hyperframe` and `priority`;
- `http.cookiejar`: named in an annotation of `quart.typing`; it pulls
  `urllib.request`, `http.client` and most of `email` (the kubernetes
  backend's httpx imports it for its cookies: loaded then);
- `importlib.metadata`: installed packages' metadata, which `quart.cli` and
  `flask.cli` read for `--version` and their plugins' commands; it pulls
  `zipfile`, `csv` and `email` parsing;
- `hypercorn.asyncio`: hypercorn on asyncio, which `Quart.run` (the
  development server) serves with; runnerd serves with `hypercorn.trio`;
- `httpx._main`: httpx's command line (the Kubernetes backend's client is
  httpx), which imports `pygments` and, when installed, `rich` at import;
- `httpcore._async.http2`, `httpcore._sync.http2`: httpcore's HTTP/2 (the
  Kubernetes client speaks HTTP/1.1: `http2=False`), with `h2.connection`;
- `jinja2`, `flask.templating`, `quart.templating`: templates, which runnerd
  never renders (its errors are JSON). Flask's and quart's templating
  modules subclass jinja2's classes at import, so they are deferred with it;
  `flask`, `quart` and their app modules take the render functions and the
  default context processor from them (quart's coroutine functions stand in
  as coroutine functions: `ensure_async` tells them apart). About 25 ms of
  a start's CPU (bench/README.md).

Only a name listed here is read at import by those modules (the pinned
versions' `from X import Y` lines); a new version that reads another one at
import gets the real module at once (the stand-in's `__getattr__`), slower
but correct. A proxy defers to the real name when called, subclassed,
given to `isinstance` or read from; only `is` tells it apart. Nothing here
is a runnerd dependency: no import of them.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Coroutine, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

# The template render functions flask and quart both export.
_RENDER = ("render_template", "render_template_string", "stream_template", "stream_template_string")

# The names each module's importers take from it at import time: called
# later (a proxy), or (`VALUES`) compared by identity, so taken as they are
# from the submodule that defines them (imported through the stand-in's
# `__path__`, without the package's `__init__`).
DEFERRED: dict[str, tuple[str, ...]] = {
    "quart.testing": ("QuartClient", "QuartCliRunner", "TestApp"),
    "quart_trio.testing": ("TrioClient", "TrioTestApp"),
    "werkzeug.serving": ("run_simple", "is_running_from_reloader"),
    "hypercorn.protocol.h2": ("H2Protocol",),
    "hypercorn.asyncio": ("serve",),
    "httpx._main": ("main",),
    "httpcore._async.http2": ("AsyncHTTP2Connection",),
    "httpcore._sync.http2": ("HTTP2Connection",),
    "http.cookiejar": ("CookieJar",),
    "importlib.metadata": ("entry_points", "version"),
    "jinja2": ("BaseLoader", "Environment", "FileSystemLoader", "Template", "TemplateNotFound"),
    "flask.templating": (
        "DispatchingJinjaLoader",
        "Environment",
        "_default_template_ctx_processor",
        *_RENDER,
    ),
    "quart.templating": ("Environment", "_default_template_ctx_processor", *_RENDER),
}
# Of those, the coroutine functions: quart hands its default template
# context processor to `ensure_async`, which runs anything that is not one
# in a thread, so each stands in as a coroutine function of its own.
COROUTINES: dict[str, tuple[str, ...]] = {
    "quart.templating": ("_default_template_ctx_processor", *_RENDER),
}
VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "quart.testing": (
        "utils",
        (
            "make_test_body_with_headers",
            "make_test_headers_path_and_query_string",
            "make_test_scope",
            "no_op_push",
            "sentinel",
        ),
    ),
}


class _StandIn(types.ModuleType):
    """`sys.modules[name]` until the real module is needed."""

    def __init__(self, name: str, path: list[str] | None) -> None:
        super().__init__(name, f"stand-in for {name}, imported on first use")
        self._real: types.ModuleType | None = None
        if path is not None:  # a package: its submodules stay importable
            self.__path__ = path
        coroutines = COROUTINES.get(name, ())
        for attr in DEFERRED[name]:
            setattr(
                self, attr, _coroutine(attr, name) if attr in coroutines else _Proxy(attr, name)
            )
        submodule, values = VALUES.get(name, ("", ()))
        self._values = dict.fromkeys(values, f"{name}.{submodule}")

    def load(self) -> types.ModuleType:
        """The real module, imported in this stand-in's place (once); the
        stand-in's names become the real ones, for whoever still holds it."""
        if self._real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            self._real = importlib.import_module(self.__name__)
            _bind_submodules(self._real)
            for attr in DEFERRED[self.__name__]:
                setattr(self, attr, getattr(self._real, attr))
        return self._real

    def __getattr__(self, attr: str) -> Any:
        # Only names not set in __init__ get here (never `_real`, set first).
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._values:
            return getattr(importlib.import_module(self._values[attr]), attr)
        return getattr(self.load(), attr)


class _Proxy:
    """A deferred name, standing for the real `module.attr`: called,
    subclassed (`__mro_entries__`), in `isinstance`/`issubclass` or read
    from, it loads the real module and defers to the real name. An object,
    not a function: set as a class attribute (quart's `test_client_class =
    QuartClient`) it must not bind as a method."""

    def __init__(self, attr: str, module: str) -> None:
        self._attr, self._module = attr, module

    def _target(self) -> Any:
        return getattr(load(self._module), self._attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (self._target(),)

    def __instancecheck__(self, instance: object) -> bool:
        return isinstance(instance, self._target())

    def __subclasscheck__(self, subclass: type) -> bool:
        return issubclass(subclass, self._target())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._target(), name)

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._attr}>"


def _coroutine(attr: str, module: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    """A deferred coroutine function, standing for the real `module.attr`:
    a coroutine function itself (for `iscoroutinefunction`), whose call
    loads the real module and awaits the real one."""

    async def deferred(*args: Any, **kwargs: Any) -> Any:
        return await getattr(load(module), attr)(*args, **kwargs)

    deferred.__name__ = attr
    deferred.__qualname__ = f"<deferred {module}.{attr}>"
    return deferred


class _Loader(Loader):
    def __init__(self, path: list[str] | None) -> None:
        self._path = path

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        return _StandIn(spec.name, self._path)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing runs: that is the point."""


class _Finder(MetaPathFinder):
    """Answers each deferred module's first import with a stand-in (so the
    import system binds it in its parent package as it would the real one);
    every later import finds the real files."""

    def __init__(self) -> None:
        self.pending = set(DEFERRED)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        real = PathFinder.find_spec(fullname, path)
        if real is None:  # not installed: its importer fails as it would have
            return None
        locations = real.submodule_search_locations
        spec = ModuleSpec(fullname, _Loader(locations), is_package=locations is not None)
        spec.submodule_search_locations = locations
        return spec


_FINDER = _Finder()


def load(name: str) -> types.ModuleType:
    """The real module `name`, imported now if it was deferred."""
    module = sys.modules.get(name)
    if isinstance(module, _StandIn):
        return module.load()
    return module if module is not None else importlib.import_module(name)


def _bind_submodules(real: types.ModuleType) -> None:
    """Submodules imported under the stand-in (`quart.testing.utils`) are
    attributes of the real package too, as an import would have made them."""
    prefix = real.__name__ + "."
    for key, module in list(sys.modules.items()):
        child = key.removeprefix(prefix)
        if key.startswith(prefix) and "." not in child and not hasattr(real, child):
            setattr(real, child, module)


def defer_unused_modules() -> None:
    """From now on, the first import of a module of `DEFERRED` not yet
    imported gets its stand-in. Idempotent."""
    if _FINDER not in sys.meta_path:
        _FINDER.pending -= set(sys.modules)
        sys.meta_path.insert(0, _FINDER)
