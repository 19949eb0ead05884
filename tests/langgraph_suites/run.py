"""Run LangGraph's own test suites against threadloom's classes and against the stock ones.

A manual check, not part of the README's test command (it downloads LangGraph's sdists,
so it needs the network; docs/langgraph.md records its latest counts). From the
repository root:

    python -m tests.langgraph_suites.run [--work DIR]

What it does:

1. `pip download --no-binary :all: --no-deps` the sdists of the installed
   `langgraph-checkpoint-sqlite`, `langgraph-checkpoint` and `langgraph` (they ship their
   `tests/`), and `pip install --target` what those tests import beyond this environment
   (`pytest-asyncio`, `pytest-mock`, `redis`, `syrupy`), all under `--work` (default: a
   `langgraph-suites` folder in the system's temporary folder); nothing is installed into
   the environment.
2. Runs each suite twice with pytest, stock and with `threadloom_shim` (the plugin beside
   this file, which puts `Saver`, `AsyncSaver`, `Store`, `AsyncStore` and a `":memory:"`
   `Store` where the tests import `SqliteSaver`, `AsyncSqliteSaver`, `SqliteStore`,
   `AsyncSqliteStore` and `InMemoryStore`): `libs/checkpoint-sqlite/tests` whole,
   `libs/checkpoint/tests/test_store.py`, and the cases of `libs/langgraph/tests` run with
   the `sqlite`, `sqlite_aes` and `sqlite_aio` savers (`-k sqlite`, `NO_DOCKER=true`).
3. Runs `langgraph-checkpoint-conformance` on SqliteSaver (its sync methods),
   AsyncSqliteSaver, Saver (sync) and AsyncSaver.
4. Prints the counts side by side, then every test whose outcome differs.

Exit status: 0 when it ran (differences are reported, not judged: docs/langgraph.md
names each deliberate one), 1 when a step could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import itertools
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: (distribution, the pytest arguments run inside its sdist).
SUITES = (
    ("langgraph-checkpoint-sqlite", ("tests",)),
    ("langgraph-checkpoint", ("tests/test_store.py",)),
    # The library's cases parametrized with the sqlite, sqlite_aes and sqlite_aio savers
    # (NO_DOCKER: without the PostgreSQL and Redis ones).
    ("langgraph", ("tests", "-k", "sqlite")),
)
#: What LangGraph's test modules import beyond threadloom's own test environment.
PLUGINS = ("pytest-asyncio", "pytest-mock", "redis", "syrupy")


@dataclass
class Outcomes:
    """Each test's outcome in one run: passed, failed, error or skipped."""

    by_test: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return sum(1 for found in self.by_test.values() if found == outcome)

    def line(self) -> str:
        failed = self.count("failed") + self.count("error")
        return f"{self.count('passed')} passed, {failed} failed, {self.count('skipped')} skipped"


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: pip {' '.join(args)} failed:\n{done.stderr[-2000:]}")


def sdist(distribution: str, work: Path) -> Path:
    """The extracted sdist of the installed version of `distribution`."""
    version = importlib.metadata.version(distribution)
    stem = f"{distribution.replace('-', '_')}-{version}"
    tree = work / stem
    if not tree.is_dir():
        archive = work / f"{stem}.tar.gz"
        if not archive.exists():
            pip("download", f"{distribution}=={version}", "--no-binary", ":all:", "--no-deps",
                "-d", str(work))  # fmt: skip
        with tarfile.open(archive) as opened:
            opened.extractall(work, filter="data")
    if not (tree / "tests").is_dir():
        raise SystemExit(f"error: the {distribution} {version} sdist holds no tests/")
    return tree


def plugins(work: Path) -> Path:
    target = work / "plugins"
    if not all((target / name.replace("-", "_")).is_dir() for name in PLUGINS):
        pip("install", "--no-deps", "--target", str(target), *PLUGINS)
    return target


