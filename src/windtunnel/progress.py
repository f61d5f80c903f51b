"""Live progress of long work (a suite of training runs) shown by the driver process.

The monitor reads only files of the run directories (the tail of metrics.jsonl, done.json, the lock's owner file),
which every node sees, so it works the same whether runs execute in local processes or on a Ray cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from windtunnel.evaluation import metric_specs
from windtunnel.store.lock import read_owner
from windtunnel.store.records.run_dir import Done
from windtunnel.store.rundir import METRICS, OWNER_FILE, open_regular

TAIL_BYTES = 16 * 1024  # first look at this much of the end of metrics.jsonl
TAIL_MAX_BYTES = 256 * 1024  # ... widened (x4) up to this much while it holds no training or evaluation line
PREFIX = "progress: "  # each plain (non-terminal) progress line starts with this
PLAIN_WIDTH = 160  # line width when the stream is not a terminal
NO_VALUE = "—"


@dataclass(frozen=True)
class Tracked:
    """One run to watch."""

    name: str
    run_dir: Path
    steps: int  # total training steps (0 for baselines that only evaluate)
    cost: float = 1.0  # relative cost, weights the suite ETA (estimated tokens x params)
    metric: str = "entropy_mae_bits"  # validation number to show: "entropy_mae_bits" (lower better) or "accuracy"


@dataclass
class RunProgress:
    """Where one run stands, as read from its directory."""

    state: str  # "waiting" | "active" | "done"
    step: int = 0
    loss: float | None = None
    val: float | None = None
    elapsed_s: float | None = None

    def fraction(self, steps: int) -> float:
        """Share of the run's `steps` done: 1.0 once done, 0.0 for a run with no steps that is not done."""
        if self.state == "done":
            return 1.0
        if steps <= 0:
            return 0.0
        return min(max(self.step / steps, 0.0), 1.0)

    def eta_s(self, steps: int) -> float | None:
        """Seconds left at the run's pace so far, (steps - step) * elapsed_s / step; None without data."""
        if self.state == "done":
            return 0.0
        if steps <= 0 or self.step <= 0 or self.elapsed_s is None:
            return None
        return max(steps - self.step, 0) * self.elapsed_s / self.step


# --- reading run directories -------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """`value` as a float if it is a (non-bool) number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _tail_records(path: Path, nbytes: int) -> tuple[list[dict], bool]:
    """The JSON-object lines within the last `nbytes` of `path` (a partial first line and a torn or garbled line
    skipped), and whether the read reached the start of the file."""
    try:
        with open_regular(path) as f:  # a FIFO or device planted there is skipped, never opened blocking
            size = f.seek(0, 2)
            offset = max(size - nbytes, 0)
            f.seek(offset)
            data = f.read(size - offset)
    except OSError:
        return [], True
    lines = data.split(b"\n")
    if offset > 0:
        lines = lines[1:]  # starts mid-line
    out = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue  # the line being written, or damage: never fatal for a progress display
        if isinstance(rec, dict) and isinstance(rec.get("step"), int) and not isinstance(rec["step"], bool):
            out.append(rec)
    return out, offset == 0


def _dead_here(run_dir: Path) -> bool:
    """Whether the recorded writer of `run_dir` is a process of this host that no longer runs (a killed run whose
    owner file stayed; a writer on another node cannot be checked from here and counts as alive)."""
    owner = read_owner(run_dir)
    if not owner or owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, but not ours to signal
        return False
    return False


def read_progress(run: Tracked) -> RunProgress:
    """State and latest numbers of `run`, from its done.json, owner file and the tail of its metrics.jsonl."""
    run_dir = Path(run.run_dir)
    if Done.exists(run_dir):
        state = "done"
    elif (run_dir / OWNER_FILE).exists() and not _dead_here(run_dir):
        state = "active"
    else:
        state = "waiting"
    prog = RunProgress(state=state)
    nbytes = TAIL_BYTES
    while True:
        records, whole = _tail_records(run_dir / METRICS, nbytes)
        train = [r for r in records if r.get("split") is None and "loss" in r]
        evals = [r for r in records if r.get("split") == "eval" and _number(r.get(run.metric)) is not None]
        if whole or (train and (evals or run.steps == 0)) or nbytes >= TAIL_MAX_BYTES:
            break
        nbytes *= 4
    if records:
        prog.step = max(records[-1]["step"], 0)
    if train:
        prog.loss = _number(train[-1].get("loss"))
        prog.elapsed_s = _number(train[-1].get("elapsed_s"))
    if evals:
        prog.val = _number(evals[-1].get(run.metric))
    return prog


