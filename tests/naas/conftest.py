"""Fixtures of the naas Engine tests: tests/nats's own naas peers, used as they are.

The naas venv (`naas_env`) is built once per machine (tests/nats/README.md); its scripts
here run with a naas project (`_project.write_project`) as their working directory.
"""

from __future__ import annotations

from tests.nats.conftest import (  # noqa: F401  (fixtures, used by name)
    document_namespace,
    document_service,
    naas_env,
    nats_server,
    sdk_runner,
)
