"""Run directories, the unit of record: every file name of a run directory, and the atomic writes and checked reads
of its files (their contents as typed records: `windtunnel.store.records.run_dir`; checkpoints:
`windtunnel.runs.checkpoints`).

    run_dir/config.json                       fully resolved RunConfig
    run_dir/versions.json                     the code that trained it: {"windtunnel": ..., "torch": ...}
    run_dir/metrics.jsonl                     one JSON object per logged step / evaluation (append-only)
    run_dir/checkpoints/                      weights, optimiser state and RNG per saved step (checkpoints.py)
    run_dir/eval.json                         final evaluation, one entry per evaluation setting: the recorded one
    run_dir/evals/NAME.json                   evaluations at other settings, e.g. evals/eval.n=100.json (`eval_file`)
    run_dir/geometry.json                     geometry probes (windtunnel.geometry.run)
    run_dir/done.json                         written last by `executors.run_job`: the run is finished and probed
    run_dir/resumes.json, trained.json        a resume's changed keys, the config training continues with (resume.py)
    run_dir/figures/*.png                     the probes' figures
    run_dir/tensorboard/, run_dir/wandb/      the loggers' files (windtunnel.training.tracking)

Files are written atomically (temp file + fsync + rename) and readable by everyone the umask allows (0644 by
default); a file that is missing, truncated or garbled, or is a symbolic link, raises `CheckpointError` naming it
(files are opened without following a link, so a link planted in a run directory never leaks what it points at).
A writer holds the directory's lock (`windtunnel.store.lock`). `--overwrite` deletes only what this layout names, in a
directory whose config.json is a run's (`clear`); anything else there is refused, naming it. A file or folder a user
names for output is checked before any work (`check_output_file`, `check_output_dir`): never a run directory's file,
a link, a device or a FIFO, and a file never in a folder that does not exist.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from windtunnel.config import RunConfig, config_to_json, validate
from windtunnel.errors import CheckpointError, described

CONFIG, METRICS, EVAL, CKPT_DIR, FIGURES = "config.json", "metrics.jsonl", "eval.json", "checkpoints", "figures"
GEOMETRY, DONE, VERSIONS = "geometry.json", "done.json", "versions.json"
EVALS = "evals"  # evaluations whose settings differ from the run's own (`eval_file`), kept apart from eval.json
RESUMES, TRAINED = "resumes.json", "trained.json"  # written by windtunnel.runs.resume
LOCK_FILE, OWNER_FILE = (
    ".windtunnel.store.lock",
    ".windtunnel.owner",
)  # a writer's lock and its record (windtunnel.store.lock)
TEMP_SUFFIX = ".tmp"
LATEST, CKPT_SUFFIXES = "latest.json", (".safetensors", ".state.safetensors", ".state.json")  # checkpoints.py
TENSORBOARD, WANDB, WANDB_ID = "tensorboard", "wandb", "windtunnel-run-id"  # tracking.py's folders, wandb's run id
FOLDERS = (CKPT_DIR, EVALS, FIGURES, TENSORBOARD, WANDB)  # the folders of a run directory, never followed (`folder`)


def _read_umask() -> int:
    """The process umask (set and restored once, at import, before any thread writes files)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # what open() would give a new file: results are shared like any other file


