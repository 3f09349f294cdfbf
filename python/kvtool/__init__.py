"""kvtool from Python: write K/V dumps from NumPy arrays or PyTorch caches, inspect and verify dumps
and artifacts, build and evaluate indexes, and query them in a runtime pool.

Usable from the build tree with ``PYTHONPATH=<build>/python``; ``cmake --install`` installs it
for the interpreter. See docs/python.md.
"""
from . import _kvtool
from .errors import Error, InternalError, InvalidInputError, IOError, UsageError

__version__ = _kvtool.__version__


def reasons():
    """Every reason code as a list of dicts {"reason", "exit_code", "meaning"} (``kvtool reasons``)."""
    return [{"reason": r, "exit_code": e, "meaning": m} for r, e, m in _kvtool.reasons()]

from .dump import *  # noqa: E402,F401,F403  DumpWriter, write_dump, from_cache
from .reports import *  # noqa: E402,F401,F403  inspect, verify, build, dump, eval, eval_decode, query
from .pool import *  # noqa: E402,F401,F403  Pool, Lease
from .paged import *  # noqa: E402,F401,F403  gather_paged, decode_fp8
