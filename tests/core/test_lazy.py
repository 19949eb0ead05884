"""A module's lazily exported names: loaded on first use, other names refused."""

from __future__ import annotations

import sys
import types

import pytest

from threadloom.core.lazy import lazy_exports


def test_a_name_loads_its_module_when_first_asked_for() -> None:
    sys.modules.pop("colorsys", None)
    module = types.ModuleType("exporting")
    module.__getattr__ = lazy_exports("exporting", {"hls": ("colorsys", "rgb_to_hls")})  # type: ignore[method-assign]
    assert "colorsys" not in sys.modules
    assert module.hls(1.0, 0.0, 0.0) == (0.0, 0.5, 1.0)
    assert "colorsys" in sys.modules
    with pytest.raises(AttributeError, match="module 'exporting' has no attribute 'other'"):
        module.other  # noqa: B018