# --- rendering ---------------------------------------------------------------------------------------------


def format_duration(seconds: float | None) -> str:
    """Compact duration: 45s, 2m10s, 1h05m; "—" for None or a negative number."""
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return NO_VALUE
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_val(value: float | None, metric: str) -> str:
    """A validation number: accuracy as a percentage (97.1%), other metrics with four decimals."""
    if value is None:
        return NO_VALUE
    return metric_specs.METRICS[metric].fmt_live(value)


def done_cost(runs: Sequence[Tracked], states: Sequence[RunProgress]) -> float:
    """Cost-weighted work done: sum of cost x fraction."""
    return sum(r.cost * s.fraction(r.steps) for r, s in zip(runs, states, strict=True))


def suite_eta_s(
    runs: Sequence[Tracked], states: Sequence[RunProgress], elapsed_s: float, initial_done_cost: float
) -> float | None:
    """Seconds left for the suite at the cost-weighted pace since this invocation began; None before progress."""
    total = sum(r.cost for r in runs)
    done = done_cost(runs, states)
    if elapsed_s <= 0:
        return None
    rate = (done - initial_done_cost) / elapsed_s
    if rate <= 0:
        return None
    return max(total - done, 0.0) / rate


def render(
    runs: Sequence[Tracked],
    states: Sequence[RunProgress],
    elapsed_s: float,
    initial_done_cost: float,
    width: int = 100,
    title: str = "",
) -> list[str]:
    """The live block: an overall line (bar, runs done, active, elapsed, suite ETA), then one line per active run.
    Pure, so it is tested without threads or files; every line is cut to `width` characters."""
    n_done = sum(s.state == "done" for s in states)
    n_active = sum(s.state == "active" for s in states)
    total = sum(r.cost for r in runs)
    share = done_cost(runs, states) / total if total > 0 else (n_done / len(runs) if runs else 0.0)
    eta = suite_eta_s(runs, states, elapsed_s, initial_done_cost)
    rest = (
        f"{n_done}/{len(runs)} runs done · {n_active} active · {format_duration(elapsed_s)} elapsed"
        f" · ETA {format_duration(eta)}"
    )
    head = f"{title} " if title else ""
    bar_w = max(10, min(40, width - len(head) - len(rest) - 3))
    fill = min(int(share * bar_w), bar_w)
    lines = [f"{head}[{'#' * fill}{'.' * (bar_w - fill)}] {rest}"]
    active = [(r, s) for r, s in zip(runs, states, strict=True) if s.state == "active"]
    name_w = max((len(r.name) for r, _ in active), default=0)
    for r, s in active:
        where = f"step {s.step}/{r.steps}" if r.steps > 0 else "evaluating"
        parts = [r.name.ljust(name_w), where]
        if s.loss is not None:
            parts.append(f"loss {s.loss:.4f}")
        if s.val is not None:
            parts.append(f"val {format_val(s.val, r.metric)}")
        if r.steps > 0:
            parts.append(f"ETA {format_duration(s.eta_s(r.steps))}")
        lines.append("  " + "  ".join(parts))
    return [line[:width] for line in lines]


# --- the live display --------------------------------------------------------------------------------------