# --- atomic files ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An OSError raised inside without a file name (a write's "[Errno 27] File too large" under `ulimit -f`, a full
    disk) is raised again naming `path`, so its one error line says which file could not be written."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            raise OSError(err.errno, err.strerror or str(err), str(path)) from None
        raise


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write via a temp file in the same directory + fsync + os.replace: readers see old or new, never half. A link
    at `path` is replaced, never written through; a failed write is an OSError naming `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with naming(path):
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


# What training writes beside config.json: a folder holding config.json and one of these is a run directory.
RUN_MARKS = (METRICS, EVAL, DONE, VERSIONS, TRAINED, CKPT_DIR)

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def is_run_directory(path: str | Path) -> bool:
    """Whether `path` is a run directory: config.json beside something training writes (`RUN_MARKS`), links counted."""
    return os.path.lexists(Path(path) / CONFIG) and any(os.path.lexists(Path(path) / m) for m in RUN_MARKS)


def run_directory_of(path: str | Path) -> Path | None:
    """The run directory `path` is or lies inside, as written or with its links resolved, or None."""
    full = Path(os.path.abspath(path))
    real = Path(os.path.realpath(full.parent)) / full.name
    for where in (full, real):
        for d in (where, *where.parents):
            if is_run_directory(d):
                return d
    return None


def kind_of(mode: int) -> str:
    """What a st_mode names, for an error: "a symbolic link", "a FIFO", "a character device", ... or "a file"."""
    return next((kind for test, kind in _KINDS if test(mode)), "a file")


def check_output_file(path: str | Path, option: str) -> Path:
    """`path` as a Path if a command may write the file a user named there (`option`, e.g. "--out"); else a
    ValueError naming both, before any work. Refused: a path that exists and is not a regular file (a link, a
    device, a FIFO, a socket, a directory: the atomic rename would replace it), a folder that does not exist (it is
    never created), and a file of a run directory (the path lies inside one: a run's files are the run's alone)."""
    p = Path(path)
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(p).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{option}: {str(p)!r} is {kind_of(mode)}, not a regular file; name a file to write")
    if not p.parent.is_dir():
        what = "does not exist" if not os.path.lexists(p.parent) else "is not a directory"
        raise ValueError(f"{option}: {str(p)!r}: its folder {str(p.parent)!r} {what}")
    run = run_directory_of(p)
    if run is not None:
        raise ValueError(
            f"{option}: {str(p)!r} is inside the run directory {str(run)!r}, whose files are the run's own; "
            "write elsewhere"
        )
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise ValueError(f"{option}: {str(p.parent)!r} is not writable")
    return p


def check_output_dir(path: str | Path, option: str = "--out") -> Path:
    """`path` as a Path if a command may create or fill the folder a user named there (`option`); else a ValueError
    before any work: it is not a directory (a file, a device, a FIFO), lies inside a run directory (`run_directory_of`)
    or cannot be written (`check_writable`)."""
    p = Path(path)
    if os.path.lexists(p) and not p.is_dir():
        raise ValueError(f"{option}: {str(p)!r} is {kind_of(os.lstat(p).st_mode)}, not a directory")
    run = run_directory_of(p)
    if run is not None:
        where = "is" if Path(os.path.abspath(p)) == run else f"lies inside {str(run)!r}, which is"
        raise ValueError(
            f"{option}: {str(p)!r} {where} a run directory, whose files are the run's own; write elsewhere"
        )
    check_writable(p, option)
    return p


def check_run_dir(path: str | Path, what: str = "run_dir") -> Path:
    """`path` as a Path if it is a run directory (holds config.json); else an error that says which way it is not:
    FileNotFoundError "does not exist", NotADirectoryError "is a file, not a run directory", or FileNotFoundError
    "is not a run directory (no config.json)" -- each one line naming `what` and the path."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{what}: {str(p)!r} does not exist")
    if not p.is_dir():
        raise NotADirectoryError(f"{what}: {str(p)!r} is a file, not a run directory")
    if not (p / CONFIG).is_file():
        raise FileNotFoundError(f"{what}: {str(p)!r} is not a run directory (no {CONFIG})")
    return p


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what creating `path` would create), or None."""
    missing = None
    while not path.exists() and path.parent != path:
        missing, path = path, path.parent
    return missing


def write_json(path: str | Path, obj: Any, sort_keys: bool = True) -> None:
    """`obj` as indented JSON, written atomically; keys sorted unless their order means something (sort_keys=False)."""
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=sort_keys, allow_nan=True) + "\n")


def clean_temp_files(run_dir: str | Path) -> list[Path]:
    """Delete the temp files of writes a killed process never finished (`.NAME.XXXX.tmp`); returns them.
    Call only while holding the run's lock: a live writer's temp file is not stray."""
    removed = []
    for d in (Path(run_dir), folder(run_dir, CKPT_DIR)):
        for p in d.glob(f".*{TEMP_SUFFIX}") if d.is_dir() else ():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p)
    return removed


def open_nofollow(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags, mode)` that never follows a symbolic link at `path` (O_NOFOLLOW): a link is an OSError
    naming it, so a link planted in a run directory is neither read (a secret copied out) nor written through."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError:
        if os.path.islink(path):
            raise OSError(
                errno.ELOOP, "is a symbolic link; a run directory's files are never opened through one", str(path)
            ) from None
        raise


