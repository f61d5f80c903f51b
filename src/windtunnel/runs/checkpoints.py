"""Checkpoints of a run directory, loaded without unpickling (safetensors + JSON only).

run_dir/checkpoints/step_00001000.safetensors          model weights (of a run with `train.ema_decay`: the average's)
run_dir/checkpoints/step_00001000.state.safetensors    optimiser tensors + RNG states (+ the auxiliary head's
                                                       weights, `aux_head.*`, of a run with `train.aux_target`;
                                                       + the trained weights, `trained.*`, of one with ema_decay)
run_dir/checkpoints/step_00001000.state.json           step, optimiser param groups, sha256 of both files
run_dir/checkpoints/latest.json           {"step": 1000} -- written last, so it only names complete checkpoints

Nothing is loaded unverified: a checkpoint whose state json lacks a checksum is refused like one that fails it.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from windtunnel.errors import CheckpointError, described
from windtunnel.store.rundir import (
    CKPT_DIR,
    CKPT_SUFFIXES,
    LATEST,
    atomic_write,
    folder,
    read_json_object,
    read_regular,
    write_json,
)

if TYPE_CHECKING:
    from windtunnel.training.optim import MultiOptimizer


_WEIGHTS, _STATE, _META = CKPT_SUFFIXES  # step_N.safetensors, step_N.state.safetensors, step_N.state.json
_AUX = "aux_head."  # the state file's prefix of the auxiliary head's tensors
_TRAINED = "trained."  # the state file's prefix of the trained weights of a run whose weights file is an average


def _folder(run_dir: str | Path) -> Path:
    """run_dir/checkpoints, never through a symbolic link (`rundir.folder`)."""
    return folder(run_dir, CKPT_DIR)


def _ckpt_name(step: int) -> str:
    return f"step_{step:08d}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_safetensors(path: Path, expected_sha: str) -> dict[str, torch.Tensor]:
    """The tensors of `path`, whose bytes must have the sha256 `expected_sha` (CheckpointError naming it else)."""
    if not path.exists():
        raise CheckpointError(f"{path} is missing")
    try:
        raw = read_regular(path)
    except OSError as err:
        raise CheckpointError(f"{path} cannot be read: {err.strerror or err}") from None
    if _sha256(raw) != expected_sha:
        raise CheckpointError(f"{path} is corrupted or truncated: checksum mismatch")
    try:
        return st_load(raw)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path} is corrupted or truncated: {err}") from None


def _checksums(meta: dict[str, Any], meta_path: Path) -> dict[str, str]:
    """A checkpoint's {"weights": sha256, "state": sha256} from its state json `meta_path`; one without both is a
    CheckpointError naming the file and the key (every checkpoint windtunnel has written holds them)."""
    sha = meta.get("sha256")
    sums = sha if isinstance(sha, dict) else {}
    missing = next((k for k in ("weights", "state") if not isinstance(sums.get(k), str)), None)
    if missing is not None:
        raise CheckpointError(
            f"{meta_path} is corrupted: no checksum sha256.{missing}, so the checkpoint cannot be verified"
        )
    return {"weights": sums["weights"], "state": sums["state"]}


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | MultiOptimizer | None = None,
    extra: dict | None = None,
    aux: nn.Module | None = None,
    averaged: nn.Module | None = None,
) -> None:
    """Write weights, optimiser state and RNG states for `step`, then point latest.json at it. The auxiliary head
    `aux` (`train.aux_target`), a training device and not part of the model, goes with the training state, so the
    weights file holds the plain model whether or not the run had one. With `averaged` (the weight average of
    `train.ema_decay`) the weights file holds the average, what evaluation and probes load, and the trained `model`'s
    weights go with the training state."""
    d = _folder(run_dir)
    name = _ckpt_name(step)
    # clone: breaks storage sharing between tied weights, which safetensors refuses to save
    shown = model if averaged is None else averaged
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in shown.state_dict().items()}
    w_raw = st_save(weights, metadata={"step": str(step)})
    tensors: dict[str, torch.Tensor] = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    groups = None
    if optimizer is not None:
        sd = optimizer.state_dict()
        for pid, st in sd["state"].items():
            for k, v in st.items():
                t = v if torch.is_tensor(v) else torch.tensor(v)
                tensors[f"optim.{pid}.{k}"] = t.detach().cpu().contiguous().clone()
        groups = sd["param_groups"]
    for k, v in aux.state_dict().items() if aux is not None else ():
        tensors[f"{_AUX}{k}"] = v.detach().cpu().contiguous().clone()
    for k, v in model.state_dict().items() if averaged is not None else ():
        tensors[f"{_TRAINED}{k}"] = v.detach().cpu().contiguous().clone()
    s_raw = st_save(tensors)
    atomic_write(d / f"{name}{_WEIGHTS}", w_raw)
    atomic_write(d / f"{name}{_STATE}", s_raw)
    meta = {
        "step": step,
        "param_groups": groups,
        "extra": extra or {},
        "sha256": {"weights": _sha256(w_raw), "state": _sha256(s_raw)},
    }
    write_json(d / f"{name}{_META}", meta)
    write_json(d / LATEST, {"step": step})


def list_checkpoints(run_dir: str | Path) -> list[int]:
    """Steps that have a complete checkpoint (weights + state json), ascending."""
    d = _folder(run_dir)
    if not d.is_dir():
        return []
    steps = []
    for p in d.glob(f"step_*{_META}"):
        with contextlib.suppress(ValueError):
            s = int(p.name[len("step_") :].split(".")[0])
            if (d / f"{_ckpt_name(s)}{_WEIGHTS}").exists():
                steps.append(s)
    return sorted(steps)


def _named_step(run_dir: str | Path) -> int | None:
    """The step checkpoints/latest.json names; None where there is no latest.json, a CheckpointError naming it where
    it is damaged: no non-negative integer step, or a step of which no file exists (latest.json is written last, so
    it never names a checkpoint that was not written; one whose files are there but damaged is the loader's to name)."""
    p = _folder(run_dir) / LATEST
    if not p.exists():
        return None
    step = read_json_object(p).get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{p} is corrupted: step must be a non-negative integer (got {described(step)})")
    if not any((p.parent / f"{_ckpt_name(step)}{suffix}").exists() for suffix in CKPT_SUFFIXES):
        raise CheckpointError(f"{p} is corrupted: it names step {step:,}, of which there is no checkpoint")
    return step


_WARNED: set[str] = set()  # the damage this process has warned about


def _newest_good(run_dir: str | Path, candidates: list[int], problems: list[str], doing: str) -> int | None:
    """The newest of `candidates` that verifies, with a warning (`doing` step N, ...) naming `problems` -- what was
    already found wrong -- and each newer candidate skipped, once per process (a resume and its final evaluation
    find the same damage); None where there is none and nothing was wrong, a CheckpointError naming every problem
    where nothing verifies."""
    for step in sorted(candidates, reverse=True):
        try:
            verify_checkpoint(run_dir, step)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        damage = "; ".join(problems)
        if problems and damage not in _WARNED:
            _WARNED.add(damage)
            warnings.warn(f"{doing} step {step}, the newest good checkpoint: {damage}", RuntimeWarning, stacklevel=3)
        return step
    if problems:
        raise CheckpointError("no good checkpoint: " + "; ".join(problems))
    return None


def latest_step(run_dir: str | Path) -> int | None:
    """The run's latest checkpoint (what evaluation loads): the one latest.json names; where latest.json is missing
    or damaged, the newest checkpoint that verifies (a warning names the damage); None if the run has none. A damaged
    checkpoint that latest.json names is not skipped (its loader names it): other weights would be other numbers."""
    try:
        named = _named_step(run_dir)
    except CheckpointError as err:
        return _newest_good(run_dir, list_checkpoints(run_dir), [str(err)], "using")
    return named if named is not None else _newest_good(run_dir, list_checkpoints(run_dir), [], "using")


def verify_checkpoint(run_dir: str | Path, step: int) -> None:
    """Check that checkpoint `step` is complete and matches its checksums (without building a model)."""
    d = _folder(run_dir)
    meta_path = d / f"{_ckpt_name(step)}{_META}"
    sha = _checksums(read_json_object(meta_path), meta_path)
    _read_safetensors(d / f"{_ckpt_name(step)}{_WEIGHTS}", sha["weights"])
    _read_safetensors(d / f"{_ckpt_name(step)}{_STATE}", sha["state"])


def resume_step(run_dir: str | Path) -> int | None:
    """The checkpoint a resumed run continues from: latest.json's, or, when that one (or latest.json itself) is
    corrupt, the newest checkpoint that verifies, with a warning naming what was skipped; None if there is none."""
    problems = []
    try:
        latest = _named_step(run_dir)
    except CheckpointError as err:
        latest, problems = None, [str(err)]
    candidates = [s for s in list_checkpoints(run_dir) if latest is None or s <= latest]
    if latest is not None and latest not in candidates:
        candidates.append(latest)
    return _newest_good(run_dir, candidates, problems, "resuming from")


def delete_checkpoint(run_dir: str | Path, step: int) -> None:
    d = _folder(run_dir)
    for suffix in CKPT_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            (d / f"{_ckpt_name(step)}{suffix}").unlink()


def load_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | MultiOptimizer | None = None,
    restore_rng: bool = False,
    aux: nn.Module | None = None,
    averaged: nn.Module | None = None,
) -> dict:
    """Load weights (and optionally optimiser state, RNG and the auxiliary head `aux`) of `step` in place; returns the
    state json. With `averaged` (`train.ema_decay`) the weights file goes into it and `model` gets the trained
    weights the state file holds."""
    d = _folder(run_dir)
    name = _ckpt_name(step)
    meta_path = d / f"{name}{_META}"
    if not meta_path.exists():
        raise CheckpointError(f"{meta_path} is missing (available steps: {list_checkpoints(run_dir)})")
    meta = read_json_object(meta_path)
    sha = _checksums(meta, meta_path)
    weights = _read_safetensors(d / f"{name}{_WEIGHTS}", sha["weights"])
    try:
        (model if averaged is None else averaged).load_state_dict(weights, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{d / (name + _WEIGHTS)} does not match the model: {err}") from None
    if optimizer is None and not restore_rng and aux is None and averaged is None:
        return meta
    state = _read_safetensors(d / f"{name}{_STATE}", sha["state"])
    if averaged is not None:
        what = "the trained weights of a run with a weight average (train.ema_decay)"
        _load_prefixed(model, state, _TRAINED, d / (name + _STATE), what)
    if aux is not None:
        _load_prefixed(aux, state, _AUX, d / (name + _STATE), "the auxiliary head the run trains (train.aux_target)")
    if optimizer is not None and meta.get("param_groups") is not None:
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        try:
            for key, t in state.items():
                if key.startswith("optim."):
                    _, pid, k = key.split(".", 2)
                    per_param.setdefault(int(pid), {})[k] = t
            optimizer.load_state_dict({"state": per_param, "param_groups": meta["param_groups"]})
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise CheckpointError(f"{meta_path}: the optimiser state does not match the run: {err}") from None
    if restore_rng:
        if "rng.cpu" not in state:
            raise CheckpointError(f"{d / (name + _STATE)} has no RNG state")
        torch.set_rng_state(state["rng.cpu"])
        cuda = [state[k] for k in sorted(k for k in state if k.startswith("rng.cuda."))]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    return meta


def _load_prefixed(module: nn.Module, state: dict[str, torch.Tensor], prefix: str, path: Path, what: str) -> None:
    """Load `module` from the tensors of a training-state file whose names start with `prefix`; CheckpointError
    naming the file and `what` it should hold where they do not fit."""
    held = {k[len(prefix) :]: t for k, t in state.items() if k.startswith(prefix)}
    try:
        module.load_state_dict(held, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path} does not hold {what}: {err}") from None
