"""Run directories, the unit of record: atomic files, safetensors checkpoints, and `load_run`.

    run_dir/config.json                       fully resolved RunConfig
    run_dir/metrics.jsonl                     one JSON object per logged step / evaluation (append-only)
    run_dir/checkpoints/step_00001000.safetensors          model weights
    run_dir/checkpoints/step_00001000.state.safetensors    optimiser tensors + RNG states
    run_dir/checkpoints/step_00001000.state.json           step, optimiser param groups, sha256 of both files
    run_dir/checkpoints/latest.json           {"step": 1000} -- written last, so it only names complete checkpoints
    run_dir/eval.json                         final evaluation, one entry per evaluation setting
    run_dir/figures/

Checkpoints are loaded without unpickling (safetensors + JSON only); files are written atomically and readable by
everyone the umask allows (0644 by default); a file that is missing, truncated or garbled raises `CheckpointError`
naming it. A writer holds the directory's lock (`windtunnel.lock`). Opening a run never imports code: an import-string
architecture in its config is built only with `trust_code=True`. This module also holds the two never-trained
predictors, `oracle` and `uniform`, so that every consumer builds a run's predictor the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from windtunnel import models, tasks
from windtunnel.config import RunConfig, config_to_json, validate
from windtunnel.errors import CheckpointError
from windtunnel.models.base import predictive
from windtunnel.seeds import (  # noqa: F401 -- re-exported: runs.test_seed etc. predate windtunnel.seeds
    STREAMS,
    TEST_RANGE,
    TRAIN_RANGE,
    VALIDATION_RANGE,
    stream_seed,
    test_seed,
    train_seed,
    val_seed,
)
from windtunnel.tasks.base import Batch, TaskSpec

CONFIG, METRICS, EVAL, CKPT_DIR, FIGURES = "config.json", "metrics.jsonl", "eval.json", "checkpoints", "figures"
TEMP_SUFFIX = ".tmp"


def _read_umask() -> int:
    """The process umask (set and restored once, at import, before any thread writes files)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # what open() would give a new file: results are shared like any other file


# --- atomic files ----------------------------------------------------------------------------------------


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write via a temp file in the same directory + fsync + os.replace: readers see old or new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp creates 0600
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # persist the rename itself
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def check_writable(path: Path, what: str = "--out") -> None:
    """Fail before any work if `path` (a directory to create or fill) cannot be written: it is a file, lies below a
    file, or its nearest existing folder is read-only."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ValueError(f"{what}: {str(probe)!r} is a file, not a directory")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: {str(probe)!r} is not writable")


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what creating `path` would create), or None."""
    missing = None
    while not path.exists() and path.parent != path:
        missing, path = path, path.parent
    return missing


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def clean_temp_files(run_dir: str | Path) -> list[Path]:
    """Delete the temp files of writes a killed process never finished (`.NAME.XXXX.tmp`); returns them.
    Call only while holding the run's lock: a live writer's temp file is not stray."""
    removed = []
    for d in (Path(run_dir), Path(run_dir) / CKPT_DIR):
        for p in d.glob(f".*{TEMP_SUFFIX}") if d.is_dir() else ():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p)
    return removed


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a truncated, garbled or binary file raises CheckpointError naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is corrupted or truncated: {err}") from None
    except OSError as err:
        raise CheckpointError(f"{path} cannot be read: {err.strerror or err}") from None


