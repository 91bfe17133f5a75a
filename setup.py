"""Builds tracekit.core._aot: the read and connection kernels, compiled ahead of time
(tracekit.core.kernels).

Everything else about the package is in pyproject.toml. When the build cannot be made (no C
compiler, no numba.pycc), tracekit installs without it and numba compiles the kernels on first use.

Compiling takes minutes, and an install of unchanged sources would make the same module again:
each build is kept in a cache (TRACEKIT_AOT_CACHE, by default build/aot-cache beside this file),
under a digest of every source it is built from and of the toolchain that builds it, and an
install whose digest is there copies it instead. The module also records the digests of its
sources (tracekit.core.kernels.source_digest), so a module that does not match the sources it
is installed with is never run: numba compiles the kernels then.
"""

import hashlib
import importlib.metadata
import os
import platform
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
AOT_MODULE = "tracekit.core._aot"
# Builds kept: a few source trees back (a branch switched to and back), 1.6 MB each.
CACHE_KEPT = 4
DIGEST_CHARS = 32
# What numba.pycc's extension says of how to compile and link it.
BUILD_FIELDS = (
    "sources",
    "depends",
    "define_macros",
    "include_dirs",
    "libraries",
    "library_dirs",
    "extra_compile_args",
    "extra_link_args",
    "extra_objects",
)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def build_digest() -> str:
    """What the module is made from: every module of the package (the kernels read constants
    from any of them), this file, and the versions of what compiles and links it.

    Not tracekit.core.kernels' digests: importing that module loads the built module in place,
    the file this build may then overwrite."""
    h = hashlib.sha256()
    for path in sorted((HERE / "tracekit").rglob("*.py")):
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes())
    h.update(Path(__file__).read_bytes())
    toolchain = [sys.version, platform.machine(), sysconfig.get_config_var("EXT_SUFFIX") or ""]
    toolchain += [_version(name) for name in ("numba", "llvmlite", "numpy")]
    h.update("\0".join(toolchain).encode())
    return h.hexdigest()[:DIGEST_CHARS]


def _is_entry(path: Path) -> bool:
    name = path.name
    return (
        path.is_dir()
        and len(name) == DIGEST_CHARS
        and all(c in "0123456789abcdef" for c in name)
        and all(p.name.startswith("_aot") for p in path.iterdir())
    )


def cache_root() -> Path:
    return Path(os.environ.get("TRACEKIT_AOT_CACHE") or HERE / "build" / "aot-cache")


class CachedBuildExt(build_ext):
    """build_ext that takes tracekit.core._aot from the cache, or builds it and keeps it."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name != AOT_MODULE:
            super().build_extension(ext)
            return
        target = Path(self.get_ext_fullpath(ext.name))
        cached = cache_root() / build_digest() / target.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if cached.is_file():
            shutil.copy(cached, target)
            return
        try:
            from tracekit.core.aot_build import compiler

            real = compiler().distutils_extension(optional=True)
            real._prepare_object_files(self)  # numba.pycc's LLVM objects, linked below
        except Exception as exc:  # any failure leaves the numba path, which always works
            print(f"tracekit: building without ahead-of-time kernels: {exc}", file=sys.stderr)
            return
        # pycc's glue code and objects, built as the extension setuptools prepared.
        for name in BUILD_FIELDS:
            setattr(ext, name, getattr(real, name))
        # Built whatever the module in place: one older than its C files alone (distutils'
        # test) may be from other Python sources, and would be kept under this digest.
        self.force = True
        super().build_extension(ext)
        self._keep(target, cached)

    @staticmethod
    def _keep(built: Path, cached: Path) -> None:
        """Copy the build into the cache (a whole file or none), keeping the latest few."""
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            part = cached.with_name(cached.name + f".{os.getpid()}.part")
            shutil.copy(built, part)
            part.replace(cached)
            # Only the cache's own entries (a digest's folder holding a module) are let go:
            # TRACEKIT_AOT_CACHE may name a folder that holds other things too.
            entries = sorted(
                (p for p in cache_root().iterdir() if _is_entry(p)), key=lambda p: p.stat().st_mtime
            )
            for old in entries[:-CACHE_KEPT]:
                for module in old.glob("_aot*"):
                    module.unlink()
                old.rmdir()
        except OSError as exc:  # a cache that cannot be written costs the next build its time
            print(f"tracekit: ahead-of-time build not cached: {exc}", file=sys.stderr)


# The module's sources are Python, compiled by numba.pycc in CachedBuildExt: the extension
# names the module, and is optional (an install without it runs the kernels through numba).
setup(
    ext_modules=[Extension(AOT_MODULE, sources=[], optional=True)],
    cmdclass={"build_ext": CachedBuildExt},
)