def run_suite(tree: Path, paths: tuple[str, ...], deps: Path, *, ours: bool, out: Path) -> Outcomes:
    """Run pytest on `paths` of `tree`; with `ours`, through the shim."""
    path = [str(deps)] + ([str(HERE), str(ROOT / "src")] if ours else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "NO_DOCKER": "true"}
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "-W", "ignore", f"--junitxml={out}"]  # fmt: skip
    if ours:
        command += ["-p", "threadloom_shim"]
    subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if not out.exists():
        raise SystemExit(f"error: pytest wrote no report for {tree.name} {paths}")
    return parse(out)


def parse(report: Path) -> Outcomes:
    found = Outcomes()
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
        found.by_test[name] = outcome
    return found


# -- conformance -----------------------------------------------------------------------------


def conformance() -> dict[str, tuple[int, int]]:
    """(passed, failed) checks of every capability, per saver."""
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))
    from tests.engine.test_conformance import _ORDER, _implements, _SyncFamily
    from threadloom import AsyncSaver, Saver

    work = Path(tempfile.mkdtemp(prefix="threadloom-conformance-"))
    counter = itertools.count()

    def threadloom(cls: Any, sync: bool) -> Callable[[], AsyncIterator[Any]]:
        async def make() -> AsyncIterator[Any]:
            saver = cls(work / f"c-{next(counter)}.db")
            try:
                yield _SyncFamily(saver) if sync else saver
            finally:
                saver.close()

        return make

    async def sqlite_sync() -> AsyncIterator[Any]:
        with SqliteSaver.from_conn_string(":memory:") as saver:
            yield _SyncFamily(saver)

    async def sqlite_async() -> AsyncIterator[Any]:
        async with AsyncSqliteSaver.from_conn_string(":memory:") as saver:
            yield saver

    # (factory, the class whose sync methods it presents, or None for its async ones):
    # through `_SyncFamily` every capability looks implemented, so a sync run checks only
    # the capabilities whose sync method the class overrides.
    factories: dict[str, tuple[Callable[[], AsyncIterator[Any]], Any]] = {
        "SqliteSaver (sync)": (sqlite_sync, SqliteSaver),
        "AsyncSqliteSaver": (sqlite_async, None),
        "threadloom Saver (sync)": (threadloom(Saver, True), Saver),
        "threadloom AsyncSaver": (threadloom(AsyncSaver, False), None),
    }
    counts: dict[str, tuple[int, int]] = {}
    for name, (factory, sync_class) in factories.items():
        capabilities = (
            {c.value for c in _ORDER if _implements(sync_class, "sync", c)}
            if sync_class is not None
            else None
        )
        registered = checkpointer_test(name=name)(factory)
        report = asyncio.run(validate(registered, capabilities=capabilities))
        results = report.results.values()
        counts[name] = (
            sum(r.tests_passed for r in results),
            sum(r.tests_failed for r in results),
        )
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(tempfile.gettempdir()) / "langgraph-suites"
    parser.add_argument("--work", type=Path, default=default, help="downloads and reports")
    args = parser.parse_args(argv)
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    deps = plugins(work)
    differences: list[str] = []
    print(f"{'suite':48} {'stock':34} threadloom")
    for distribution, paths in SUITES:
        tree = sdist(distribution, work)
        label = f"{tree.name} {' '.join(paths)}"[:48]
        stock = run_suite(tree, paths, deps, ours=False, out=work / f"{tree.name}-stock.xml")
        ours = run_suite(tree, paths, deps, ours=True, out=work / f"{tree.name}-ours.xml")
        print(f"{label:48} {stock.line():34} {ours.line()}")
        for test in sorted(stock.by_test.keys() | ours.by_test.keys()):
            before, after = stock.by_test.get(test, "-"), ours.by_test.get(test, "-")
            if before != after:
                differences.append(f"  {test}: stock {before}, threadloom {after}")
    for name, (passed, failed) in conformance().items():
        print(f"{'conformance: ' + name:48} {passed} passed, {failed} failed")
    print("\ntests whose outcome differs (stock -> threadloom):")
    print("\n".join(differences) or "  none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
