"""`tune_malloc`: glibc's heap keeps freed tensor memory (no fresh mmap per large tensor), opt-out by environment,
applied by the console entry and every executor job; the numbers a model computes do not change."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from windtunnel import malloc

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _run(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_applies_once_on_glibc_and_large_blocks_then_come_from_the_heap() -> None:
    code = (
        "import ctypes, ctypes.util\n"
        "from windtunnel.malloc import tune_malloc\n"
        "print(tune_malloc(), tune_malloc())\n"
        "class MI(ctypes.Structure):\n"
        "    _fields_ = [(n, ctypes.c_size_t) for n in "
        "('arena','ordblks','smblks','hblks','hblkhd','usmblks','fsmblks','uordblks','fordblks','keepcost')]\n"
        "libc = ctypes.CDLL(ctypes.util.find_library('c'))\n"
        "libc.mallinfo2.restype = MI\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "before = libc.mallinfo2().hblks\n"
        "p = libc.malloc(64 << 20)\n"  # 64 MiB: an mmap under glibc's defaults
        "print(libc.mallinfo2().hblks - before)\n"
        "libc.free(ctypes.c_void_p(p))\n"
    )
    assert _run(code).split() == ["True", "True", "0"]  # no mmapped block: served from the heap
    default = code.replace("print(tune_malloc(), tune_malloc())\n", "print(True, True)\n")
    assert _run(default).split() == ["True", "True", "1"]  # the same allocation, untuned: one mmapped block


def test_opt_out_keeps_the_defaults() -> None:
    assert _run("from windtunnel.malloc import tune_malloc; print(tune_malloc())", WINDTUNNEL_MALLOC="system") == (
        "False"
    )


def test_not_glibc_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc, "_applied", None)
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("musl", "1.2"))
    assert malloc.tune_malloc() is False
    monkeypatch.setattr(malloc, "_applied", None)  # the real answer for the rest of the session


def test_every_job_and_the_console_entry_tune() -> None:
    """run_job calls it first thing (the local pool's and Ray's workers run only run_job), and so does main."""
    import inspect

    from windtunnel import cli
    from windtunnel.executors import base

    assert "tune_malloc()" in inspect.getsource(base.run_job).split("check_storage")[0]
    assert "tune_malloc()" in inspect.getsource(cli.main).split("_load()")[0]


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_the_numbers_do_not_change() -> None:
    """Where memory comes from changes no arithmetic: the same tensor ops give the same bits, tuned or not."""
    code = (
        "import torch\n"
        "from windtunnel.malloc import tune_malloc\n"
        "tune_malloc()\n"
        "torch.manual_seed(0); torch.set_num_threads(1)\n"
        "x, w = torch.randn(64, 128, 256), torch.randn(256, 256)\n"  # 8 MiB tensors, freed and reallocated
        "y = x\n"
        "for _ in range(3): y = (y @ w / 16).softmax(-1)\n"
        "print(y.double().sum().item().hex(), y.double().square().sum().item().hex())\n"
    )
    assert _run(code) == _run(code, WINDTUNNEL_MALLOC="system")
