"""Builds the optional C core (native/, cffi); all other metadata lives in pyproject.toml.

A failed compile leaves the pure-Python backend in place unless THREADLOOM_STRICT_BUILD=1.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext whose failure is a warning, unless THREADLOOM_STRICT_BUILD=1."""

    def run(self):
        try:
            super().run()
        except Exception as error:  # no compiler at all surfaces here (DistutilsPlatformError)
            self._give_up(error)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as error:  # CompileError, LinkError, missing headers...
            self._give_up(error)

    def _give_up(self, error):
        if os.environ.get("THREADLOOM_STRICT_BUILD") == "1":
            raise error
        sys.stderr.write(
            f"WARNING: threadloom's C core was not built ({error}); the pure-Python backend "
            "will be used. Set THREADLOOM_STRICT_BUILD=1 to make this an error.\n"
        )


setup(cffi_modules=["native/build.py:ffibuilder"], cmdclass={"build_ext": OptionalBuildExt})
