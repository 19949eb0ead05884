"""The layers: imports point downward, LangGraph only in the adapters, SQL only in engine/."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: Rank of each layer: a module may import modules of its own rank or below.
LAYERS = {
    "threadloom.errors": 0,
    "threadloom.core": 0,
    "threadloom._native": 0,  # the C core (cffi extension)
    "threadloom.protocol": 1,
    "threadloom.engine": 2,
    "threadloom.saver": 3,
    "threadloom._langgraph": 3,
    "threadloom.store": 3,
    "threadloom._storeops": 3,
    "threadloom.memories": 3,
    "threadloom.documents": 3,  # the document operations over the file (no LangGraph)
    "threadloom": 3,  # the package root re-exports the adapters
    "threadloom.cli": 4,
    "threadloom.nats": 4,
    "threadloom.naas": 4,
    "threadloom.__main__": 4,
}
ADAPTERS = 3
_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|PRAGMA|WITH)\b", re.I)


def rank(module: str) -> int:
    """The rank of a module: its longest listed prefix."""
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def modules(root: Path) -> dict[str, Path]:
    """Every module under `root` (a folder holding the `threadloom` package) by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: set[str]) -> list[str]:
    """The modules `module` imports (at any depth of its code), resolved to dotted names."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.append(candidate if candidate in known else base)
    return out


def violations(root: Path) -> list[str]:
    """Every upward import, LangGraph import below the adapters and SQL text outside engine/."""
    found = modules(root)
    known = set(found)
    problems: list[str] = []
    for module, path in found.items():
        mine = rank(module)
        for target in imported(module, path, known):
            top = target.split(".")[0]
            if top in {"langgraph", "langchain_core", "langchain"} and mine < ADAPTERS:
                problems.append(f"{module} imports {target} below the adapters")
            if top == "threadloom" and rank(target) > mine:
                problems.append(f"{module} imports {target}, a layer above it")
        if not module.startswith("threadloom.engine"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and _SQL.match(node.value)
                    and (" FROM " in node.value.upper() or node.value.upper().startswith("PRAGMA"))
                ):
                    problems.append(f"{module}:{node.lineno} holds SQL outside engine/")
    return problems


def test_imports_point_downward_and_langgraph_stays_in_the_adapters() -> None:
    """No module imports a layer above it, imports LangGraph below the adapters, or holds SQL
    outside engine/."""
    assert violations(SRC) == []


def test_the_layer_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check reports an upward import, LangGraph in the protocol and SQL in the CLI."""
    package = tmp_path / "threadloom"
    for sub in ("core", "protocol", "engine", "cli"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "bad.py").write_text("from threadloom.engine import thing\n")
    (package / "protocol" / "bad.py").write_text("def f():\n    import langgraph.graph\n")
    (package / "cli" / "bad.py").write_text("Q = 'SELECT id FROM threads'\n")
    (package / "engine" / "fine.py").write_text("Q = 'SELECT id FROM threads'\n")
    found = violations(tmp_path)
    assert any("threadloom.core.bad imports threadloom.engine" in p for p in found)
    assert any("threadloom.protocol.bad imports langgraph" in p for p in found)
    assert any("threadloom.cli.bad:1 holds SQL" in p for p in found)
    assert len(found) == 3


def test_the_light_commands_do_not_load_langgraph(tmp_path: Path) -> None:
    """`threadloom doctor --db` (and the engine under it) runs without importing LangGraph."""
    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    code = (
        "import sys\nfrom threadloom.cli import main\n"
        f"assert main(['doctor', '--db', {str(path)!r}]) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'langgraph', 'langchain_core'})\nassert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_package_shows_its_savers_and_types() -> None:
    """`dir(threadloom)` lists Saver and AsyncSaver, their help shows the arguments, and the
    package ships `py.typed`."""
    import pydoc

    import threadloom

    assert {"Saver", "AsyncSaver"} <= set(dir(threadloom))
    text = pydoc.render_doc(threadloom.Saver, renderer=pydoc.plaintext)
    assert "readonly" in text and "synchronous" in text and "namespace" in text
    assert (Path(threadloom.__file__).parent / "py.typed").is_file()