def read_json_object(path: str | Path) -> dict[str, Any]:
    """`read_json` for files that must hold a JSON object (config, eval, checkpoint metadata)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is corrupted: expected a JSON object, got {type(data).__name__}")
    return data


def _metrics_record(path: Path, lineno: int, line: str) -> dict:
    """One metrics.jsonl line: a JSON object with a non-negative integer `step` and finite-or-null numbers."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: line {lineno} is not valid JSON ({err.msg})") from None
    if not isinstance(rec, dict):
        raise CheckpointError(f"{path}: line {lineno} is not a JSON object")
    step = rec.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{path}: line {lineno}: step must be a non-negative integer (got {step!r})")
    return rec


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of metrics.jsonl, in order. A last line without its newline (a write cut short by a crash) is
    ignored; any other bad line raises CheckpointError naming its line number, so nothing is silently lost."""
    p = Path(run_dir) / METRICS
    if not p.exists():
        return []
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{p} is corrupted: not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = text.split("\n")
    complete, partial = lines[:-1], lines[-1]  # text ends with "\n" after a clean write: partial == ""
    out = [_metrics_record(p, i + 1, line) for i, line in enumerate(complete) if line.strip()]
    if partial.strip():
        with contextlib.suppress(CheckpointError):
            out.append(_metrics_record(p, len(lines), partial))
    return out


def truncate_metrics(run_dir: str | Path, step: int) -> None:
    """Keep only metrics lines with step <= `step` (resume: drop what the lost steps had logged)."""
    keep = [r for r in read_metrics(run_dir) if r["step"] <= step]
    atomic_write(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


class MetricsLog:
    """Append-only metrics.jsonl writer: one JSON object per line, flushed at once (survives SIGKILL)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / METRICS
        self._f = open(self.path, "a")  # noqa: SIM115 - held open for the run

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def sync(self) -> None:
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


# --- checkpoints -----------------------------------------------------------------------------------------


def _ckpt_name(step: int) -> str:
    return f"step_{step:08d}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_safetensors(path: Path, expected_sha: str | None = None) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise CheckpointError(f"{path} is missing")
    raw = path.read_bytes()
    if expected_sha is not None and _sha256(raw) != expected_sha:
        raise CheckpointError(f"{path} is corrupted or truncated: checksum mismatch")
    try:
        return st_load(raw)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path} is corrupted or truncated: {err}") from None


def save_checkpoint(
    run_dir: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
    extra: dict | None = None,
) -> None:
    """Write weights, optimiser state and RNG states for `step`, then point latest.json at it."""
    d = Path(run_dir) / CKPT_DIR
    name = _ckpt_name(step)
    # clone: breaks storage sharing between tied weights, which safetensors refuses to save
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
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
    s_raw = st_save(tensors)
    atomic_write(d / f"{name}.safetensors", w_raw)
    atomic_write(d / f"{name}.state.safetensors", s_raw)
    meta = {"step": step, "param_groups": groups, "extra": extra or {},
            "sha256": {"weights": _sha256(w_raw), "state": _sha256(s_raw)}}
    write_json(d / f"{name}.state.json", meta)
    write_json(d / "latest.json", {"step": step})


def list_checkpoints(run_dir: str | Path) -> list[int]:
    """Steps that have a complete checkpoint (weights + state json), ascending."""
    d = Path(run_dir) / CKPT_DIR
    if not d.is_dir():
        return []
    steps = []
    for p in d.glob("step_*.state.json"):
        with contextlib.suppress(ValueError):
            s = int(p.name[len("step_"):].split(".")[0])
            if (d / f"{_ckpt_name(s)}.safetensors").exists():
                steps.append(s)
    return sorted(steps)


def latest_step(run_dir: str | Path) -> int | None:
    """Step named by checkpoints/latest.json, or None if the run has no checkpoint yet."""
    p = Path(run_dir) / CKPT_DIR / "latest.json"
    if not p.exists():
        return None
    step = read_json_object(p).get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{p} is corrupted: step must be a non-negative integer (got {step!r})")
    return step


def verify_checkpoint(run_dir: str | Path, step: int) -> None:
    """Check that checkpoint `step` is complete and matches its checksums (without building a model)."""
    d = Path(run_dir) / CKPT_DIR
    meta = read_json_object(d / f"{_ckpt_name(step)}.state.json")
    sha = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    _read_safetensors(d / f"{_ckpt_name(step)}.safetensors", sha.get("weights"))
    _read_safetensors(d / f"{_ckpt_name(step)}.state.safetensors", sha.get("state"))


