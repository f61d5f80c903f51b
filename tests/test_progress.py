"""Live progress (windtunnel.progress): reading fake run directories, the pure render, and the display on a
terminal and on a plain stream. No training."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from windtunnel.progress import (
    Progress,
    RunProgress,
    Tracked,
    format_duration,
    read_progress,
    render,
)
from windtunnel.store.rundir import DONE, METRICS, OWNER_FILE


def _train(step: int, loss: float = 1.0, elapsed: float | None = None) -> dict:
    return {
        "step": step,
        "loss": loss,
        "lr": 1e-3,
        "time_s": 0.01,
        "tokens_per_s": 1e5,
        "train_s": step * 0.01,
        "elapsed_s": step * 0.01 if elapsed is None else elapsed,
    }


def _eval(step: int, **metrics: float) -> dict:
    return {"step": step, "split": "eval", **metrics}


def make_run(
    root: Path, name: str, records: list[dict], *, owner: bool = False, done: bool = False, torn: str = ""
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    with open(d / METRICS, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.write(torn)
    if owner:
        (d / OWNER_FILE).write_text(json.dumps({"pid": 1, "host": "h", "since": 0}) + "\n")
    if done:
        (d / DONE).write_text("{}\n")
    return d


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- read_progress -----------------------------------------------------------------------------------------


def test_states(tmp_path: Path) -> None:
    waiting = Tracked("w", tmp_path / "w", steps=10)  # no directory at all
    assert read_progress(waiting) == RunProgress("waiting", 0, None, None, None)
    make_run(tmp_path, "w2", [_train(5)])
    assert read_progress(Tracked("w2", tmp_path / "w2", 10)).state == "waiting"
    make_run(tmp_path, "a", [_train(5)], owner=True)
    assert read_progress(Tracked("a", tmp_path / "a", 10)).state == "active"
    make_run(tmp_path, "d", [_train(10)], owner=True, done=True)  # done.json wins over a stale owner file
    assert read_progress(Tracked("d", tmp_path / "d", 10)).state == "done"


def test_numbers(tmp_path: Path) -> None:
    recs = [_train(100, 2.0, 1.0), _eval(100, entropy_mae_bits=0.5, accuracy=0.5), _train(200, 1.5, 2.0)]
    recs += [_eval(200, entropy_mae_bits=0.25, accuracy=0.9), _train(300, 1.25, 3.0)]
    make_run(tmp_path, "r", recs, owner=True)
    p = read_progress(Tracked("r", tmp_path / "r", steps=1000))
    assert (p.state, p.step, p.loss, p.val, p.elapsed_s) == ("active", 300, 1.25, 0.25, 3.0)
    assert p.fraction(1000) == pytest.approx(0.3)
    assert p.eta_s(1000) == pytest.approx(700 * 3.0 / 300)
    acc = read_progress(Tracked("r", tmp_path / "r", steps=1000, metric="accuracy"))
    assert acc.val == 0.9


def test_fraction_and_eta_edges() -> None:
    assert RunProgress("done", 3).fraction(10) == 1.0
    assert RunProgress("done", 0).fraction(0) == 1.0
    assert RunProgress("active", 0).fraction(0) == 0.0
    assert RunProgress("active", 20, elapsed_s=1.0).fraction(10) == 1.0
    assert RunProgress("waiting").eta_s(10) is None
    assert RunProgress("active", 5, loss=1.0).eta_s(10) is None  # no elapsed_s
    assert RunProgress("done", 10, elapsed_s=4.0).eta_s(10) == 0.0


def test_torn_last_line_ignored(tmp_path: Path) -> None:
    make_run(tmp_path, "t", [_train(10, 1.0, 1.0), _train(20, 0.5, 2.0)], owner=True, torn='{"step": 30, "lo')
    p = read_progress(Tracked("t", tmp_path / "t", steps=100))
    assert (p.step, p.loss, p.elapsed_s) == (20, 0.5, 2.0)


def test_garbage_and_empty_files(tmp_path: Path) -> None:
    d = make_run(tmp_path, "g", [], owner=True)
    assert read_progress(Tracked("g", d, 10)) == RunProgress("active")
    (d / METRICS).write_bytes(b"\xff\xfe not json\n[1, 2]\n" + json.dumps(_train(7)).encode() + b"\n\x00\x01")
    assert read_progress(Tracked("g", d, 10)).step == 7


def test_tail_of_large_file(tmp_path: Path) -> None:
    d = tmp_path / "big"
    d.mkdir()
    with open(d / METRICS, "w") as f:
        for step in range(1, 50_001):
            f.write(json.dumps(_train(step, loss=1.0 / step, elapsed=step * 0.001)) + "\n")
            if step % 500 == 0:
                f.write(json.dumps(_eval(step, entropy_mae_bits=1.0 / step)) + "\n")
    assert (d / METRICS).stat().st_size > 1_000_000
    p = read_progress(Tracked("big", d, steps=100_000))
    assert p.step == 50_000
    assert p.loss == pytest.approx(1.0 / 50_000)
    assert p.val == pytest.approx(1.0 / 50_000)
    assert p.elapsed_s == pytest.approx(50.0)


def test_tail_widens_to_find_older_eval(tmp_path: Path) -> None:
    """The last evaluation lies beyond the first 16 KiB window: the read widens to find it."""
    recs = [_train(1), _eval(1, entropy_mae_bits=0.125)] + [_train(s) for s in range(2, 2000)]
    d = make_run(tmp_path, "e", recs, owner=True)
    assert (d / METRICS).stat().st_size > 64 * 1024
    p = read_progress(Tracked("e", d, steps=5000))
    assert (p.step, p.val) == (1999, 0.125)


# --- render ------------------------------------------------------------------------------------------------


def test_format_duration() -> None:
    assert format_duration(45) == "45s"
    assert format_duration(130) == "2m10s"
    assert format_duration(3900) == "1h05m"
    assert format_duration(0) == "0s"
    assert format_duration(None) == "—"


def _suite() -> tuple[list[Tracked], list[RunProgress]]:
    runs = [
        Tracked("a", Path("a"), 1000, cost=2.0),
        Tracked("b", Path("b"), 1000, cost=1.0),
        Tracked("c", Path("c"), 1000, cost=1.0),
        Tracked("recall", Path("d"), 1000, cost=1.0, metric="accuracy"),
    ]
    states = [
        RunProgress("done", 1000, 0.1, 0.01, 100.0),
        RunProgress("active", 500, 1.234, 0.0812, 50.0),
        RunProgress("waiting"),
        RunProgress("active", 250, 0.5, 0.9712, 25.0),
    ]
    return runs, states


def test_render_overall_line_and_eta() -> None:
    runs, states = _suite()
    # total cost 5; done cost 2*1 + 1*0.5 + 0 + 1*0.25 = 2.75. Started with 1.75 done, 100 s ago:
    # rate = (2.75 - 1.75) / 100 = 0.01 per s; ETA = (5 - 2.75) / 0.01 = 225 s = 3m45s.
    lines = render(runs, states, elapsed_s=100.0, initial_done_cost=1.75)
    head = lines[0]
    assert "1/4 runs done" in head and "2 active" in head
    assert "1m40s elapsed" in head and "ETA 3m45s" in head
    bar = head[head.index("[") + 1 : head.index("]")]
    assert set(bar) <= {"#", "."} and bar.count("#") == int(2.75 / 5 * len(bar))
    assert all(len(line) <= 100 for line in lines)


def test_render_eta_dash_before_progress() -> None:
    runs, states = _suite()
    assert render(runs, states, elapsed_s=0.0, initial_done_cost=0.0)[0].endswith("ETA —")
    assert render(runs, states, elapsed_s=30.0, initial_done_cost=2.75)[0].endswith("ETA —")  # nothing new yet
    fresh = [RunProgress("waiting") for _ in runs]
    head = render(runs, fresh, elapsed_s=5.0, initial_done_cost=0.0)[0]
    assert "0/4 runs done" in head and "0 active" in head and head.endswith("ETA —")


def test_render_active_lines() -> None:
    runs, states = _suite()
    lines = render(runs, states, elapsed_s=100.0, initial_done_cost=1.75)
    assert len(lines) == 3  # overall + the two active runs
    b, recall = lines[1], lines[2]
    assert b.startswith("  b ") and "step 500/1000" in b and "loss 1.2340" in b and "val 0.0812" in b
    assert b.endswith("ETA 50s")  # (1000 - 500) * 50 / 500
    assert recall.startswith("  recall") and "step 250/1000" in recall and "val 97.1%" in recall
    assert recall.endswith("ETA 1m15s")  # (1000 - 250) * 25 / 250
    assert not any(line.startswith("  a ") or line.startswith("  c ") for line in lines)


def test_render_baseline_and_title() -> None:
    runs = [Tracked("bayes", Path("x"), steps=0)]
    lines = render(runs, [RunProgress("active", val=0.0)], elapsed_s=1.0, initial_done_cost=0.0, title="suite")
    assert lines[0].startswith("suite [")
    assert "evaluating" in lines[1] and "val 0.0000" in lines[1] and "ETA" not in lines[1]
    narrow = render(runs, [RunProgress("active")], elapsed_s=1.0, initial_done_cost=0.0, width=30)
    assert all(len(line) <= 30 for line in narrow)


# --- Progress ----------------------------------------------------------------------------------------------


def _two_runs(tmp_path: Path) -> list[Tracked]:
    make_run(tmp_path, "one", [_train(40, 0.75, 4.0), _eval(40, entropy_mae_bits=0.5)], owner=True)
    make_run(tmp_path, "two", [_train(100)], done=True)
    return [Tracked("one", tmp_path / "one", 100), Tracked("two", tmp_path / "two", 100)]


def test_plain_stream(tmp_path: Path) -> None:
    out = io.StringIO()
    prog = Progress(_two_runs(tmp_path), stream=out, title="t")
    assert prog.interval == 60.0
    with prog:
        text = out.getvalue()
        assert text  # rendered at once, not after the first interval
        prog.log("two: finished in 12 s")
    text = out.getvalue()
    assert "\x1b" not in text
    lines = text.splitlines()
    assert "two: finished in 12 s" in lines
    shown = [line for line in lines if line != "two: finished in 12 s"]
    assert shown and all(line.startswith("progress: ") for line in shown)
    assert any("1/2 runs done" in line for line in shown)
    assert any("one" in line and "step 40/100" in line and "val 0.5000" in line for line in shown)
    assert len(shown) == 4  # start + final refresh, two lines each


def test_tty_redraws_in_place(tmp_path: Path) -> None:
    out = FakeTTY()
    prog = Progress(_two_runs(tmp_path), stream=out)
    assert prog.interval == 1.0
    prog.start()
    first = out.getvalue()
    assert first and "\x1b[2K" in first and "progress: " not in first
    prog.log("one: finished in 3 s")
    prog.stop()
    text = out.getvalue()
    assert "\x1b[2F" in text and "\x1b[J" in text  # moved up over the two-line block and cleared it
    logged = text.index("one: finished in 3 s")
    assert text.rfind("1/2 runs done") > logged  # the block was drawn again below the logged line


def test_refreshes_on_interval(tmp_path: Path) -> None:
    runs = _two_runs(tmp_path)
    out = io.StringIO()
    with Progress(runs, stream=out, interval=0.02):
        with open(runs[0].run_dir / METRICS, "a") as f:
            f.write(json.dumps(_train(80, 0.5, 8.0)) + "\n")
        deadline = time.monotonic() + 5
        while "step 80/100" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "step 80/100" in out.getvalue()


def test_start_and_stop_idempotent(tmp_path: Path) -> None:
    out = io.StringIO()
    prog = Progress(_two_runs(tmp_path), stream=out, interval=3600)
    prog.stop()  # never started: nothing to do
    assert out.getvalue() == ""
    t0 = time.monotonic()
    assert prog.start() is prog
    prog.start()
    n = len(out.getvalue().splitlines())
    assert n == 2
    prog.stop()
    after = out.getvalue()
    prog.stop()
    assert out.getvalue() == after
    assert time.monotonic() - t0 < 5  # stop does not wait for the hour-long interval
    assert prog._thread is not None and not prog._thread.is_alive()


def test_a_dead_writer_of_this_host_is_not_active(tmp_path):
    """A killed run leaves its owner file: with its pid gone it reads as waiting, not active."""
    import os
    import socket
    import subprocess
    import sys

    d = tmp_path / "run"
    d.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = {"host": socket.gethostname(), "since": 0}
    (d / OWNER_FILE).write_text(json.dumps({**owner, "pid": int(gone.stdout)}) + "\n")
    assert read_progress(Tracked("r", d, 10)).state == "waiting"
    (d / OWNER_FILE).write_text(json.dumps({**owner, "pid": os.getpid()}) + "\n")
    assert read_progress(Tracked("r", d, 10)).state == "active"
