"""Write the smallest naas project that naas-abi-core 3.1.0's `Engine()` loads (test side).

Runs in threadloom's venv; the project is then used by the scripts of this folder, run in
the naas venv with the project directory as working directory (`Engine()` reads
`config.yaml` from there).

What the engine needs, found by reading and running it:

- `api`, `global_config` (`ai_mode`; `skip_ontology_loading`), `services` (at least
  `secret`, which the first templating pass loads) and `modules` are required.
- Without a `nats:` block the engine loads only the services that an enabled module
  declares (`EngineServiceLoader._services_to_load`), and agents built with `memory=None`
  checkpoint into the document service only when it is loaded
  (`Engine.__bind_agent_memory`). So the project holds a module of its own, PROBE_MODULE,
  whose dependencies name `DocumentService` (and `ActivityLogService` when asked). A
  module is found by its dotted name only (`ModuleConfig.path` is validated but never
  loaded), so the scripts put the project directory on `sys.path`.
- `EngineConfiguration.ensure_default_modules` appends DEFAULT_MODULES, enabled, unless
  listed; each needs the triple store (oxigraph), so they are listed disabled.
- `services.activity_log` left out means the SQLite activity log outside NATS mode;
  `activity_log_adapter: {adapter: document}` puts it in the document service, in the
  namespace `naas_abi_core.services.activity_log` (collections `events`, `actors`).
- `storage/` is made at once: importing naas's Agent puts a file cache in the first
  `storage/` found upward from the working directory (`CacheFS_find_storage`), which
  must not be some parent's.
- No `pyproject.toml` is written: `abi` would take the directory for an ABI project and
  re-run itself under `uv` (naas_abi_cli/cli/bootstrap.py).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

# The package of the project's own module (in the project directory).
PROBE_MODULE = "threadloom_naas_probe"
# Appended, enabled, by EngineConfiguration.ensure_default_modules unless listed.
DEFAULT_MODULES = (
    "naas_abi_core.modules.templatablesparqlquery",
    "naas_abi_core.modules.bfo",
    "naas_abi_core.modules.cco",
)
# naas's own SQLite document adapter, the reference the custom adapter is compared with.
NAAS_SQLITE = {"adapter": "sqlite", "config": {"path": "storage/documents.sqlite"}}
# The same adapter class named the way threadloom's is (`adapter: custom`: naas imports
# python_module, calls module_callable(**custom_config), checks it is an IDocumentAdapter).
NAAS_SQLITE_AS_CUSTOM = {
    "adapter": "custom",
    "python_module": (
        "naas_abi_core.services.document.adapters.secondary.DocumentSecondaryAdapterSQLite"
    ),
    "module_callable": "DocumentSecondaryAdapterSQLite",
    "custom_config": {"path": "storage/documents.sqlite"},
}
# threadloom's adapter (docs/naas.md): the LangGraph collections in storage/memory.db,
# every other collection in naas's SQLite adapter on storage/documents.sqlite.
THREADLOOM = {
    "adapter": "custom",
    "python_module": "threadloom.naas",
    "module_callable": "DocumentAdapter",
    "custom_config": {
        "path": "storage/memory.db",
        "fallback": {"adapter": "sqlite", "config": {"path": "storage/documents.sqlite"}},
    },
}

_SERVICES = {
    "document": "from naas_abi_core.services.document.DocumentService import DocumentService",
    "activity_log": (
        "from naas_abi_core.services.activity_log.ActivityLogService import ActivityLogService"
    ),
}
_CLASSES = {"document": "DocumentService", "activity_log": "ActivityLogService"}


def write_project(
    directory: Path,
    *,
    document_adapter: Mapping[str, Any] | None,
    nats: bool = False,
    activity_log: bool = False,
    modules: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Write `config.yaml` and the probe module into `directory`; return `directory`.

    Args:
        directory: the project directory (created if missing).
        document_adapter: `services.document.document_adapter`, e.g. NAAS_SQLITE or
            `{"adapter": "custom", "python_module": "threadloom.naas", ...}`; None: no
            document service (the probe module declares none, `document` is not set),
            so agents keep naas's standalone memory.
        nats: add a `nats:` block naming the broker and secret through the environment
            (`{{ secret.NAAS_NATS_URL }}`, `{{ secret.NAAS_JWT_SECRET }}`, which the
            engine's templating reads from the process environment first), with
            `engine.role: client` and jobs off: an engine that uses the document service
            some other process serves. In NATS mode the engine loads every service, so
            this is a config for a client engine only.
        activity_log: the activity log in the document service (the probe module
            declares ActivityLogService, `activity_log_adapter: {adapter: document}`).
        modules: further entries of `modules:`, after the probe module and the disabled
            default modules.
    """
    if activity_log and document_adapter is None:
        raise ValueError("the activity log's document adapter needs a document service")
    # Before naas's first import: Agent.py keeps a cache under the first `storage/` it
    # finds upward from the working directory, and makes one there only if none exists.
    (directory / "storage").mkdir(parents=True, exist_ok=True)
    declared = [] if document_adapter is None else ["document"]
    declared += ["activity_log"] if activity_log else []
    _write_probe_module(directory / PROBE_MODULE, declared)
    services: dict[str, Any] = {"secret": {"secret_adapters": []}}
    if document_adapter is not None:
        services["document"] = {"document_adapter": dict(document_adapter)}
    if activity_log:
        services["activity_log"] = {"activity_log_adapter": {"adapter": "document"}}
    config: dict[str, Any] = {
        "api": {},
        "global_config": {"ai_mode": "cloud", "skip_ontology_loading": True},
        "services": services,
        "modules": [
            {"module": PROBE_MODULE, "enabled": True},
            *({"module": name, "enabled": False} for name in DEFAULT_MODULES),
            *(dict(entry) for entry in modules),
        ],
    }
    if nats:
        config["nats"] = {
            "nats_url": "{{ secret.NAAS_NATS_URL }}",
            "jwt_secret": "{{ secret.NAAS_JWT_SECRET }}",
            "engine": {"role": "client"},
            "jobs": {"enabled": False},
        }
    (directory / "config.yaml").write_text(
        "# Written by tests/naas/_project.py (threadloom's tests).\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    return directory


def _write_probe_module(package: Path, services: Sequence[str]) -> None:
    """The project's module: no agents or tools, only the services it declares."""
    package.mkdir(parents=True, exist_ok=True)
    imports = "".join(f"{_SERVICES[name]}\n" for name in services)
    listed = ", ".join(_CLASSES[name] for name in services)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''\
            """A test project's module: it declares the services the engine must load."""

            from naas_abi_core.module.Module import (
                BaseModule,
                ModuleConfiguration,
                ModuleDependencies,
            )
            {imports}

            class ABIModule(BaseModule):
                dependencies: ModuleDependencies = ModuleDependencies(
                    modules=[], services=[{listed}]
                )

                class Configuration(ModuleConfiguration):
                    pass
            '''
        ).format(imports=imports, listed=listed)
    )
