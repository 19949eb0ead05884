"""cffi build script of `threadloom._native` (API mode, out of line).

Used by setup.py through `cffi_modules=["native/build.py:ffibuilder"]`, and runnable by hand
(`python native/build.py` compiles the module into the current directory). The cdef is the
marked section of `threadloom.h`, so the header stays the one description of the ABI.

Environment:
    THREADLOOM_SANITIZE=1: compile and link with AddressSanitizer and UBSan (see README.md:
        loading the result needs `LD_PRELOAD=$(gcc -print-file-name=libasan.so)`).
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

# setup.py runs this file with `__file__` relative to the project root (the working
# directory), and setuptools wants relative source paths, so keep them relative when we can.
_HERE = os.path.dirname(__file__) or "."
if os.path.isabs(_HERE) and os.path.commonpath([_HERE, os.getcwd()]) == os.getcwd():
    _HERE = os.path.relpath(_HERE)

SOURCES = [
    "sha256.c",
    "sha256_x86.c",
    "sha256_many.c",
    "refs.c",
    "cdc.c",
    "blake3.c",
    "blake3_x86.c",
    "msgpack.c",
    "vectors.c",
    "vectors_x86.c",
    "vectors_q.c",
    "vectors_p.c",
    "vectors_t.c",
]
# Listed as `depends`: a change rebuilds the module, and an sdist ships them (this file too).
DEPENDS = ["threadloom.h", "tl_internal.h", "build.py", "README.md"]


def cdef_text(header: str) -> str:
    """Return the part of `header` between the CDEF markers (plain declarations)."""
    with open(header, encoding="utf-8") as file:
        text = file.read()
    start = text.index("/* CDEF-BEGIN */") + len("/* CDEF-BEGIN */")
    return text[start : text.index("/* CDEF-END */")]


def compile_args() -> tuple[list[str], list[str]]:
    """Return (extra_compile_args, extra_link_args) for this platform and environment."""
    if sys.platform == "win32":  # MSVC: no -std/-O3 spelling; the code is C99 either way
        return ["/O2"], []
    compile_flags = ["-O3", "-std=c99", "-fvisibility=hidden"]
    link_flags: list[str] = []
    if os.environ.get("THREADLOOM_SANITIZE") == "1":
        sanitize = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
        compile_flags += sanitize
        link_flags += sanitize
    return compile_flags, link_flags


ffibuilder = FFI()
ffibuilder.cdef(cdef_text(os.path.join(_HERE, "threadloom.h")))
_compile, _link = compile_args()
ffibuilder.set_source(
    "threadloom._native",
    '#include "threadloom.h"',
    sources=[os.path.join(_HERE, name) for name in SOURCES],
    depends=[os.path.join(_HERE, name) for name in DEPENDS],
    include_dirs=[_HERE],
    extra_compile_args=_compile,
    extra_link_args=_link,
    libraries=[] if sys.platform == "win32" else ["m"],  # sqrt in vectors.c
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