def folder(run_dir: str | Path, name: str) -> Path:
    """`run_dir/name`, a folder of the run directory's layout (checkpoints/, evals/, figures/, tensorboard/, wandb/),
    refused where it is a symbolic link: an OSError naming it, before anything is read from it or written into it, so
    a link planted there (`evals -> /elsewhere`) neither receives a run's files nor feeds it another's. The run
    directory itself may be reached through a link (a `runs/` on another disk)."""
    path = Path(run_dir) / name
    if path.is_symlink():
        raise OSError(
            errno.ELOOP, "is a symbolic link; a run directory's folders are never followed through one", str(path)
        )
    return path


def check_folders(run_dir: str | Path) -> None:
    """`folder` of each folder of the run directory's layout that is there: a writer refuses a link among them before
    it touches the run directory."""
    for name in FOLDERS:
        folder(run_dir, name)


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading, if it is a regular file; anything else (a symbolic link, a FIFO, a device, a
    directory) is an OSError naming it. The open never blocks, so a FIFO planted in a run directory cannot hang a
    reader, and never follows a link (`open_nofollow`)."""
    fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path) -> bytes:
    """The bytes of a regular file (`open_regular`: never a FIFO or a device, never a blocking open)."""
    with open_regular(path) as f:
        return f.read()


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a truncated, garbled or binary file, or one that is not a regular file, raises
    CheckpointError naming it."""
    path = Path(path)
    try:
        return json.loads(read_regular(path).decode("utf-8"))
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
        raise CheckpointError(f"{path}: line {lineno}: step must be a non-negative integer (got {described(step)})")
    return rec


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of metrics.jsonl, in order. A last line without its newline (a write cut short by a crash) is
    ignored; any other bad line raises CheckpointError naming its line number, so nothing is silently lost."""
    p = Path(run_dir) / METRICS
    if not p.exists():
        return []
    try:
        text = read_regular(p).decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{p} is corrupted: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise CheckpointError(f"{p} cannot be read: {err.strerror or err}") from None
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
        self._f = os.fdopen(open_nofollow(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a")  # held for the run

    def write(self, record: dict) -> None:
        with naming(self.path):
            self._f.write(json.dumps(record) + "\n")
            self._f.flush()

    def sync(self) -> None:
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


# --- evaluation file names ----------------------------------------------------------------------------------------

# What an extra evaluation's name may keep in its file name; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+-]")
_MAX_NAME = 200  # characters of a name kept in its file name; a longer one ends in a hash of the whole name


def eval_file(run_dir: str | Path, extra: str | None = None) -> Path:
    """Where an evaluation of `run_dir` is kept: eval.json for the run's recorded one (`extra` None), else
    evals/NAME.json for an extra evaluation named `extra` ("K=50,eval.n=300"), made a safe file name."""
    if extra is None:
        return Path(run_dir) / EVAL
    name = _UNSAFE.sub("_", extra)
    if len(name) > _MAX_NAME or name != extra:  # shortened or changed: the hash keeps two names apart
        name = f"{name[:_MAX_NAME]}-{hashlib.sha256(extra.encode()).hexdigest()[:12]}"
    return folder(run_dir, EVALS) / f"{name}.json"


def contents(run_dir: Path) -> list[Path]:
    """What a directory holds besides its lock (a writer killed before config.json leaves only that)."""
    return [p for p in run_dir.iterdir() if p.name not in (LOCK_FILE, OWNER_FILE)] if run_dir.is_dir() else []


# --- what --overwrite may delete -------------------------------------------------------------------------------

_CHECKPOINT = re.compile(r"step_\d{8,}(?:" + "|".join(map(re.escape, CKPT_SUFFIXES)) + ")")
_TEMP = re.compile(r"\.(.+)\.\w+" + re.escape(TEMP_SUFFIX))  # atomic_write's .NAME.XXXXXXXX.tmp, for NAME
# The regular files each folder of a run directory holds ("": the run directory itself), by name (the lock's owner
# file is never deleted, `_entries`; a temp file of its write may be).
_LAYOUT: dict[str, Callable[[str], bool]] = {
    "": lambda name: name in (CONFIG, VERSIONS, METRICS, EVAL, GEOMETRY, DONE, RESUMES, TRAINED, OWNER_FILE),
    CKPT_DIR: lambda name: name == LATEST or _CHECKPOINT.fullmatch(name) is not None,
    FIGURES: lambda name: name.endswith(".png"),  # plotting.save's NAME.png and NAME.tmp.png
    EVALS: lambda name: name.endswith(".json"),  # eval_file's extra evaluations
    TENSORBOARD: lambda name: name.startswith("events.out.tfevents."),
}


def _mode(p: Path) -> int:
    """`p`'s st_mode, not following a link (0: gone since it was listed)."""
    try:
        return p.lstat().st_mode
    except FileNotFoundError:
        return 0


