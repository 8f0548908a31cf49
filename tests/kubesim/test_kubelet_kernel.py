"""The stand-in `telo` kernel as a program: bad scripts and options fail clearly, text is kept."""

from __future__ import annotations

from pathlib import Path

from trio import fail_after, run_process

from tests.kubesim.images import KERNEL_PROGRAM


async def telo(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    with fail_after(30):  # a kernel that hangs fails the test instead of the whole run
        result = await run_process(
            [*KERNEL_PROGRAM, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_unknown_directive_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    entry = tmp_path / "telo.yaml"
    entry.write_text("# a comment\nprint fine\nkind: Telo.Application\n")
    code, out, err = await telo("run", str(entry))
    assert code == 2 and out == ""  # checked before anything runs
    assert err.strip() == f"telo: {entry}:3: unknown directive 'kind:'"


async def test_bad_invocations_say_what_was_wrong(tmp_path: Path) -> None:
    code, _, err = await telo("run", str(tmp_path / "missing.yaml"))
    assert code == 1 and "cannot read" in err and "missing.yaml" in err
    code, _, err = await telo("run", str(tmp_path / "x"), "--bogus")
    assert code == 2 and "unknown option '--bogus'" in err
    code, out, _ = await telo("--help")
    assert code == 0 and out.startswith("usage: telo run ENTRY")


async def test_script_runs_in_order_keeping_text(tmp_path: Path) -> None:
    entry = tmp_path / "e.telo"
    entry.write_text("print  two spaces\necho > \nstderr oops\nexit 4\nprint never\n")
    code, out, err = await telo("run", str(entry), "--no-open", stdin=b"a\nquit\nb\n")
    assert (code, out, err) == (4, " two spaces\n> a\n", "oops\n")


async def test_directives_embedded_in_a_manifest_run_alone(tmp_path: Path) -> None:
    entry = tmp_path / "telo.yaml"
    entry.write_text(
        "kind: Telo.Application\nmetadata:\n  name: demo\n"
        "# kubesim: print from the manifest\n# kubesim: exit 3\n"
    )
    assert await telo("run", str(entry)) == (3, "from the manifest\n", "")
