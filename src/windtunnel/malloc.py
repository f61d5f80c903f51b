"""glibc malloc settings that keep freed tensor memory for reuse instead of handing it back to the kernel.

PyTorch has no caching allocator on the CPU: every tensor above glibc's mmap threshold (128 KiB, raised dynamically
up to 32 MiB) is a fresh `mmap` whose pages the kernel must fault in and zero, then a `munmap`; smaller ones come
from the heap, whose top is trimmed back to the kernel past 128 KiB free. A forward pass over a few hundred held-out
sequences allocates attention tensors of tens to hundreds of MB, so evaluation and the geometry probes spent about
half their time in the kernel: the quick tier's HMM transformer probe took 117 s, 58 s of it system time, on one
thread of an AMD EPYC (AVX-512); with `tune_malloc` 58 s, 4 s of it system time, and the same geometry.json.

`tune_malloc` serves blocks below 1 GiB from the heap, trims it only past 2 GiB free and grows it 1 GiB at a time:
a process keeps its peak memory for reuse (what PyTorch's CUDA caching allocator does on a GPU). The numbers a run
produces do not change. Applied by the console entry and by every executor's job (`executors.base.run_job`);
`WINDTUNNEL_MALLOC=system` leaves glibc's defaults. A no-op where the C library is not glibc (macOS, musl, Windows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h> parameter numbers
SETTINGS = {
    M_MMAP_THRESHOLD: 1 << 30,  # blocks under 1 GiB come from the heap (reused after free), not a fresh mmap
    M_TRIM_THRESHOLD: 2**31 - 1,  # trim the heap's free top back to the kernel only past 2 GiB (mallopt's int)
    M_TOP_PAD: 1 << 30,  # grow the heap 1 GiB at a time (address space; pages are touched only when used)
}
OPT_OUT = "WINDTUNNEL_MALLOC"  # set to "system" to keep glibc's defaults

_applied: bool | None = None


def tune_malloc() -> bool:
    """Apply `SETTINGS` once per process; True where they are in force (glibc, not opted out), else False."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(OPT_OUT, "").strip().lower() == "system":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS.items())
