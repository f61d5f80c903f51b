"""The causal LM saved in a folder, checked and loaded for `llm-geometry`: its config, its safetensors weights (a
pickle is never loaded) and its tokenizer, from local files only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from windtunnel.errors import MAX_SHOWN, CheckpointError, described, shorten
from windtunnel.store.rundir import read_json_object


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
