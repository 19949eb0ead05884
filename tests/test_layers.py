"""The layers: imports point downward, LangGraph only in the adapters' wing, SQL only in
engine/, every package ranked, and
the engine's rooms in order, reached from outside through their packages only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests._fresh import run_fresh

SRC = Path(__file__).resolve().parents[1] / "src"

#: Rank of each package and top-level module: a module may import its own rank or below.
#: Every one must be listed (`unranked`), so a new folder is placed on purpose.
LAYERS = {
    "threadloom.errors": 0,
    "threadloom.core": 0,
    "threadloom._native": 0,  # the C core (cffi extension)
    "threadloom.protocol": 1,
    "threadloom.engine": 2,
    "threadloom.documents": 3,  # the document operations over the file (no LangGraph)
    "threadloom.langgraph": 3,  # the adapters' wing: the only importer of LangGraph
    "threadloom": 3,  # the package root re-exports the wing's names
    "threadloom.langgraph_server": 3,  # the Agent Server's public module path (the wing's)
    "threadloom.viewer": 4,
    "threadloom.cli": 4,
    "threadloom.nats": 4,
    "threadloom.naas": 4,
    "threadloom.__main__": 4,
}
#: The only package that may import LangGraph or LangChain.
WING = "threadloom.langgraph"
LANGGRAPH = {"langgraph", "langchain_core", "langchain"}
#: Where SQL text may live: the engine (its `foreign/` room holds the statements run on
#: other applications' files).
SQL_HOMES = ("threadloom.engine",)
#: The engine's rooms, lowest first: a room imports only its own modules and lower rooms.
ROOMS = [
    "sql",
    "lock_wait",
    "wal_fold",
    "format",
    "foreign",
    "content",
    "threads",
    "borrowed",
    "file",
    "changes",
    "checkpoints",
    "items",
    "conversations",
    "checks",
    "checkpoint_store",
    "",  # engine/__init__.py
]
_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|PRAGMA|WITH)\b", re.I)


def rank(module: str) -> int:
    """The rank of a module: its longest listed prefix."""
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def room(module: str) -> int | None:
    """The position of an engine module's room in `ROOMS` (None outside the engine)."""
    parts = module.split(".")
    if parts[:2] != ["threadloom", "engine"]:
        return None
    return ROOMS.index(parts[2] if len(parts) > 2 else "")


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
            # A name taken from an engine room's package is what the room exports,
            # even where a module of the room has the same name.
            exported = room(base) is not None and base.count(".") == 2
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.append(candidate if candidate in known and not exported else base)
    return out


def unranked(found: dict[str, Path]) -> list[str]:
    """Packages and top-level modules of `threadloom` that `LAYERS` does not name."""
    tops = {".".join(m.split(".")[:2]) for m in found if m.startswith("threadloom.")}
    return sorted(f"{top} has no rank in LAYERS" for top in tops if top not in LAYERS)


def _engine_import(module: str, target: str, found: dict[str, Path]) -> str | None:
    """What is wrong with `module` importing the engine module `target`, if anything."""
    mine, theirs = room(module), room(target)
    if mine is None:
        # Outside the engine: `threadloom.engine` or a room's package, never its modules.
        parts = target.split(".")
        if len(parts) == 2 or (len(parts) == 3 and found[target].name == "__init__.py"):
            return None
        return f"{module} imports {target}, a module inside the engine; import its room"
    if theirs is not None and theirs > mine:
        return f"{module} imports {target}, from a room above its own"
    return None


def violations(root: Path) -> list[str]:
    """Every unranked package, upward import, LangGraph import outside the wing, engine
    import past a room's package or up the rooms, and SQL text outside its homes."""
    found = modules(root)
    known = set(found)
    problems: list[str] = unranked(found)
    for module, path in found.items():
        if module.split(".")[0] != "threadloom" or ".".join(module.split(".")[:2]) not in LAYERS:
            continue
        mine = rank(module)
        for target in imported(module, path, known):
            top = target.split(".")[0]
            if top in LANGGRAPH and not (module == WING or module.startswith(WING + ".")):
                problems.append(f"{module} imports {target} outside the adapters' wing")
            if top == "threadloom" and rank(target) > mine:
                problems.append(f"{module} imports {target}, a layer above it")
            if target in found and room(target) is not None:
                wrong = _engine_import(module, target, found)
                if wrong:
                    problems.append(wrong)
        if not module.startswith(SQL_HOMES):
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


def test_imports_point_downward_and_langgraph_stays_in_the_wing() -> None:
    """Every package is ranked; no module imports a layer above it, imports LangGraph
    outside the wing, reaches into an engine room past its package or up the rooms, or
    holds SQL outside engine/."""
    assert violations(SRC) == []