def _entries(folder: Path, rel: str = "") -> Iterator[tuple[Path, bool]]:
    """Each entry of `folder` (the run directory's folder `rel`), sorted, a folder after what it holds, with whether
    the run directory's layout names it. A symbolic link never is; wandb/ is wandb's own, recognised by the run id
    windtunnel keeps there, and not looked into; the lock and its record are left out (never deleted)."""
    for p in sorted(folder.iterdir()):
        mode = _mode(p)
        if mode == 0 or (not rel and p.name in (LOCK_FILE, OWNER_FILE)):
            continue
        if not rel and stat.S_ISDIR(mode) and p.name in _LAYOUT:
            yield from _entries(p, p.name)
            yield p, True
        elif not rel and stat.S_ISDIR(mode) and p.name == WANDB:
            yield p, stat.S_ISREG(_mode(p / WANDB_ID))
        else:
            temp = _TEMP.fullmatch(p.name)
            yield p, stat.S_ISREG(mode) and _LAYOUT[rel](temp.group(1) if temp else p.name)


def first_stray(run_dir: Path) -> Path | None:
    """The first entry of `run_dir` (sorted, depth first) that a run directory's layout does not name, or names as
    another kind (a folder for a file, a link for either); None when everything there is windtunnel's."""
    return next((p for p, ours in _entries(run_dir) if not ours), None)


def _not_a_run_config(path: Path) -> str | None:
    """Why `path` is not the config.json a run writes (`write_config`: a valid RunConfig with every section it always
    writes), or None when it is one."""
    try:
        data = read_json_object(path)
        validate(data)  # an older config's size fields (`records.run_dir.ConfigFile.upgrade`) are a free dict here
    except CheckpointError as err:
        return str(err)
    except ValueError as err:
        return f"{path}: {err}"
    missing = [k for k in json.loads(config_to_json(RunConfig())) if k not in data]  # what write_config always writes
    return f"{path}: no {missing[0]!r}, so not the config a run writes" if missing else None


def _refuse_unless_run(run_dir: Path) -> None:
    """A ValueError, unless `run_dir` is a run directory `--overwrite` may clear: it holds nothing its layout does
    not name (`first_stray`, named) and its config.json is a run's (`_not_a_run_config`)."""
    stray = first_stray(run_dir)
    if stray is not None:
        raise ValueError(
            f"overwrite: {str(run_dir)!r} is not a run directory: it holds {str(stray.relative_to(run_dir))!r}, "
            "which windtunnel did not write; refusing to delete anything"
        )
    why = _not_a_run_config(run_dir / CONFIG)
    if why is not None:
        raise ValueError(f"overwrite: {str(run_dir)!r} is not a run directory ({why}); refusing to delete anything")


def clear(run_dir: Path) -> None:
    """Delete a run directory's contents -- only what its layout names, after `_refuse_unless_run` -- except the lock
    this process holds on it."""
    _refuse_unless_run(run_dir)
    for p, _ in list(_entries(run_dir)):
        if p.parent == run_dir and p.name == WANDB:
            shutil.rmtree(p)  # wandb's own files
        elif p.is_dir():
            p.rmdir()  # a folder of the layout, emptied just before
        else:
            p.unlink()


def refuse_existing(run_dir: Path, resume: bool, overwrite: bool) -> None:
    """Before anything is created: `run_dir` never inside another run directory, an existing, non-empty `run_dir`
    needs resume or overwrite, and overwrite only ever deletes a run directory's own files (`clear`)."""
    outer = run_directory_of(Path(os.path.abspath(run_dir)).parent)
    if outer is not None:  # its files would be read as the outer run's, and `clear` of that run refuses them
        raise ValueError(
            f"--out: {str(run_dir)!r} lies inside the run directory {str(outer)!r}; a run directory is never made "
            "inside another"
        )
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ValueError(f"--out: {str(run_dir)!r} is a file, not a directory")
    if not contents(run_dir) or resume:
        return
    if not overwrite:
        raise FileExistsError(
            f"run_dir: {str(run_dir)!r} already exists; pass overwrite=True (--overwrite) "
            "to replace it or resume=True (--resume) to continue it"
        )
    _refuse_unless_run(run_dir)