def resume_step(run_dir: str | Path) -> int | None:
    """The checkpoint a resumed run continues from: latest.json's, or, when that one (or latest.json itself) is
    corrupt, the newest checkpoint that verifies, with a warning naming what was skipped; None if there is none."""
    problems = []
    try:
        latest = latest_step(run_dir)
    except CheckpointError as err:
        latest, problems = None, [str(err)]
    candidates = [s for s in list_checkpoints(run_dir) if latest is None or s <= latest]
    if latest is not None and latest not in candidates:
        candidates.append(latest)
    for step in sorted(candidates, reverse=True):
        try:
            verify_checkpoint(run_dir, step)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        if problems:
            warnings.warn(f"resuming from step {step}, the newest good checkpoint: " + "; ".join(problems),
                          RuntimeWarning, stacklevel=2)
        return step
    if problems:
        raise CheckpointError("no good checkpoint to resume from: " + "; ".join(problems))
    return None


def delete_checkpoint(run_dir: str | Path, step: int) -> None:
    d = Path(run_dir) / CKPT_DIR
    for suffix in (".state.json", ".safetensors", ".state.safetensors"):
        with contextlib.suppress(FileNotFoundError):
            (d / f"{_ckpt_name(step)}{suffix}").unlink()


def load_checkpoint(
    run_dir: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = False,
) -> dict:
    """Load weights (and optionally optimiser state and RNG) of `step` in place; returns the state json."""
    d = Path(run_dir) / CKPT_DIR
    name = _ckpt_name(step)
    meta_path = d / f"{name}.state.json"
    if not meta_path.exists():
        raise CheckpointError(f"{meta_path} is missing (available steps: {list_checkpoints(run_dir)})")
    meta = read_json_object(meta_path)
    sha = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    weights = _read_safetensors(d / f"{name}.safetensors", sha.get("weights"))
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{d / (name + '.safetensors')} does not match the model: {err}") from None
    if optimizer is None and not restore_rng:
        return meta
    state = _read_safetensors(d / f"{name}.state.safetensors", sha.get("state"))
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
            raise CheckpointError(f"{d / (name + '.state.safetensors')} has no RNG state")
        torch.set_rng_state(state["rng.cpu"])
        cuda = [state[k] for k in sorted(k for k in state if k.startswith("rng.cuda."))]
        if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    return meta


# --- predictors: trained models and the two baselines ----------------------------------------------------


class Oracle(nn.Module):
    """The exact-Bayes predictor: returns the batch's posterior. Every error metric must read 0 for it."""

    baseline = True

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__()
        self.spec = spec

    def predict(self, batch: Batch) -> Distribution:
        return batch.posterior


class Uniform(nn.Module):
    """The context-blind floor: uniform over the K answer classes.

    For real answers it uses the task's `prior_predictive(batch)` if the task provides one, else a Normal
    with the mean and variance of the batch's targets pooled over all scored positions.
    """

    baseline = True

    def __init__(self, spec: TaskSpec, task: Any = None) -> None:
        super().__init__()
        self.spec = spec
        self.task = task

    def predict(self, batch: Batch) -> Distribution:
        B, T = batch.target_mask.shape
        if self.spec.answer_kind == "classes":
            logits = torch.zeros(B, T, int(self.spec.n_classes), device=batch.device)
            return Categorical(logits=logits, validate_args=False)
        prior = getattr(self.task, "prior_predictive", None)
        if callable(prior):
            return prior(batch)
        y = batch.targets[batch.target_mask.bool()].double()
        mean, std = y.mean(), y.std().clamp_min(1e-6)
        shape = batch.target_mask.shape
        return Normal(mean.expand(shape).float(), std.expand(shape).float(), validate_args=False)


def is_baseline(model: nn.Module) -> bool:
    return bool(getattr(model, "baseline", False))


def predict(model: nn.Module, spec: TaskSpec, batch: Batch) -> Distribution:
    """Predictive distribution (batch shape (B,T)) of a model or baseline on a batch, in one forward pass."""
    if is_baseline(model):
        return model.predict(batch)
    return predictive(spec, model(batch.inputs))


