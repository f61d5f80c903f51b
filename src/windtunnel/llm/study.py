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

import dataclasses
import importlib
import importlib.metadata
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from windtunnel.errors import MAX_SHOWN, CheckpointError, described, shorten
from windtunnel.llm import geometry as geo
from windtunnel.rundir import (
    LOCK_FILE,
    OWNER_FILE,
    atomic_write,
    check_output_dir,
    check_writable,
    contents,
    read_json_object,
    write_json,
)
from windtunnel.text import number

Progress = Callable[[str], None]
KIND = "windtunnel.llm_geometry"  # marks llm_geometry.json as this command's (what overwrite may replace)
JSON_NAME, MD_NAME, FIGURES = "llm_geometry.json", "llm_geometry.md", "figures"
FIGURE_NAMES = ("value_pc1.png", "attention_entropy.png", "key_orthogonality.png")
N_DEFAULT, N_MIN, N_MAX = 128, 4, 100_000
N_NULLS = 3  # random-init draws by default: one draw says nothing of how far two random inits differ
NULL_SEED_BASE = 1_000_003  # default null seeds: NULL_SEED_BASE + seed * N_NULLS_MAX + i, far from the usual 0, 1, 42
N_NULLS_MAX = 16
DTYPES = ("float32", "bfloat16", "float16")
PROMPT_FIELDS = ("text", "choices", "posterior", "family", "position")
_TEMP = re.compile(r"\.(.+)\.\w+\.tmp")  # rundir.atomic_write's .NAME.XXXXXXXX.tmp


# --------------------------------------------------------------------------------------------- inputs


def check_model_dir(model_dir: str | Path) -> Path:
    """`model_dir` as a Path if it is a saved Hugging Face model (a folder with config.json), a packaged model's name
    (`smollm2`) as its fetched folder (`fetch.resolve_model`); else a one-line error naming --model."""
    from windtunnel.llm.fetch import resolve_model

    p = resolve_model(model_dir)
    if not p.exists():
        raise FileNotFoundError(f"--model: {str(p)!r} does not exist")
    if not p.is_dir():
        raise NotADirectoryError(f"--model: {str(p)!r} is a file, not a model directory")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(
            f"--model: {str(p)!r} has no config.json (not a model saved with save_pretrained); nothing is downloaded"
        )
    return p


PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # weights saved with pickle: never loaded
CONFIG_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings")


def _failed(err: BaseException) -> str:
    """`Type: message` of a library's error, on one line and bounded."""
    text = shorten(" ".join(str(err).split()), 4 * MAX_SHOWN)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def check_weights(model_dir: Path) -> list[Path]:
    """The safetensors files of the model saved in `model_dir` (a shard index's shards among them), each with a whole
    header that covers the file (a truncated file fails here); a ValueError naming the file otherwise. A folder whose
    weights are only pickled (`pytorch_model.bin`) is refused naming that file: a pickle is never loaded (loading one
    can run code), as no checkpoint of windtunnel's is."""
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = read_json_object(index).get("weight_map")
        except CheckpointError as err:  # not JSON, not an object: a file of the model's, so bad input here
            raise ValueError(f"--model: {err}") from None
        if not isinstance(weight_map, dict):
            raise ValueError(f"--model: {index}: weight_map must be a JSON object (got {described(weight_map)})")
        shards = sorted({str(v) for v in weight_map.values()})
        missing = [name for name in shards if not (model_dir / str(name)).is_file()]
        if missing:
            raise FileNotFoundError(f"--model: {index} names the shard {missing[0]!r}, which is not there")
    if not files:
        pickled = sorted(q.name for pattern in PICKLED for q in model_dir.glob(pattern))
        if pickled:
            raise ValueError(
                f"--model: {model_dir / pickled[0]} holds pickled weights and {str(model_dir)!r} no .safetensors file: "
                "windtunnel never loads a pickle (loading one can run code); save the model with save_pretrained, "
                "which writes model.safetensors"
            )
        raise FileNotFoundError(f"--model: {str(model_dir)!r} holds no weights (no model.safetensors)")
    for f in files:
        try:
            with safe_open(str(f), "pt") as handle:
                handle.keys()
        except Exception as err:  # noqa: BLE001 - SafetensorError and OSError alike: the file cannot be read
            raise ValueError(
                f"--model: {f}: not a readable safetensors file, truncated or damaged ({_failed(err)})"
            ) from None
    return files


