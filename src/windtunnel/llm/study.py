"""`llm_geometry(model_dir, out)`: the paper's geometric signatures of a causal LM on disk, each beside a random-init
model of the same config, written to a folder (`windtunnel llm-geometry`; docs/llm.md).

    out/llm_geometry.json          everything: the model, its config, the prompts, n, seed, versions, every statistic
                                   with its nulls and differences, and the exact-posterior prompt scores
    out/llm_geometry.md            the same as tables
    out/figures/value_pc1.png      value PC1 (and participation ratio) by layer, model and random-init model
    out/figures/attention_entropy.png   last-query attention entropy by layer, model and random-init model
    out/figures/key_orthogonality.png   mean |cos| by layer under each key definition, with both nulls

The model and its tokenizer are read from `model_dir` only (`local_files_only=True`: nothing is downloaded). The
statistics are `windtunnel.llm.geometry`'s. Files are written atomically (`rundir.atomic_write`, `plotting.save`)
under the folder's lock, the JSON last. An existing non-empty `out` is refused unless `overwrite`, and overwrite
deletes only the files this command writes (`LAYOUT`), in a folder whose llm_geometry.json (if any) is one of its
own: anything else there is refused, named, and nothing is deleted (as `train --overwrite`, `rundir.clear`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from windtunnel.llm import geometry as geo
from windtunnel.llm.model_files import check_model_dir, load
from windtunnel.llm.prompt_sources import _is_scorable, _prompts_module, _text, check_n, resolve_prompts
from windtunnel.llm.study_output import KIND, Progress, refuse_existing, write
from windtunnel.store.rundir import check_output_dir

N_NULLS = 3  # random-init draws by default: one draw says nothing of how far two random inits differ
NULL_SEED_BASE = 1_000_003  # default null seeds: NULL_SEED_BASE + seed * N_NULLS_MAX + i, far from the usual 0, 1, 42
N_NULLS_MAX = 16
DTYPES = ("float32", "bfloat16", "float16")


def _versions() -> dict[str, str | None]:
    import windtunnel

    out: dict[str, str | None] = {"windtunnel": windtunnel.__version__, "torch": torch.__version__}
    for name in ("transformers", "tokenizers", "numpy"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def config_summary(model: Any, lm: Any) -> dict[str, Any]:
    c = model.config
    a = lm.adapter
    return {
        "model_type": c.model_type,
        "architectures": list(getattr(c, "architectures", None) or [type(model).__name__]),
        "family": a.family,
        "n_layers": a.n_layers,
        "n_heads": a.n_heads,
        "n_kv_heads": a.n_kv_heads,
        "d_model": a.d_model,
        "d_head": a.d_head,
        "vocab_size": int(lm.spec.vocab_size),
        "max_position_embeddings": getattr(c, "max_position_embeddings", None),
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
    }


def tokenize(tokenizer: Any, texts: Sequence[str], limit: int | None, vocab: int) -> list[list[int]]:
    """Each text's token ids (the tokenizer's own special tokens included); an empty or too-long one, or one with a
    token the model's embedding does not hold (a tokenizer that is not the model's), is an error naming it."""
    out = []
    for i, text in enumerate(texts):
        ids = [int(t) for t in tokenizer(text)["input_ids"]]
        if not ids:
            raise ValueError(f"prompts: prompt {i + 1} ({text[:40]!r}) has no tokens")
        if max(ids) >= vocab or min(ids) < 0:
            bad = next(t for t in ids if not 0 <= t < vocab)
            raise ValueError(
                f"--model: its tokenizer gives token id {bad} (prompt {i + 1}), outside the model's vocabulary of "
                f"{vocab}; the tokenizer saved there is not the model's"
            )
        if limit is not None and len(ids) > limit:
            raise ValueError(
                f"prompts: prompt {i + 1} has {len(ids)} tokens, more than the model's {limit} positions; shorten it"
            )
        out.append(ids)
    return out


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"--dtype: must be one of {', '.join(DTYPES)} (got {name!r})")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def llm_geometry(
    model_dir: str | Path,
    out: str | Path,
    prompts: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
    score_prompts: bool = True,
    *,
    overwrite: bool = False,
    null_seed: int | Sequence[int] | None = None,
    n_nulls: int = N_NULLS,
    batch_size: int = 16,
    n_boot: int = geo.N_BOOT,
    device: torch.device | str = "cpu",
    dtype: str = "float32",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The paper's geometric signatures of the causal LM saved in `model_dir`, each beside a random-init model of the
    same config on the same prompts; writes `out` (module docstring) and returns what llm_geometry.json holds.

    prompts: None for n of the built-in exact-posterior prompts (`windtunnel.llm.prompts`, seed `seed`; n default
    N_DEFAULT), taken round-robin over their (family, position) cells (`builtin_subset`), or a file (`read_prompts`:
    one prompt a line, or .jsonl), of which the first n are read.
    score_prompts: score the exact-posterior prompts (`prompts.score`) of the model and of the random-init model.
    seed: the built-in prompts' and the bootstrap's.
    null_seed: the random-init models' seeds (one or several, distinct); default `null_seeds(seed, n_nulls)`. A draw
    whose weights equal the model's (a model built under that torch seed) is refused: it would be its own null.
    n_nulls: how many random-init draws when `null_seed` is not given (1 to N_NULLS_MAX; default 3). Each statistic
    holds every draw's value, their range and the model's ratio to them (`geometry._with_draws`); the paired
    intervals are over prompts against the first draw, and each draw's difference has its own.
    overwrite: replace what an earlier llm-geometry wrote in `out` (nothing else is ever deleted).
    """
    say = progress or (lambda _: None)
    check_n(n)
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: must be >= 1 (got {batch_size})")
    torch_dtype = _dtype(dtype)
    model_path = check_model_dir(model_dir)
    items, source = resolve_prompts(prompts, n, seed)
    out_dir = Path(out)
    check_output_dir(out_dir, "--out")  # never a run directory, nor inside one
    refuse_existing(out_dir, overwrite)

    from windtunnel.hf import from_hf
    from windtunnel.models.hf.core import transformers

    lib = transformers()
    say(f"loading {model_path} (local files only)")
    model, tokenizer = load(lib, model_path, torch_dtype)
    model = model.to(device).eval()
    lm = from_hf(model)
    limit = getattr(model.config, "max_position_embeddings", None)
    ids = tokenize(
        tokenizer,
        [_text(x) for x in items],
        int(limit) if limit else None,
        int(model.get_input_embeddings().num_embeddings),
    )
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    seeds = check_null_seeds(null_seed, n_nulls, seed)
    nulls = []
    for s in seeds:
        say(f"random-init model of the same config (seed {s})")
        nulls.append(geo.random_init_like(model, s))
        refuse_self_null(model, nulls[-1], s)
    null_lms = [from_hf(null) for null in nulls]
    stats = geo.geometry(
        lm, null_lms[0], ids, seed=seed, batch_size=batch_size, n_boot=n_boot, pad_id=int(pad), progress=progress,
        more_nulls=null_lms[1:],
    )  # fmt: skip
    draws = "draw" if len(seeds) == 1 else "draws"
    seed_text = ", ".join(map(str, seeds))
    result: dict[str, Any] = {
        "kind": KIND,
        "model_dir": str(model_path.resolve()),
        "config": config_summary(model, lm),
        "n": len(items),
        "seed": int(seed),
        "null_seed": seeds[0],
        "null_seeds": seeds,
        "prompts": source,
        "null_model": f"AutoModelForCausalLM.from_config(config), {len(seeds)} {draws}, torch seeds {seed_text}, "
        f"{dtype}; paired intervals against seed {seeds[0]}",
        "versions": _versions(),
        "definitions": dict(geo.DEFINITIONS),
        "geometry": stats,
        "scores": _scores(model, nulls, tokenizer, items, score_prompts, batch_size, say),
    }
    write(out_dir, result, overwrite, say)
    return result