def build_task(cfg: RunConfig) -> Any:
    return tasks.make(cfg.task.name, **cfg.task.params)


def build_model(cfg: RunConfig, spec: TaskSpec, task: Any = None, *, trust_code: bool = False,
                exclude: tuple[str | Path, ...] = ()) -> nn.Module:
    """The run's predictor, freshly initialised (seeded by cfg.seed): an architecture or a baseline.

    trust_code: allow `model.arch` to be an import string (importing runs code; see `models.resolve`), never from
    the current directory or the directories in `exclude`.
    """
    if cfg.model.arch == "oracle":
        return Oracle(spec)
    if cfg.model.arch == "uniform":
        return Uniform(spec, task)
    factory = models.resolve(cfg.model.arch, trust_code=trust_code, exclude=exclude)
    size = dict(cfg.model.size)
    if cfg.model.max_len is not None and "max_len" not in size and _accepts(factory, "max_len"):
        size["max_len"] = cfg.model.max_len
    torch.manual_seed(cfg.seed)
    try:
        return factory(spec, **size)
    except TypeError as err:  # unknown size keyword
        raise ValueError(f"model.size: {err}") from None


def _accepts(factory: Any, name: str) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# --- reading a run ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """A run directory opened for reading: config, task, model (latest weights, eval mode), metrics, eval.

    trust_code: whether an import-string architecture in the config may be imported to build the model.
    """

    path: Path
    config: RunConfig
    trust_code: bool = False

    @cached_property
    def task(self) -> Any:
        return build_task(self.config)

    @cached_property
    def model(self) -> nn.Module:
        """The predictor with the latest checkpoint's weights (baselines need none), in eval mode."""
        step = latest_step(self.path)
        if step is None:
            m = build_model(self.config, self.task.spec, self.task, trust_code=self.trust_code,
                        exclude=(self.path, self.path.parent))
            if not is_baseline(m):
                raise CheckpointError(f"{self.path}: the run has no checkpoint yet")
            return m.eval()
        return self.load_checkpoint(step)

    def load_checkpoint(self, step: int) -> nn.Module:
        """A fresh model with the weights of checkpoint `step`, in eval mode."""
        m = build_model(self.config, self.task.spec, self.task, trust_code=self.trust_code,
                        exclude=(self.path, self.path.parent))
        if not is_baseline(m):
            load_checkpoint(self.path, step, m)
        return m.eval()

    def checkpoints(self) -> list[int]:
        return list_checkpoints(self.path)

    def metrics(self) -> list[dict]:
        return read_metrics(self.path)

    def eval(self) -> dict:
        p = self.path / EVAL
        return read_json_object(p) if p.exists() else {}


def read_config(run_dir: str | Path) -> RunConfig:
    """A run directory's config.json, validated; a config that is unreadable or invalid raises CheckpointError
    naming the file and the field."""
    cfg_path = Path(run_dir) / CONFIG
    try:
        return validate(read_json_object(cfg_path))
    except ValueError as err:
        raise CheckpointError(f"{cfg_path}: {err}") from None


def load_run(run_dir: str | Path, *, trust_code: bool = False) -> Run:
    """Open a run directory for reading (error if it has no config.json). Importing nothing: an import-string
    architecture is only built when `trust_code=True`."""
    p = Path(run_dir)
    if not (p / CONFIG).is_file():
        raise FileNotFoundError(f"run_dir: {str(p)!r} is not a run directory (no {CONFIG})")
    return Run(path=p, config=read_config(p), trust_code=trust_code)


def write_config(run_dir: str | Path, cfg: RunConfig) -> None:
    atomic_write(Path(run_dir) / CONFIG, config_to_json(cfg))


def merge_eval(run_dir: str | Path, results: dict) -> dict:
    """Merge evaluation results (by evaluation name) into run_dir/eval.json atomically; returns the merged dict."""
    p = Path(run_dir) / EVAL
    merged = read_json_object(p) if p.exists() else {}
    merged.update(results)
    write_json(p, merged)
    return merged
