"""The process-wide settings the `tessera` command takes from its environment, taken here the same way (the
C++ library itself reads no environment variable)."""

import glob
import os
import sys

from . import _tessera
from .errors import value_error


def _hub_dirs():
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        dirs.append(os.path.join(os.environ["HF_HOME"], "hub"))
    dirs.append(os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"))
    return dirs


def _site_packages():
    prefixes = [sys.prefix]
    if os.environ.get("VIRTUAL_ENV"):
        prefixes.append(os.environ["VIRTUAL_ENV"])
    prefixes.append(os.path.join(os.path.expanduser("~"), ".local"))
    out = []
    for p in prefixes:
        out.extend(sorted(glob.glob(os.path.join(p, "lib", "python3*", "site-packages"))))
    return out


def apply_environment():
    _tessera.set_hf_hub_dirs(_hub_dirs())
    _tessera.set_plugin_search(
        _site_packages(),
        os.environ.get("TESSERA_XLA_CPU_PLUGIN", ""),
        os.environ.get("TPU_LIBRARY_PATH", ""),
        os.environ.get("TESSERA_XLA_CUDA_PLUGIN", ""),
    )

    _apply_threads()


def _apply_threads():
    """$TESSERA_NUM_THREADS, else, under tessera launch, this node's cores divided by its ranks (as the tessera
    command sizes its worker pool)."""
    v = os.environ.get("TESSERA_NUM_THREADS")
    if v:
        if not v.isdigit() or not 1 <= int(v) <= 1024:
            raise value_error(f"TESSERA_NUM_THREADS={v!r} is not a thread count in [1, 1024]")
        _tessera.set_num_threads(int(v))
        return
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    ranks = int(local) if local.isdigit() else 1
    if ranks > 1:
        _tessera.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