def check_config(lib: Any, model_dir: Path) -> Any:
    """The model's config, read by transformers from `model_dir/config.json`, with its sizes whole numbers >= 1 and
    its hidden size a multiple of its heads; a ValueError naming the file and the key as the file spells it (GPT-2's
    `n_layer`) otherwise."""
    path = model_dir / "config.json"
    try:
        config = lib.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - OSError (not JSON), ValueError (an unknown model_type), ...
        raise ValueError(f"--model: {path}: transformers cannot read it ({_failed(err)})") from None
    names = dict(getattr(config, "attribute_map", None) or {})
    for key in CONFIG_SIZES:
        value = getattr(config, key, None)
        if value is None and key == "max_position_embeddings":  # a family without a position limit
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"--model: {path}: {names.get(key, key)} must be a whole number >= 1 (got {described(value)})"
            )
    hidden, heads = int(config.hidden_size), int(config.num_attention_heads)
    if hidden % heads:
        raise ValueError(
            f"--model: {path}: {names.get('hidden_size', 'hidden_size')} ({hidden}) must be a multiple of "
            f"{names.get('num_attention_heads', 'num_attention_heads')} ({heads})"
        )
    return config


def load(lib: Any, model_dir: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    """The causal LM and tokenizer saved in `model_dir`, from its files alone (`local_files_only`, safetensors only:
    `check_weights`, `check_config`). Weights that do not fit the config, a parameter the weights do not hold (it would
    be left at a random init) and a tokenizer with no vocabulary are each a ValueError naming the folder's file."""
    files = check_weights(model_dir)
    config = check_config(lib, model_dir)
    where = files[0] if len(files) == 1 else model_dir
    try:
        model, info = lib.AutoModelForCausalLM.from_pretrained(
            model_dir, config=config, local_files_only=True, dtype=dtype, use_safetensors=True,
            output_loading_info=True,
        )  # fmt: skip
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - weights that do not fit the config, a family transformers lacks, ...
        raise ValueError(f"--model: {where}: transformers cannot load the model ({_failed(err)})") from None
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise ValueError(
            f"--model: {where} holds no weight for {len(missing)} of the model's parameters (the first: "
            f"{shorten(str(missing[0]), MAX_SHOWN)!r}); they would be left at a random init"
        )
    try:
        tokenizer = lib.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - a damaged tokenizer.json, ...
        raise ValueError(
            f"--model: {str(model_dir)!r}: transformers cannot read its tokenizer ({_failed(err)})"
        ) from None
    if len(tokenizer) < 2:
        raise ValueError(
            f"--model: {str(model_dir)!r} holds no tokenizer (the one transformers made of it has no vocabulary); "
            "save the model's tokenizer there too (tokenizer.save_pretrained)"
        )
    return model, tokenizer


def check_n(n: int | None) -> None:
    if n is not None and not N_MIN <= int(n) <= N_MAX:
        raise ValueError(f"--n: the number of prompts must be in [{N_MIN}, {N_MAX}] (got {n})")


def read_prompts(path: str | Path) -> list[Any]:
    """The prompts of a file: a `.jsonl` or `.json` file has one JSON value a line (a string, or an object with a
    string "text"; an object with "choices" and "posterior" too is an exact-posterior prompt, scored); any other
    file has one prompt a line. Blank lines are skipped. Returns strings and dicts, in order."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--prompts: {str(p)!r} " + ("is not a file" if p.exists() else "does not exist"))
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"--prompts: {str(p)!r} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    jsonl = p.suffix.lower() in (".jsonl", ".json")
    out: list[Any] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            out.append(line)
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"--prompts: {p}:{i}: not JSON ({err.msg}); a .jsonl file has one JSON value a line"
            ) from None
        if isinstance(rec, str) or (isinstance(rec, dict) and isinstance(rec.get("text"), str)):
            out.append(rec)
        else:
            raise ValueError(f"--prompts: {p}:{i}: expected a string or an object with a string 'text'")
    if not out:
        raise ValueError(f"--prompts: {str(p)!r} holds no prompt")
    return out


def _prompts_module() -> Any | None:
    """windtunnel.llm.prompts, or None where this installation has none."""
    try:
        return importlib.import_module("windtunnel.llm.prompts")
    except ModuleNotFoundError as err:
        if err.name in ("windtunnel.llm.prompts",):
            return None
        raise


def _as_prompt(mod: Any, rec: dict[str, Any], where: str) -> Any:
    """An exact-posterior `Prompt` from a JSONL object that has choices and a posterior; a plain dict else."""
    if mod is None or "choices" not in rec or "posterior" not in rec:
        return rec
    cls = mod.Prompt
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(PROMPT_FIELDS)
    try:
        return cls(**{k: rec[k] for k in names if k in rec})
    except (TypeError, ValueError) as err:
        raise ValueError(f"--prompts: {where}: not an exact-posterior prompt ({err})") from None


def builtin_subset(mod: Any, n: int, seed: int) -> list[Any]:
    """`n` of the built-in prompts, taken round-robin over their (family, position) cells (the first prompt of each
    cell, then the second of each, ...), so that every cell is read once before any is read twice."""
    cells = len({(x.family, x.position) for x in mod.builtin_prompts(1, seed)})
    by_cell: dict[tuple[str, int], list[Any]] = {}
    for x in mod.builtin_prompts(-(-int(n) // cells), seed):  # ceil(n / cells) per cell
        by_cell.setdefault((x.family, x.position), []).append(x)
    rounds = max(len(v) for v in by_cell.values())
    picked = [v[i] for i in range(rounds) for v in by_cell.values() if i < len(v)]
    return picked[: int(n)]


def resolve_prompts(prompts: str | Path | None, n: int | None, seed: int) -> tuple[list[Any], dict[str, Any]]:
    """The prompts to read (strings, dicts or `Prompt`s) and where they come from: the built-in exact-posterior
    prompts (`builtin_prompts(n, seed)`), or a file's (`read_prompts`; its first n where n is given)."""
    mod = _prompts_module()
    if prompts is None:
        if mod is None:
            raise ValueError(
                "--prompts: the built-in prompts (windtunnel.llm.prompts) are not in this installation; give --prompts"
                " FILE (one prompt a line, or .jsonl)"
            )
        count = N_DEFAULT if n is None else int(n)
        return builtin_subset(mod, count, seed), {"source": "builtin", "n": count, "seed": int(seed)}
    path = Path(prompts)
    recs = read_prompts(path)
    if n is not None:
        recs = recs[: int(n)]
    if len(recs) < N_MIN:
        raise ValueError(f"--prompts: {str(path)!r} holds {len(recs)} prompt(s); need at least {N_MIN}")
    items = [_as_prompt(mod, r, f"{path} prompt {i + 1}") if isinstance(r, dict) else r for i, r in enumerate(recs)]
    return items, {"source": str(path.resolve()), "n": len(items), "n_in_file": len(read_prompts(path))}


def _text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        return str(item["text"])
    return str(item.text)


def _is_scorable(item: Any) -> bool:
    return not isinstance(item, (str, dict))


# --------------------------------------------------------------------------------------------- out folder


def _ours(rel: str, name: str) -> bool:
    """Whether a regular file `name` in folder `rel` of the out folder is one this command writes (or a temp file of
    one of its writes)."""
    if rel == "":
        temp = _TEMP.fullmatch(name)
        return (temp.group(1) if temp else name) in (JSON_NAME, MD_NAME)
    return rel == FIGURES and (name in FIGURE_NAMES or name.replace(".tmp.png", ".png") in FIGURE_NAMES)


def _entries(out: Path) -> list[tuple[Path, bool]]:
    """Every entry of `out` (its lock left out), a folder after what it holds, with whether this command wrote it.
    A symbolic link never is."""
    found: list[tuple[Path, bool]] = []
    for p in sorted(out.iterdir()):
        if p.name in (LOCK_FILE, OWNER_FILE):
            continue
        if p.is_symlink():
            found.append((p, False))
        elif p.is_dir() and p.name == FIGURES:
            found.extend(
                (q, not q.is_symlink() and q.is_file() and _ours(FIGURES, q.name)) for q in sorted(p.iterdir())
            )
            found.append((p, True))
        else:
            found.append((p, p.is_file() and _ours("", p.name)))
    return found


def refuse_existing(out: Path, overwrite: bool) -> None:
    """Before any work: an existing non-empty `out` needs `overwrite`, and overwrite only ever replaces this
    command's own files (each entry named by the layout; llm_geometry.json, if there, this command's)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"--out: {str(out)!r} is a file, not a directory")
    if not contents(out):
        return
    if not overwrite:
        raise FileExistsError(
            f"--out: {str(out)!r} already exists and is not empty; pass overwrite=True (--overwrite) to replace the "
            "files llm-geometry wrote there"
        )
    stray = next((p for p, ours in _entries(out) if not ours), None)
    if stray is not None:
        raise ValueError(
            f"--overwrite: {str(out)!r} holds {str(stray.relative_to(out))!r}, which llm-geometry did not write; "
            "refusing to delete anything"
        )
    if (out / JSON_NAME).exists():
        try:
            kind = read_json_object(out / JSON_NAME).get("kind")
        except Exception as err:  # noqa: BLE001 - unreadable: not provably ours
            kind = f"unreadable ({err})"
        if kind != KIND:
            raise ValueError(
                f"--overwrite: {str(out / JSON_NAME)!r} is not one llm-geometry wrote (kind {kind!r}); refusing to "
                "delete anything"
            )


def clear(out: Path) -> None:
    """Delete this command's files in `out`, after `refuse_existing(out, overwrite=True)`."""
    refuse_existing(out, overwrite=True)
    if not out.is_dir():
        return
    for p, _ in _entries(out):
        if p.is_dir():
            p.rmdir()
        else:
            p.unlink()


# --------------------------------------------------------------------------------------------- the study


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


# --------------------------------------------------------------------------------------------- writing


def write(out: Path, result: dict[str, Any], overwrite: bool, say: Progress) -> None:
    """Figures, tables, then llm_geometry.json (last: its presence means the folder is complete), under the folder's
    lock; an earlier llm-geometry's files are deleted first where `overwrite` (`clear`)."""
    from windtunnel.lock import DirLock

    say(f"writing {out}")
    check_writable(out, "--out")
    refuse_existing(out, overwrite)  # again: the folder may have changed while the model ran
    with DirLock(out, "output directory"):
        if overwrite:
            clear(out)
        write_figures(out / FIGURES, result)
        atomic_write(out / MD_NAME, markdown(result))
        write_json(out / JSON_NAME, result, sort_keys=False)


def _f(x: Any, spec: str = ".4g") -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    return number(float(x), spec)


def _ci(est: Any, ci: Sequence[float] | None) -> str:
    return f"{_f(est)} [{_f(ci[0])}, {_f(ci[1])}]" if ci else _f(est)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def markdown(result: dict[str, Any]) -> str:
    """llm_geometry.md: the model, the prompts, and one table per statistic, each beside its nulls."""
    c, g = result["config"], result["geometry"]
    src = result["prompts"]
    where = f"built-in, seed {src['seed']}" if src["source"] == "builtin" else src["source"]
    tokens = g["prompt_tokens"]
    lines = [
        f"# llm-geometry: {result['model_dir']}",
        "",
        f"{c['family']} ({c['model_type']}): {c['n_layers']} layers, {c['n_heads']} heads ({c['n_kv_heads']} "
        f"key/value), d_model {c['d_model']}, d_head {c['d_head']}, {c['n_params']:,} parameters, {c['dtype']}. "
        f"{result['n']} prompts ({where}; {tokens['min']}–{tokens['max']} tokens). Null: {result['null_model']}. "
        "Intervals: bootstrap 95% over prompts; Δ = model − random-init, paired (same draws).",
        "",
        "## Value PCA at the last token",
        "",
        result["definitions"]["value_pca"] + f" ({g['value_pca']['d']} features).",
        "",
    ]
    rows = []
    k = g.get("null_draws", 1)
    for l, e in enumerate(g["value_pca"]["layers"]):
        m, z, d = e["model"], e["null_model"], e["diff"]
        rows.append([
            str(l), _ci(m["pc1"], m["pc1_ci"]), _ci(z["pc1"], z["pc1_ci"]), _drawn(e), _ci(d["pc1"], d["pc1_ci"]),
            _f(m["pc12"]), _f(z["pc12"]), _f(m["participation_ratio"]), _f(z["participation_ratio"]),
        ])  # fmt: skip
    lines += _table(
        ["layer", "PC1 model", "PC1 random-init", f"PC1, {k} random-init draws", "Δ PC1", "PC1+2 model",
         "PC1+2 random", "PR model", "PR random"],
        rows,
    )  # fmt: skip
    a = g["attention_entropy"]
    drop = a["drop_first_to_last_pct"]
    lines += [
        "",
        "## Attention entropy at the last query (bits)",
        "",
        a["definition"] + f". Uniform attention: {_f(a['uniform_bits'])} bits. First → last layer: "
        f"{_f(drop['model'], '.3g')}% lower (model), {_f(drop['null_model'], '.3g')}% (random-init).",
        "",
    ]
    rows = [
        [str(l), _ci(e["model"]["mean"], e["model"]["mean_ci"]),
         _ci(e["null_model"]["mean"], e["null_model"]["mean_ci"]), _drawn(e),
         _ci(e["diff"]["mean"], e["diff"]["mean_ci"]), " ".join(_f(h, ".3g") for h in e["model"].get("per_head", []))]
        for l, e in enumerate(a["layers"])
    ]  # fmt: skip
    lines += _table(
        ["layer", "model (mean over heads)", "random-init", f"{k} random-init draws", "Δ", "model per head"], rows
    )
    lines += ["", "## Key orthogonality (mean |cos|)", ""]
    for name in geo.KEY_DEFINITIONS:
        stat = g["key_orthogonality"][name]
        lines += [f"### `{name}`", "", stat["definition"] + "."]
        if "not_applicable" in stat:
            lines += ["", f"Not applicable: {stat['not_applicable']}.", ""]
            continue
        lines += ["", f"E|cos| of random isotropic vectors in d = {stat['d']}: {_f(stat['null_analytic'])}.", ""]
        rows = [
            [str(l), _ci(e["model"]["mean"], e["model"].get("mean_ci")),
             _ci(e["null_model"]["mean"], e["null_model"].get("mean_ci")), _drawn(e), _f(stat["null_analytic"]),
             _ci(e["diff"]["mean"], e["diff"].get("mean_ci")), _f(e["diff_vs_analytic"]),
             _f(e.get("ratio_to_analytic"), ".3g")]
            for l, e in enumerate(stat["layers"])
        ]  # fmt: skip
        lines += _table(
            ["layer", "model", "random-init", f"{k} random-init draws", "random vectors", "Δ random-init",
             "Δ random vectors", "model / random vectors"],
            rows,
        )  # fmt: skip
        lines.append("")
    seeds = result.get("null_seeds") or [result["null_seed"]]
    lines += ["## Exact-posterior prompts", "", *_score_lines(result["scores"], seeds), ""]
    lines += [
        "## Reading it",
        "",
        "Each number is a description of this model on these prompts, beside the same number of a model that learned "
        "nothing. A difference from the random-init model says training changed that statistic; it does not by itself "
        "say the model computes a posterior (docs/llm.md). The paired intervals are over prompts against one draw; "
        "the draws' range is how far random inits differ, and a model above or below every one of k draws has a "
        "rank p-value of 1/(k + 1) at best (0.25 with 3 draws): more draws (--nulls) before reading it as training's "
        "doing.",
        "",
    ]
    return "\n".join(lines)


def _drawn(entry: dict[str, Any]) -> str:
    """The null draws' range of an entry and where the model stands against it ("—" with one draw)."""
    if "null_range" not in entry:
        return "—"
    lo, hi = entry["null_range"]
    where = {"above every draw": "model above", "below every draw": "model below"}.get(entry["model_vs_nulls"], "")
    return f"{_f(lo)}–{_f(hi)}" + (f" ({where}, p {_f(entry['null_rank_p'], '.2g')})" if where else "")


def _score_lines(scores: dict[str, Any], seeds: Sequence[int]) -> list[str]:
    if "skipped" in scores or "not_available" in scores:
        return [f"Not scored: {scores.get('skipped') or scores.get('not_available')}."]
    mod = _prompts_module()
    drawn = scores.get("null_models") or [scores["null_model"]]
    left = scores.get("left_out")
    if left:
        counts = ", ".join(f"{f} {n}" for f, n in left["families"].items())
        head = f"Left out, {left['n']} prompts whose choices are not single tokens of this tokenizer ({counts}): "
        return [head + left["why"] + ".", "", *_score_tables(mod, scores, drawn, seeds)]
    return _score_tables(mod, scores, drawn, seeds)


def _score_tables(mod: Any, scores: dict[str, Any], drawn: Sequence[Any], seeds: Sequence[int]) -> list[str]:
    shown = [("Model", scores["model"])] + [
        (f"Random-init model, seed {s}", one) for s, one in zip(seeds, drawn, strict=False)
    ]
    lines = []
    for title, table in shown:
        text = mod.score_markdown(table) if mod is not None else "```\n" + json.dumps(table) + "\n```"
        lines += [f"### {title}", "", text.rstrip(), ""]
    return lines


def write_figures(folder: Path, result: dict[str, Any]) -> None:
    """The three figures (module docstring), each layer on the x axis, model against random-init model."""
    from matplotlib.ticker import MaxNLocator

    from windtunnel.plotting import save, subplots

    g = result["geometry"]
    L = g["shape"]["n_layers"]
    layers = np.arange(L)

    def band(ax: Any, entries: list[dict[str, Any]], key: str, ci_key: str | None, label: str, **kw: Any) -> None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        y = np.array([e[key] if e[key] is not None else np.nan for e in entries], dtype=float)
        ax.plot(layers, y, marker="o", label=label, **kw)
        if ci_key and all(ci_key in e for e in entries):
            ci = np.array([e[ci_key] for e in entries], dtype=float)
            ax.fill_between(layers, ci[:, 0], ci[:, 1], alpha=0.2, color=ax.lines[-1].get_color())

    v = g["value_pca"]["layers"]
    fig, axes = subplots(1, 2, figsize=(10, 3.6), squeeze=False, gridspec_kw={"wspace": 0.3})
    ax = axes[0, 0]
    band(ax, [e["model"] for e in v], "pc1", "pc1_ci", "model PC1")
    band(ax, [e["null_model"] for e in v], "pc1", "pc1_ci", "random-init PC1", linestyle="--")
    ax.set(xlabel="layer", ylabel="explained variance ratio", title="value PCA at the last token: PC1", ylim=(0, None))
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    band(ax, [e["model"] for e in v], "participation_ratio", "participation_ratio_ci", "model")
    band(ax, [e["null_model"] for e in v], "participation_ratio", "participation_ratio_ci", "random-init", ls="--")
    ax.set(xlabel="layer", ylabel="participation ratio", title="value PCA: participation ratio")
    ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[0], bbox_inches="tight")

    a = g["attention_entropy"]
    fig, axes = subplots(1, 1, figsize=(5.5, 3.6), squeeze=False)
    ax = axes[0, 0]
    band(ax, [e["model"] for e in a["layers"]], "mean", "mean_ci", "model")
    band(ax, [e["null_model"] for e in a["layers"]], "mean", "mean_ci", "random-init", linestyle="--")
    ax.axhline(a["uniform_bits"], color="grey", linewidth=0.8, linestyle=":", label="uniform attention")
    ax.set(xlabel="layer", ylabel="bits", title="attention entropy at the last query (mean over heads)", ylim=(0, None))
    ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[1], bbox_inches="tight")

    k = g["key_orthogonality"]
    n_keys = len(geo.KEY_DEFINITIONS)
    fig, axes = subplots(1, n_keys, figsize=(4.6 * n_keys, 3.6), squeeze=False, gridspec_kw={"wspace": 0.35})
    for ax, name in zip(axes[0], geo.KEY_DEFINITIONS, strict=True):
        stat = k[name]
        ax.set(xlabel="layer", ylabel="mean |cos|", title=name)
        if "not_applicable" in stat:
            ax.text(0.5, 0.5, "not applicable:\none key/value head", ha="center", va="center", transform=ax.transAxes)
            continue
        band(ax, [e["model"] for e in stat["layers"]], "mean", "mean_ci", "model")
        band(ax, [e["null_model"] for e in stat["layers"]], "mean", "mean_ci", "random-init", linestyle="--")
        ax.axhline(stat["null_analytic"], color="grey", linewidth=0.8, linestyle=":", label=f"random, d={stat['d']}")
        ax.set_ylim(0, None)
        ax.legend(fontsize=8)
    save(fig, folder / FIGURE_NAMES[2], bbox_inches="tight")
