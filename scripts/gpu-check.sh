#!/usr/bin/env bash
# The one script to run on a GPU machine: checks CUDA, runs the CUDA tests, reproduces the smoke tier on CUDA and
# measures the paper presets' training throughput; writes JSON and a Markdown summary (docs/results/gpu/README.md).
#
#   scripts/gpu-check.sh [--install] [--cpu] [--dry-run] [--steps N] [--dtypes "float32 bf16"]
#                        [--tasks "bijection hmm recall regression"] [--archs "transformer mamba ..."]
#                        [--skip-tests] [--skip-smoke] [--skip-bench]
#
#   OUT_DIR   output folder (default docs/results/gpu; with --cpu a temporary folder, so CPU numbers never land
#             beside GPU ones); relative paths are taken from the repository root
#   PYTHON    the interpreter (default .venv/bin/python when present, else python3)
#
# Steps (each logged to $OUT_DIR/logs/<step>.log; a failing step is reported and the others still run; the exit
# status is 1 when any step failed):
#   env      nvidia-smi and torch.cuda: device, driver, CUDA/cuDNN versions, whether mamba_ssm imports -> env.json
#   tests    pytest -m gpu tests/test_gpu.py -> pytest-gpu.xml
#   smoke    windtunnel reproduce --tier smoke --out $OUT_DIR/smoke-cuda (train.device auto picks CUDA; a
#            previous smoke-cuda folder is replaced, since reproduce would otherwise skip the finished runs)
#   bench    benchmarks/bench_train.py --paper-cells on CUDA, every task x architecture, --steps steps per cell
#            (the first 2 are warm-up) in each dtype -> bench_train.json; then Mamba again with scan="parallel"
#            (mamba-ssm's kernel is what scan="auto" picks on CUDA) -> bench_train_mamba_parallel.json
#   summary  gpu-check.json (every step's exit status and seconds) and summary.md
#
# It installs nothing unless --install is given (then: pip install -e '.[cuda]', which builds mamba-ssm).
# --cpu runs the same steps on the CPU at a few tiny sizes, to test the script itself; it measures nothing of use.
# --dry-run prints the commands and runs none.
set -euo pipefail

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