def check_null_seeds(null_seed: int | Sequence[int] | None, n_nulls: int, seed: int) -> list[int]:
    """The random-init draws' seeds: `null_seed` (one or several, distinct), else `null_seeds(seed, n_nulls)`; a
    ValueError naming --null-seed or --nulls otherwise."""
    if null_seed is None:
        if isinstance(n_nulls, bool) or not 1 <= int(n_nulls) <= N_NULLS_MAX:
            raise ValueError(f"--nulls: must be between 1 and {N_NULLS_MAX} (got {n_nulls})")
        return null_seeds(seed, int(n_nulls))
    seeds = [int(null_seed)] if isinstance(null_seed, int) else [int(s) for s in null_seed]
    if not 1 <= len(seeds) <= N_NULLS_MAX:
        raise ValueError(f"--null-seed: give between 1 and {N_NULLS_MAX} seeds (got {len(seeds)})")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--null-seed: each draw needs its own seed ({repeated[0]} is given twice)")
    return seeds


def null_seeds(seed: int, n: int) -> list[int]:
    """The default seeds of `n` random-init draws for a run of `seed`: distinct, and away from the small seeds a model
    is commonly built under (a model built under its null's seed is refused: `refuse_self_null`)."""
    return [NULL_SEED_BASE + int(seed) * N_NULLS_MAX + i for i in range(n)]


