"""Which test modules the pure-Python pass runs: the ones that depend on the core's backend.

The README's test command runs the suite twice: whole on the backend `auto` picks (the C
core), then `THREADLOOM_BACKEND=python pytest --backend-only`, which collects only the
modules `selected` returns. `threadloom.core` is the one thing the variable changes: it
binds each core function to `core._native` or `core._python` once, at import
(src/threadloom/core/__init__.py); every layer above calls the same functions either way.

So a test above the core meets the backend only through the values those functions
return (and the errors they raise) for the inputs the test happens to produce, and that
agreement is held directly and more thoroughly by tests/core, in either pass:
test_differential.py runs every core function on generated inputs and edge sizes through
`python`, `native` and `native-portable` and requires exact agreement, bad arguments
included; test_vectors.py holds every backend to the golden vectors. A second full pass
re-checks that agreement only on the inputs the rest of the suite happens to make (the
engine's hashing, msgpack spans and CDC cuts of real checkpoints), at the price of a
whole pass. What it would catch and tests/core would not is an input of a kind the
differential tests do not generate; the answer to one is a case in test_differential.py,
or an entry in `ALSO`.

The pure-Python pass therefore runs:

- every test module whose code imports `threadloom.core` (at any depth: in a function
  too; `import threadloom.core`, `from threadloom.core... import`, `from threadloom import
  core`, or `threadloom.core` reached as an attribute), or imports, directly or through
  other modules under tests/, a module of tests/ that does, or sits below a conftest.py
  that does (its fixtures are code the tests run);
- the modules in `ALSO`: tests above the core whose oracle is outside threadloom and
  whose inputs pass through a core function chosen by the backend.

The rule reads test code only (never paths under src/), so engine modules can move.
tests/test_backend_selection.py fails when a module the rule names is not collected by
`--backend-only`, and checks the rule itself on a made-up tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: Test modules above the core that the pure-Python pass runs too (paths under tests/).
ALSO = (
    # The planner (list_refs, array_spans of the backend) against the released naas
    # planner's vectors, byte for byte.
    "protocol/test_vectors.py",
    # Vector search (vector_scores, vector_nearest, vector_top, vector_means of the
    # backend) through the store: the true similarity as the score, nothing lost.
    "store/test_vector_search.py",
)

CORE = "threadloom.core"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str) -> tuple[bool, set[str]]:
    """Whether the module at `path` reaches `threadloom.core`, and the modules it imports."""
    tree = ast.parse(path.read_text(), str(path))
    core = False
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.name)
                core |= alias.name == CORE or alias.name.startswith(CORE + ".")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
            core |= base == CORE or base.startswith(CORE + ".")
            core |= base == "threadloom" and any(a.name == "core" for a in node.names)
        elif isinstance(node, ast.Attribute):
            core |= (
                node.attr == "core"
                and isinstance(node.value, ast.Name)
                and node.value.id == "threadloom"
            )
    return core, names


def core_callers(root: Path = TESTS) -> set[Path]:
    """Every module under `root` (a tests folder) that reaches `threadloom.core`: by its own
    imports, through modules of `root` it imports, or through a conftest.py above it."""
    paths = {_module_name(root, path): path for path in sorted(root.rglob("*.py"))}
    direct: dict[str, bool] = {}
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        direct[name], imported = _imports(path, package)
        edges[name] = {target for target in imported if target in paths}
    reaches = {name for name, found in direct.items() if found}
    changed = True
    while changed:  # close over imports between modules of `root`
        changed = False
        for name, targets in edges.items():
            if name not in reaches and targets & reaches:
                reaches.add(name)
                changed = True
    found = set()
    for name, path in paths.items():
        conftests = [
            _module_name(root, folder / "conftest.py")
            for folder in [path.parent, *path.parent.parents]
            if folder == root or root in folder.parents
        ]
        if name in reaches or any(conftest in reaches for conftest in conftests):
            found.add(path)
    return found


def is_test_module(path: Path) -> bool:
    """True for a file pytest collects tests from (the default `test_*.py`)."""
    return path.name.startswith("test_") and path.suffix == ".py"


def selected(root: Path = TESTS, also: tuple[str, ...] = ALSO) -> set[Path]:
    """The test modules the pure-Python pass runs: the core's callers and `also`."""
    callers = {path for path in core_callers(root) if is_test_module(path)}
    return callers | {root / name for name in also}


def left_out(collected: set[Path], root: Path = TESTS, also: tuple[str, ...] = ALSO) -> list[str]:
    """The selected modules (paths under `root`) missing from `collected`, sorted."""
    return sorted(str(path.relative_to(root)) for path in selected(root, also) - collected)