INSTALL=0
DRY_RUN=0
CPU=0
STEPS=20
DTYPES="float32 bf16"
TASKS="bijection hmm recall regression"
ARCHS="transformer mamba lstm mlp mlp-pointwise"
SKIP_TESTS=0
SKIP_SMOKE=0
SKIP_BENCH=0
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "gpu-check.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --install) INSTALL=1 ;;
    --dry-run) DRY_RUN=1 ;;
    --cpu) CPU=1 ;;
    --steps) need_value "$@"; STEPS="$2"; shift ;;
    --dtypes) need_value "$@"; DTYPES="$2"; shift ;;
    --tasks) need_value "$@"; TASKS="$2"; shift ;;
    --archs) need_value "$@"; ARCHS="$2"; shift ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-smoke) SKIP_SMOKE=1 ;;
    --skip-bench) SKIP_BENCH=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 3 ]] || { echo "gpu-check.sh: --steps must be an integer >= 3" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if (( CPU )); then
  DEVICE=cpu
  OUT_DIR="${OUT_DIR:-${TMPDIR:-/tmp}/windtunnel-gpu-check-cpu}"
  # tiny sizes: this mode tests the script, not the machine
  (( STEPS > 3 )) && STEPS=3
  DTYPES=float32
  TASKS=regression
  ARCHS="lstm mamba"
else
  DEVICE=cuda
  OUT_DIR="${OUT_DIR:-docs/results/gpu}"
fi
SMOKE_DIR="$OUT_DIR/smoke-$DEVICE"
LOG_DIR="$OUT_DIR/logs"
STEPS_TSV="$OUT_DIR/logs/steps.tsv"
FAILED=()

# the windtunnel CLI of this interpreter (no reliance on PATH)
wt() { "$PYTHON" -c 'import sys; from windtunnel.cli import main; sys.argv[0] = "windtunnel"; main()' "$@"; }

run_step() {  # run_step NAME COMMAND...: log to $LOG_DIR/NAME.log, record exit status and seconds
  local name="$1" rc=0 t0=$SECONDS
  shift
  echo "== $name: $*"
  if (( DRY_RUN )); then return 0; fi
  set +e
  "$@" 2>&1 | tee "$LOG_DIR/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$STEPS_TSV"
  if (( rc != 0 )); then
    FAILED+=("$name")
    echo "!! $name failed (exit $rc); log: $LOG_DIR/$name.log"
  fi
}

if (( ! DRY_RUN )); then
  mkdir -p "$LOG_DIR"
  OUT_DIR="$(cd "$OUT_DIR" && pwd)"
  SMOKE_DIR="$OUT_DIR/smoke-$DEVICE"
  LOG_DIR="$OUT_DIR/logs"
  STEPS_TSV="$LOG_DIR/steps.tsv"
  : >"$STEPS_TSV"
fi
echo "gpu-check: device $DEVICE, output $OUT_DIR, python $PYTHON"

if (( INSTALL )); then
  run_step install "$PYTHON" -m pip install -e '.[cuda]'
fi

# ---- (a) the machine: nvidia-smi and torch.cuda
env_check() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi | tee "$OUT_DIR/nvidia-smi.txt"
  elif [[ "$DEVICE" == cuda ]]; then
    echo "note: nvidia-smi not found (torch.cuda decides below)"
  fi
  DEVICE="$DEVICE" "$PYTHON" - "$OUT_DIR/env.json" <<'PY'
import json, os, platform, sys
import torch
from windtunnel.models.scans import mamba_ssm_scan
from windtunnel.machine import machine_description

info = {**machine_description(), "check_device": os.environ["DEVICE"], "python_exe": sys.executable}
info["cuda_available"] = torch.cuda.is_available()
info["torch_cuda"] = torch.version.cuda
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(
        gpu=p.name,
        gpu_count=torch.cuda.device_count(),
        capability=f"{p.major}.{p.minor}",
        gpu_memory_gib=round(p.total_memory / 2**30, 1),
        cudnn=torch.backends.cudnn.version(),
        bf16_supported=torch.cuda.is_bf16_supported(),
    )
info["mamba_ssm_imports"] = mamba_ssm_scan() is not None
try:
    from importlib.metadata import version
    info["mamba_ssm_version"] = version("mamba-ssm")
except Exception:  # not installed
    info["mamba_ssm_version"] = None
with open(sys.argv[1], "w") as f:
    json.dump(info, f, indent=2)
print(json.dumps(info, indent=2))
if info["check_device"] == "cuda" and not info["cuda_available"]:
    sys.exit("no CUDA device: torch.cuda.is_available() is False (run with --cpu to test the script on a CPU)")
PY
}
run_step env env_check
if (( ! DRY_RUN )) && [[ " ${FAILED[*]-} " == *" env "* ]]; then
  echo "gpu-check: the machine check failed; nothing else is run" >&2
  exit 2
fi

# ---- (b) the CUDA tests
if (( ! SKIP_TESTS )); then
  run_step tests "$PYTHON" -m pytest -m gpu tests/test_gpu.py -rs -p no:cacheprovider \
    --junitxml "$OUT_DIR/pytest-gpu.xml"
fi

# ---- (c) a smoke reproduction of every architecture (train.device auto: CUDA when present)
smoke() {
  rm -rf "$SMOKE_DIR"
  wt reproduce --tier smoke --out "$SMOKE_DIR"
}
if (( ! SKIP_SMOKE )); then
  run_step smoke smoke
fi

# ---- (d) training throughput of the paper cells
if (( ! SKIP_BENCH )); then
  # shellcheck disable=SC2086  # the lists are meant to split into words
  run_step bench "$PYTHON" benchmarks/bench_train.py --device "$DEVICE" --paper-cells --steps "$STEPS" \
    --tasks $TASKS --archs $ARCHS --dtype $DTYPES --eval-n 0 --json "$OUT_DIR/bench_train.json"
  if [[ " $ARCHS " == *" mamba "* ]]; then
    # shellcheck disable=SC2086
    run_step bench_mamba_parallel "$PYTHON" benchmarks/bench_train.py --device "$DEVICE" --paper-cells \
      --steps "$STEPS" --tasks $TASKS --archs mamba --mamba-scan parallel --dtype $DTYPES --peak-n 0 --eval-n 0 \
      --json "$OUT_DIR/bench_train_mamba_parallel.json"
  fi
fi

# ---- (e) gpu-check.json and summary.md
summary() {
  CPU_MODE="$CPU" SMOKE_DIR="$SMOKE_DIR" "$PYTHON" - "$OUT_DIR" <<'PY'
import json, os, sys, time
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])
smoke = Path(os.environ["SMOKE_DIR"])
cpu_mode = os.environ["CPU_MODE"] == "1"


def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.is_file() else None


steps = []
for line in (out / "logs" / "steps.tsv").read_text().splitlines():
    name, rc, secs = line.split("\t")
    steps.append({"step": name, "exit": int(rc), "seconds": int(secs)})
