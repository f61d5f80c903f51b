"""`probe_run(run_dir)`: every registered geometry probe (geometry/registry.py) on a run directory's checkpoint ->
geometry.json + figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from windtunnel.devices import resolve_device
from windtunnel.geometry.figures import write_figures
from windtunnel.geometry.probes import probe_model
from windtunnel.geometry.registry import ProbeContext, probes, run_probe
from windtunnel.models import is_baseline
from windtunnel.runs import build_model, load_run
from windtunnel.store.records.run_dir import Geometry
from windtunnel.store.rundir import FIGURES, check_writable, folder, run_directory_of


def probe_device(device: torch.device | str | None) -> torch.device:
    """None -> the CPU; otherwise as a run's `train.device` ("auto": CUDA when present; CUDA without one is a
    ValueError), or any torch device string."""
    if device is None:
        return torch.device("cpu")
    try:
        return resolve_device(str(device))
    except RuntimeError as err:  # torch.device("nonsense")
        raise ValueError(f"device: {str(device)!r} is not a device (use auto, cpu or cuda)") from err


def probe_run(
    run_dir: str | Path,
    checkpoint: int | None = None,
    out: str | Path | None = None,
    n: int = 256,
    figures: bool = True,
    dynamics_n: int = 64,
    *,
    trust_code: bool = False,
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """Probe checkpoint `checkpoint` (default: the latest) of a run; write geometry.json (+ figures/) to `out`, each
    figure's path in it relative to `out`.

    The frame-precision probe uses every checkpoint up to the probed one (train with a dense
    `checkpoint_schedule` to get a useful curve). trust_code: see `runs.load_run`. device: where the probes run
    (the trained model, its init copy, every earlier checkpoint and the held-out data go there); None = the CPU,
    "auto" = CUDA when present (`probe_device`).
    The held-out sequences are the same on every device (geometry/data.py) and every result is a plain float, so
    a CUDA probe agrees with the CPU one to float tolerance; on the CPU the numbers are those of device=None.
    """
    if int(n) < 2:
        raise ValueError(f"n: must be >= 2 (got {n})")
    out_dir = Path(out) if out is not None else Path(run_dir)
    check_writable(out_dir, "--out" if out is not None else "run_dir")  # fail before the work, not after it
    inside = run_directory_of(out_dir) if out is not None else None
    if inside is not None and out_dir.resolve() != Path(run_dir).resolve():  # another run's geometry.json, figures/
        raise ValueError(
            f"--out: {str(out)!r} is or lies inside the run directory {str(inside)!r}, whose files are its own; "
            "probe into the run itself (no --out) or a folder of its own"
        )
    if figures:
        folder(out_dir, FIGURES)  # a link there is refused before the work too
    run = load_run(run_dir, trust_code=trust_code)
    steps = run.checkpoints()
    if not steps:
        raise ValueError(f"run_dir: {str(run_dir)!r} has no checkpoint to probe")
    step = steps[-1] if checkpoint is None else int(checkpoint)
    if step not in steps:
        raise ValueError(f"checkpoint: {step} is not in this run; choose one of {steps}")
    dev = probe_device(device)
    model = run.load_checkpoint(step)
    if is_baseline(model):
        raise ValueError(f"run_dir: {run.config.model.arch!r} is a baseline predictor with no internals to probe")
    task = run.task
    if 0 in steps and step != 0:  # the stored step-0 weights, where the run kept them
        init_model, init_source = run.load_checkpoint(0).eval(), "checkpoint 0"
    else:  # the same config and seed, re-initialised: the weights training started from
        init_model = build_model(
            run.config, task.spec, task, trust_code=trust_code, exclude=(run.path, run.path.parent)
        ).eval()
        init_source = f"runs.build_model(config), seed {run.config.seed}"
    model, init_model = model.to(dev), init_model.to(dev)

    def load_on_device(s: int) -> nn.Module:
        return run.load_checkpoint(s).to(dev)

    results, data = probe_model(model, task, n=n, init_model=init_model, seed=run.config.seed)
    history = ProbeContext(  # the probes that read the checkpoints up to this one (`Probe.history`: the dynamics)
        model,
        task,
        data,
        init_model=init_model,
        seed=run.config.seed,
        n=n,
        steps=[s for s in steps if s <= step],
        load=load_on_device,
        dynamics_n=dynamics_n,
    )
    for probe in probes():
        if probe.history:
            results[probe.name] = run_probe(probe, history)
    results = {
        "run_dir": os.path.relpath(run_dir, out_dir),  # the run probed, relative to this file: valid when moved
        "arch": run.config.model.arch,
        "task": task.name,
        "step": step,
        "seed": run.config.seed,
        "init_source": init_source,
        **results,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    if figures:  # out_dir/figures, never through a link (`rundir.folder`); each path relative to geometry.json
        drawn = write_figures(results, model, data, folder(out_dir, FIGURES), init_model=init_model)
        results["figures"] = [Path(p).relative_to(out_dir).as_posix() for p in drawn]
    Geometry.from_results(results, out_dir).write(out_dir)
    return results