@torch.no_grad()
def refuse_self_null(model: Any, null: Any, null_seed: int) -> None:
    """A ValueError where the random-init draw of `null_seed` has the model's own weights (a model built from its
    config under that torch seed): a statistic against it would be the model against itself."""
    pairs = zip(model.parameters(), null.parameters(), strict=True)
    if all(a.shape == b.shape and torch.equal(a, b.to(a.device)) for a, b in pairs):
        raise ValueError(
            f"--null-seed: the random-init model of seed {null_seed} has exactly the model's weights (the model was "
            "built from its config under that torch seed): it cannot be the model's null; give other --null-seed "
            "values"
        )


def _scores(
    model: Any, nulls: Sequence[Any], tokenizer: Any, items: Sequence[Any], wanted: bool, batch_size: int,
    say: Progress,
) -> dict[str, Any]:  # fmt: skip
    """The exact-posterior prompts' scores of the model and of each random-init draw (`null_model`: the first;
    `null_models`: every one, in seed order), or why there are none."""
    if not wanted:
        return {"skipped": "not asked (--no-score)"}
    scorable = [x for x in items if _is_scorable(x)]
    if not scorable:
        return {"not_available": "no exact-posterior prompt among the prompts (plain text has no known posterior)"}
    mod = _prompts_module()
    if mod is None:
        return {"not_available": "windtunnel.llm.prompts is not in this installation"}
    scorable, left_out = _single_token_choices(mod, tokenizer, scorable)
    if not scorable:
        return {"not_available": f"no prompt's choices are single tokens of this tokenizer ({left_out['why']})"}
    say(f"scoring {len(scorable)} exact-posterior prompts (model, then {len(nulls)} random-init draws)")
    drawn = [mod.score(null, tokenizer, scorable, batch_size=batch_size) for null in nulls]
    return {
        "n_prompts": len(scorable),
        **({"left_out": left_out} if left_out else {}),
        "model": mod.score(model, tokenizer, scorable, batch_size=batch_size),
        "null_model": drawn[0],
        "null_models": drawn,
    }


def _single_token_choices(mod: Any, tokenizer: Any, items: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The prompts as `tokenizer` reads every choice as one next token (`prompts.fitted`: a leading space read as a
    token of its own moved into the text), and what was left out: {"n", "families": {family: count}, "why": the
    first prompt's reason} ({} where none was)."""
    kept: list[Any] = []
    families: dict[str, int] = {}
    why = ""
    for item in items:
        try:
            kept.append(mod.fitted(tokenizer, item))
        except ValueError as err:
            families[item.family] = families.get(item.family, 0) + 1
            why = why or str(err).removeprefix("score: ")
    left = sum(families.values())
    return kept, ({"n": left, "families": families, "why": why} if left else {})