env = load("env.json") or {}
bench, par = load("bench_train.json"), load("bench_train_mamba_parallel.json")
tests = None
if (out / "pytest-gpu.xml").is_file():
    suites = ET.parse(out / "pytest-gpu.xml").getroot()
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    a = suite.attrib
    tests = {k: int(a.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    tests["passed"] = tests["tests"] - tests["failures"] - tests["errors"] - tests["skipped"]
smoke_info = {"out": str(smoke), "report": str(smoke / "report.md") if (smoke / "report.md").is_file() else None}
record = {
    "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    "cpu_fallback": cpu_mode,
    "env": env,
    "steps": steps,
    "tests": tests,
    "smoke": smoke_info,
    "bench": "bench_train.json" if bench else None,
    "bench_mamba_parallel": "bench_train_mamba_parallel.json" if par else None,
}
(out / "gpu-check.json").write_text(json.dumps(record, indent=2) + "\n")

md = ["# GPU check: summary", ""]
if cpu_mode:
    md += ["**CPU fallback run (`--cpu`): this tests the script; none of these numbers is a GPU measurement.**", ""]
md += [
    f"{record['when']}; device: {env.get('gpu', env.get('device', '?'))}"
    f" ({env.get('gpu_memory_gib', '?')} GiB, capability {env.get('capability', '?')}); torch {env.get('torch', '?')}"
    f", CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')}; mamba-ssm {env.get('mamba_ssm_version')}"
    f" (imports: {env.get('mamba_ssm_imports')}); host {env.get('machine', '?')}.",
    "",
    "| step | exit | seconds |",
    "|---|---|---|",
    *[f"| {s['step']} | {s['exit']} | {s['seconds']} |" for s in steps],
    "",
]
if tests:
    md += [
        f"CUDA tests (`pytest -m gpu tests/test_gpu.py`): {tests['passed']} passed, {tests['failures']} failed, "
        f"{tests['errors']} errors, {tests['skipped']} skipped (pytest-gpu.xml).",
        "",
    ]
if smoke_info["report"]:
    rel = os.path.relpath(smoke_info["report"], out)
    md += [f"Smoke reproduction on this device: [{rel}]({rel}).", ""]
if bench:
    dtypes = list(dict.fromkeys(c["dtype"] for c in bench["cases"]))
    peaks = bench.get("peak_gflops") or {}
    md += [
        f"Training throughput, tokens/s, paper cells (each cell's own batch, optimiser and task parameters), "
        f"{bench['steps']} steps per cell of which the first 2 are warm-up (bench_train.json). Matmul peak: "
        + (", ".join(f"{k} {v / 1000:.1f} TFLOP/s" for k, v in peaks.items()) or "not measured")
        + ".",
        "",
    ]
    par_of = {(c["task"], c["dtype"]): c["ours"]["tokens_per_s"] for c in (par or {}).get("cases", [])}
    head = ["task", "arch", "batch", "params", "scan"] + [f"{d} tokens/s" for d in dtypes] + ["% of peak"]
    if par_of:
        head += [f"mamba parallel {d}" for d in dtypes]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = {}
    for c in bench["cases"]:
        rows.setdefault((c["task"], c["arch"]), {})[c["dtype"]] = c["ours"]
    for (task, arch), by in rows.items():
        first = next(iter(by.values()))
        pct = [f"{by[d]['pct_peak']:.0f}%" if by.get(d, {}).get("pct_peak") is not None else "—" for d in dtypes]
        cells = [task, arch, str(first["batch"]), f"{first['params']:,}", first.get("mamba_scan") or ""]
        cells += [f"{by[d]['tokens_per_s']:,.0f}" if d in by else "—" for d in dtypes] + [" / ".join(pct)]
        if par_of:
            cells += [f"{par_of[(task, d)]:,.0f}" if arch == "mamba" and (task, d) in par_of else "" for d in dtypes]
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
failed = [s["step"] for s in steps if s["exit"] != 0]
md.append(f"Failed steps: {', '.join(failed)}." if failed else "Every step exited 0.")
(out / "summary.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
PY
}
if (( DRY_RUN )); then
  echo "== summary: write $OUT_DIR/gpu-check.json and $OUT_DIR/summary.md"
  exit 0
fi
summary

if (( ${#FAILED[@]} )); then
  echo "gpu-check: failed steps: ${FAILED[*]} (logs in $LOG_DIR)" >&2
  exit 1
fi
echo "gpu-check: done; summary in $OUT_DIR/summary.md"
