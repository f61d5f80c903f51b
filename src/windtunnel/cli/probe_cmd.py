"""`windtunnel probe RUN_DIR`: geometry probes of a trained run -> geometry.json and figures."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import typer

from windtunnel.cli.common import (
    cli_device,
    device_option,
    fail,
    guarded,
    import_modules,
    import_option,
    loading,
    out_option,
    read_only_run,
    threads_option,
    trust_code_option,
    use_threads,
    writable_dir,
)
from windtunnel.cli.root import app
from windtunnel.text import number


def _fmt(x: Any) -> str:
    return number(x, ".4g") if isinstance(x, float) else str(x)


def _summary(r: dict[str, Any]) -> list[str]:
    """A few headline numbers per probe, for the terminal: each registered probe's `terminal` line."""
    from windtunnel.geometry.registry import probes

    lines = [f"{r['arch']} on {r['task']}, step {r['step']}: entropy error {_fmt(r['entropy_error_bits'])} bits"]
    for probe in probes():
        p = r.get(probe.name)
        if p is None or probe.terminal is None:  # not probed (a probe subset, or a result from before it existed)
            continue
        if "not_applicable" in p:
            lines.append(f"  {probe.name}: n/a ({p['not_applicable']})")
        elif "error" in p:
            lines.append(f"  {probe.name}: error ({p['error']})")
        else:
            lines.append(f"  {probe.name}: {probe.terminal(p)}")
    return lines


@app.command()
@guarded
def probe(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="run directory (has config.json and checkpoints/)"),
    checkpoint: int | None = typer.Option(None, "--checkpoint", help="step to probe (default: the latest)"),
    out: Path | None = out_option(None, "output directory (default: the run directory)"),
    n: int = typer.Option(256, "--n", help="held-out sequences to probe (>= 2)"),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="write PNG figures"),
    trust_code: bool = trust_code_option(),
    imports: list[str] | None = import_option(),
    device: str = device_option("cpu", "auto (CUDA when present), cpu or cuda"),
    threads: int | None = threads_option(per_run=False),
) -> None:
    """Geometry probes of a trained run: geometry.json and figures.

    The probes: key frame, attention sharpening, value manifold, clusters, logit lens, ablations, frame-precision
    dynamics and memory, on held-out sequences (docs/geometry.md). A run whose config records imports needs each of
    them as --import (or --trust-code)."""
    with loading():
        from windtunnel.geometry.run import probe_run
        from windtunnel.store.rundir import GEOMETRY

    writes = f"probe writes {GEOMETRY}{' and figures/' if figures else ''}"
    if out is None and run_dir.is_dir() and not writable_dir(run_dir):  # before the work, not after it
        fail(read_only_run(run_dir, writes, "--out DIR"))
    dev = cli_device(device)
    import_modules(imports)
    use_threads(threads)
    try:
        result = probe_run(
            run_dir, checkpoint=checkpoint, out=out, n=n, figures=figures, trust_code=trust_code, device=dev
        )
    except OSError as err:  # a read-only mount os.access did not tell
        if out is not None or err.errno != errno.EROFS:
            raise
        fail(read_only_run(run_dir, writes, "--out DIR"))
    for line in _summary(result):
        typer.echo(line)
    typer.echo(f"wrote {(out or run_dir) / GEOMETRY}")