class Progress:
    """Shows progress of `runs` on `stream` (default stderr) until stopped: redrawn in place on a terminal,
    plain "progress: " lines every `interval` seconds otherwise (CI, nohup, a log file)."""

    def __init__(
        self,
        runs: Sequence[Tracked],
        stream: TextIO | None = None,
        interval: float | None = None,
        title: str = "",
    ) -> None:
        self.runs = list(runs)
        self.stream: TextIO | None = stream if stream is not None else sys.stderr  # None: stderr closed (2>&-)
        self._dead = self.stream is None  # nowhere to draw: the display is off, the work goes on
        self.tty = self.stream is not None and _isatty(self.stream)
        self.interval = float(interval) if interval is not None else (1.0 if self.tty else 60.0)
        self.title = title
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._stopped = False
        self._t0 = 0.0
        self._initial_done_cost = 0.0
        self._block: list[str] = []  # the live block as last drawn (terminal)

    def start(self) -> Progress:
        """Render once now, then refresh every `interval` seconds from a daemon thread."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self._t0 = time.monotonic()
            self._initial_done_cost = done_cost(self.runs, [read_progress(r) for r in self.runs])
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="windtunnel-progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a display must never take the work down
                self.refresh()

    def lines(self) -> list[str]:
        """The live block for the runs' current state."""
        width = _terminal_width(self.stream) if self.tty and self.stream is not None else PLAIN_WIDTH
        states = [read_progress(r) for r in self.runs]
        elapsed = time.monotonic() - self._t0
        return render(self.runs, states, elapsed, self._initial_done_cost, width=width, title=self.title)

    def refresh(self) -> None:
        """Read the run directories and show the block: redrawn in place on a terminal, printed otherwise."""
        block = self.lines()
        with self._lock:
            if self.tty:
                self._write(self._erase() + self._draw(block))
                self._block = block
            else:
                self._write("".join(f"{PREFIX}{line}\n" for line in block))

    def log(self, line: str) -> None:
        """Print a permanent line (above the live block on a terminal); safe from any thread."""
        with self._lock:
            if self.tty and self._block:
                self._write(self._erase() + f"\x1b[2K{line}\n" + self._draw(self._block))
            else:
                self._write(f"{line}\n")

    def stop(self) -> None:
        """Refresh a last time and end the refresh thread; idempotent."""
        with self._lock:
            if not self._started or self._stopped:
                return
            self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.refresh()

    def __enter__(self) -> Progress:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _erase(self) -> str:
        """ANSI: back to the first line of the drawn block and clear from there down."""
        n = len(self._block)
        return f"\x1b[{n}F\x1b[J" if n else ""

    @staticmethod
    def _draw(block: list[str]) -> str:
        return "".join(f"\x1b[2K{line}\n" for line in block)

    def _write(self, text: str) -> None:
        """Write to the stream; one that is closed or broken turns the display off, never the work."""
        if self._dead or self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # closed (2>&-), a reader gone (EPIPE)
            self._dead = True


class StepLines:
    """Plain progress of one training run for a stream that is not a terminal (CI, nohup, a log file), where no bar
    is drawn: a "progress: " line each time the run passes another of `parts` equal shares of its steps, and at
    least every `interval` seconds, e.g.

        progress: train step 230/1000 (23%) · loss 0.4123 · val 0.0512 · 1m10s elapsed · ETA 3m54s

    `val` is the latest validation `metric`; the ETA is at this process's pace since `initial`."""

    def __init__(
        self,
        total: int,
        initial: int = 0,
        stream: TextIO | None = None,
        interval: float = 60.0,
        parts: int = 10,
        metric: str = "entropy_mae_bits",
    ) -> None:
        self.total, self.initial, self.interval, self.parts, self.metric = total, initial, interval, parts, metric
        self.stream: TextIO | None = stream if stream is not None else sys.stderr
        self._share = self._share_of(initial)
        self._t0 = self._last = time.monotonic()

    def _share_of(self, step: int) -> int:
        return step * self.parts // self.total if self.total > 0 else self.parts

    def line(self, step: int, loss: float | None, val: float | None, elapsed_s: float) -> str:
        """The line for `step` (without the newline)."""
        pct = 100 * step // self.total if self.total > 0 else 100
        parts = [f"train step {step}/{self.total} ({pct}%)"]
        if loss is not None:
            parts.append(f"loss {loss:.4f}")
        if val is not None:
            parts.append(f"val {format_val(val, self.metric)}")
        eta = (self.total - step) * elapsed_s / (step - self.initial) if step > self.initial else None
        parts += [f"{format_duration(elapsed_s)} elapsed", f"ETA {format_duration(eta)}"]
        return PREFIX + " · ".join(parts)

    def update(self, step: int, loss: float | None = None, val: float | None = None) -> None:
        """Print the line for `step` if it starts a new share of the steps, is the last, or `interval` has passed."""
        now, share = time.monotonic(), self._share_of(step)
        if share <= self._share and step < self.total and now - self._last < self.interval:
            return
        self._share, self._last = share, now
        if self.stream is None:
            return
        try:
            self.stream.write(self.line(step, loss, val, now - self._t0) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # closed (2>&-), a reader gone (EPIPE): the display stops, never the work
            self.stream = None


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _terminal_width(stream: TextIO) -> int:
    """Columns of the terminal, less one so a full line never wraps (wrapping would break the redraw)."""
    try:
        cols = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        cols = 0
    if cols <= 0:  # a pseudo-terminal that reports no size (script, some CI runners)
        cols = shutil.get_terminal_size((100, 24)).columns or 100
    return max(cols - 1, 40)


__all__ = [
    "Progress",
    "RunProgress",
    "StepLines",
    "Tracked",
    "done_cost",
    "format_duration",
    "format_val",
    "read_progress",
    "render",
    "suite_eta_s",
]
