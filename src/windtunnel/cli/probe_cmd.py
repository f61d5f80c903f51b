"""`windtunnel probe RUN_DIR`: geometry probes of a trained run -> geometry.json and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from windtunnel.cli.common import cli_device, device_option, guarded, import_modules, import_option
from windtunnel.cli.root import app
from windtunnel.cli.train_cmd import READ_IMPORT_HELP, TRUST_HELP
from windtunnel.text import number


def _fmt(x: Any) -> str:
    return number(x, ".4g") if isinstance(x, float) else str(x)


def _within(m: dict[str, Any]) -> str:
    """The manifold's entropy R^2 within position (position cannot fake it), or that the task leaves none to measure."""
    w = m.get("within_position") or {}
    if "entropy_r2" not in w:
        return "within position not measurable on this task" if "not_measurable" in w else "within position n/a"
    return f"within position {_fmt(w['entropy_r2'])}"


def _dynamics(p: dict[str, Any]) -> str:
    """When the frame and the precision settled, or that they had not by the last checkpoint probed."""
    last = p["checkpoints"][-1]["step"] if p.get("checkpoints") else None

    def when(what: str, step: Any) -> str:
        if step is not None:
            return f"{what} at step {step}"
        return f"{what} not reached by the last checkpoint" + (f" (step {last})" if last is not None else "")

    frame = p.get("frame")
    if isinstance(frame, dict) and "not_applicable" in frame:
        head = f"frame n/a ({frame['not_applicable']})"
    else:
        head = when("frame 90%", p.get("frame_step_90"))
    return f"{head}, {when('error within 2x', p.get('precision_step_2x'))}"


def _memory(p: dict[str, Any]) -> str:
    """`lag 1 model 0.081 / exact 0.085 bits; ...` at lags 1, 2, 4, 8, ... and the last: the belief's move when one
    earlier observation is resampled, beside the exact filter's (no verdict)."""
    lags = p["lags"]
    shown = sorted({j for j in lags if j & (j - 1) == 0} | {lags[-1]})
    moves = "; ".join(f"lag {j} model {_fmt(p['model'][j - 1])} / exact {_fmt(p['exact'][j - 1])}" for j in shown)
    return f"{moves} bits"


def _summary(r: dict[str, Any]) -> list[str]:
    """A few headline numbers per probe, for the terminal."""
    lines = [f"{r['arch']} on {r['task']}, step {r['step']}: entropy error {_fmt(r['entropy_error_bits'])} bits"]
    picks = {
        "keys": lambda p: (
            f"layer-0 mean |cos| {_fmt(p['mean_abs_cos_per_layer'][0])} (gaussian {_fmt(p['gaussian_baseline'])})"
        ),
        "attention": lambda p: f"entropy drop first->last layer {_fmt(p['drop_first_to_last_pct'])}%",
        "manifold": lambda p: (
            f"final PC1 {_fmt(p['final']['pc1_var'])}, entropy R^2 {_fmt(p['final']['entropy_r2'])} pooled "
            f"(position alone can give it), {_within(p['final'])}"
        ),
        "clusters": lambda p: (
            f"ARI {_fmt(p['ari'])}, silhouette {_fmt(p.get('silhouette'))}, entropy R^2 {_fmt(p['entropy_r2'])}"
        ),
        "lens": lambda p: "KL per layer " + " ".join(_fmt(k) for k in p["kl_bits_per_layer"]),
        "ablation": lambda p: (
            f"baseline {_fmt(p['baseline_entropy_error_bits'])} bits"
            + (
                f", frame head L0H{p['frame_head']['head']} {number(p['frame_head']['delta_bits'], '+.4g')} bits"
                if "frame_head" in p
                else ""
            )
        ),
        "dynamics": _dynamics,
        "memory": _memory,
    }
    for name, pick in picks.items():
        p = r.get(name)
        if p is None:  # not probed (a probe subset, or a result from before the probe existed)
            continue
        if "not_applicable" in p:
            lines.append(f"  {name}: n/a ({p['not_applicable']})")
        elif "error" in p:
            lines.append(f"  {name}: error ({p['error']})")
        else:
            lines.append(f"  {name}: {pick(p)}")
    return lines


@app.command()
@guarded
def probe(
    run_dir: Path = typer.Argument(..., help="run directory (has config.json and checkpoints/)"),
    checkpoint: int | None = typer.Option(None, "--checkpoint", help="step to probe (default: the latest)"),
    out: Path | None = typer.Option(None, "--out", help="output directory (default: the run directory)"),
    n: int = typer.Option(256, "--n", help="held-out sequences to probe (>= 2)"),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="write PNG figures"),
    trust_code: bool = typer.Option(False, "--trust-code", help=TRUST_HELP),
    imports: list[str] | None = import_option(READ_IMPORT_HELP),
    device: str = device_option("cpu", "auto (CUDA when present), cpu or cuda: where the model and the probe data go"),
) -> None:
    """Geometry probes (key frame, attention sharpening, value manifold, clusters, logit lens, ablations,
    frame-precision dynamics, memory) on held-out sequences; writes geometry.json and figures/."""
    from windtunnel.geometry.run import probe_run
    from windtunnel.rundir import GEOMETRY

    dev = cli_device(device)
    import_modules(imports)
    result = probe_run(run_dir, checkpoint=checkpoint, out=out, n=n, figures=figures, trust_code=trust_code, device=dev)
    for line in _summary(result):
        typer.echo(line)
    typer.echo(f"wrote {(out or run_dir) / GEOMETRY}")