def test_the_layer_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check reports each rule broken once: an upward import, LangGraph in the
    protocol and in the viewer, SQL in the CLI, an unranked folder, an outer import of a
    room's module, and a room importing a room above it."""
    package = tmp_path / "threadloom"
    folders = ("core", "protocol", "engine", "engine/format", "engine/items", "cli")
    for sub in (*folders, "viewer", "langgraph", "gadgets"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "bad.py").write_text("from threadloom.protocol import thing\n")
    (package / "protocol" / "bad.py").write_text("def f():\n    import langgraph.graph\n")
    (package / "viewer" / "bad.py").write_text("from langchain_core.messages import AIMessage\n")
    (package / "langgraph" / "fine.py").write_text("from langgraph.graph import StateGraph\n")
    (package / "cli" / "bad.py").write_text("Q = 'SELECT id FROM threads'\n")
    (package / "cli" / "fine.py").write_text("from threadloom.engine.items import Items\n")
    (package / "engine" / "items" / "rows.py").write_text("Q = 'SELECT id FROM items'\n")
    (package / "cli" / "reach.py").write_text("from threadloom.engine.items.rows import Q\n")
    (package / "engine" / "format" / "up.py").write_text(
        "from threadloom.engine.items import rows\n"
    )
    found = violations(tmp_path)
    assert any("threadloom.core.bad imports threadloom.protocol" in p for p in found)
    assert any("threadloom.protocol.bad imports langgraph" in p for p in found)
    assert any("threadloom.viewer.bad imports langchain_core" in p for p in found)
    assert any("threadloom.cli.bad:1 holds SQL" in p for p in found)
    assert any("threadloom.gadgets has no rank" in p for p in found)
    assert any("threadloom.cli.reach imports threadloom.engine.items.rows" in p for p in found)
    assert any("threadloom.engine.format.up imports threadloom.engine.items" in p for p in found)
    assert len(found) == 7, found


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
    run_fresh(code)


def _checkpointing(path: Path) -> str:
    """A fresh process's script so far: a Saver on `path` and one put."""
    return (
        "import sys, threadloom\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        f"saver = threadloom.Saver({str(path)!r})\n"
        "config = {'configurable': {'thread_id': 't', 'checkpoint_ns': ''}}\n"
        "config = saver.put(config, empty_checkpoint(), {}, {})\n"
    )


def test_a_saver_does_not_load_the_stores_room(tmp_path: Path) -> None:
    """A process that only checkpoints (a Saver's put and get) never imports the Store's
    engine room, `engine/items`: its code would be held for nothing (peak RSS,
    bench/README.md); an erasure loads it when it runs."""
    code = (
        _checkpointing(tmp_path / "memory.db") + "assert saver.get_tuple(config) is not None\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('threadloom.engine.items'))\n"
        "assert not loaded, loaded\n"
        "saver.erase(owner='nobody', apply=False)\n"
        "assert 'threadloom.engine.items' in sys.modules\n"
    )
    run_fresh(code)


def test_a_saver_loads_the_conversation_features_when_first_used(tmp_path: Path) -> None:
    """A Saver's put, put_writes, get and list never import the engine's conversations room
    (tails, history, leases, erasure, retention), the document view, maintenance, intake
    or the sync state: their code would be held for nothing (peak RSS, bench/README.md
    "Peak RSS and the delta read"). The features load them when first used, and the
    names the rooms and the package export still resolve."""
    code = (
        _checkpointing(tmp_path / "memory.db")
        + "saver.put_writes(config, [('messages', 1)], 'task')\n"
        "assert saver.get_tuple(config) is not None\n"
        "assert len(list(saver.list(config))) == 1\n"
        "lazy = ('threadloom.engine.conversations.', 'threadloom.engine.checkpoints.view',\n"
        "        'threadloom.engine.checkpoints.maintenance',\n"
        "        'threadloom.engine.checkpoints.intake',\n"
        "        'threadloom.engine.checkpoints.syncstate')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(lazy))\n"
        "assert not loaded, loaded\n"
        "assert len(saver.messages('t')) == 0\n"
        "assert 'threadloom.engine.conversations.transcript' in sys.modules\n"
        "with saver.lease('t'):\n"
        "    pass\n"
        "assert saver.erase(owner='nobody', apply=False).threads == []\n"
        "assert saver.apply_retention(threadloom.RetentionPolicy(keep_last=5)).threads >= 0\n"
        "from threadloom.engine import conversations, checkpoints\n"
        "from threadloom.engine.checkpoint_store import StoredDocument\n"
        "assert threadloom.Erased is conversations.Erased\n"
        "assert threadloom.RetentionReport is conversations.RetentionReport\n"
        "assert checkpoints.StoredDocument is StoredDocument\n"
        "assert conversations.SERVER_KINDS and checkpoints.SyncState and checkpoints.ImportCount\n"
        "for names in (conversations, checkpoints):\n"
        "    assert all(getattr(names, name) is not None for name in names.__all__)\n"
    )
    run_fresh(code)


def test_the_package_shows_its_savers_and_types() -> None:
    """`dir(threadloom)` lists Saver and AsyncSaver, their help shows the arguments, and the
    package ships `py.typed`."""
    import pydoc

    import threadloom

    assert {"Saver", "AsyncSaver"} <= set(dir(threadloom))
    text = pydoc.render_doc(threadloom.Saver, renderer=pydoc.plaintext)
    assert "readonly" in text and "synchronous" in text and "namespace" in text
    assert (Path(threadloom.__file__).parent / "py.typed").is_file()


def test_the_architecture_names_every_folder() -> None:
    """docs/ARCHITECTURE.md's map of the house names every package folder of
    `src/threadloom` (a new room must be drawn where a newcomer looks for it)."""
    text = (SRC.parent / "docs" / "ARCHITECTURE.md").read_text()
    house = text.split("## The house", 1)[1].split("\n## ", 1)[0]
    package = SRC / "threadloom"
    folders = sorted(p.parent for p in package.rglob("__init__.py"))
    missing = [
        str(folder.relative_to(package))
        for folder in folders
        if folder != package and f"{folder.name}/" not in house
    ]
    assert missing == []


def test_every_module_stays_under_600_lines() -> None:
    """A module does one job: none of `src/threadloom` grows past 600 lines (split it into a
    room of its own instead)."""
    long = {
        str(path.relative_to(SRC)): lines
        for path in (SRC / "threadloom").rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 600
    }
    assert long == {}
