"""`windtunnel compare` (report/compare.py): paired differences over test sequences, measurable or not, the config
keys that differ, cells of a directory of runs with their seeds pooled, and the command's output and bad input."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from readme_commands import check_ran, run_cli
from tiny_runs import smoke_config
from windtunnel.cli import app
from windtunnel.evaluation import marks
from windtunnel.report.compare import compare, config_diff, paired_difference, to_markdown, to_text

runner = CliRunner()
TINY = {"task.name": "bijection", "task.V": 6, "task.L": 5}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """A directory of three tiny trained runs: the transformer at seeds 0 and 1, the LSTM at seed 0."""
    from windtunnel.training.train import train

    root = tmp_path_factory.mktemp("compare") / "suite"
    for name, arch, seed in (("tf-s0", "transformer", 0), ("tf-s1", "transformer", 1), ("lstm-s0", "lstm", 0)):
        train(smoke_config(**TINY, **{"model.arch": arch, "seed": seed}), root / "runs" / name, progress=False)
    return root


def _eval(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())["default"]


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    """Every leaf of a nested dict by dotted key (the test's own flattening, to check `config_diff` against)."""
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


# --- the paired difference ---------------------------------------------------------------------------------


def test_the_paired_difference_is_the_direct_computation_from_per_sequence_values():
    """Mean: the sum of per-sequence differences over the scored positions; interval: the bootstrap's agrees with the
    ratio estimator's delta-method 95% interval, computed here independently."""
    g = torch.Generator().manual_seed(1)
    N = 3000
    counts = torch.randint(3, 9, (N,), generator=g).double()
    a = torch.rand(N, generator=g).double() * counts  # per-sequence sums of a per-position value in [0, 1)
    b = a + (0.02 + 0.2 * torch.randn(N, generator=g).double()) * counts
    [d] = paired_difference(a[:, None], b[:, None], counts, ["kl_bits"], n_boot=2000)
    diff = b - a
    mean = float(diff.sum() / counts.sum())
    assert d.mean == pytest.approx(mean, abs=1e-12)
    resid = diff - mean * counts
    se = math.sqrt(N / (N - 1) * float((resid**2).sum())) / float(counts.sum())
    assert d.lo == pytest.approx(mean - 1.96 * se, abs=0.15 * se)
    assert d.hi == pytest.approx(mean + 1.96 * se, abs=0.15 * se)
    assert d.separated  # 0.02 bits with a standard error of about 0.001


def test_measurable_only_where_the_interval_excludes_zero():
    counts = torch.full((400,), 5.0, dtype=torch.float64)
    a = torch.linspace(0.1, 2.0, 400, dtype=torch.float64)[:, None] * 5
    shift = torch.arange(400, dtype=torch.float64)[:, None] % 7 / 7  # noise that is not the same for every sequence
    cases = {
        "higher": (a + 0.5 + shift, True),
        "lower": (a - 0.5 - shift, True),
        "identical": (a.clone(), False),
        "zero mean": (a + torch.where(torch.arange(400)[:, None] % 2 == 0, 1.0, -1.0), False),
        "float rounding": (a + 1e-9, False),  # a constant 2e-10 bits per position: never evidence
    }
    for name, (b, measurable) in cases.items():
        [d] = paired_difference(a, b, counts, ["entropy_mae_bits"])
        assert d.separated is measurable, name
        assert d.lo <= d.mean <= d.hi, name
        if measurable:
            assert (d.mean > 0) == (name == "higher") and (d.lo > marks.NUMERICAL_BITS or d.hi < 0), name


def test_two_runs_on_the_same_test_sequences_are_paired_and_match_eval_json(suite):
    """Both checkpoints re-scored on the test sequences eval.json scored: the paired difference's mean is the
    difference of their eval.json means."""
    tf, lstm = suite / "runs" / "tf-s0", suite / "runs" / "lstm-s0"
    c = compare([tf, lstm], n_boot=200)
    [p] = c.pairings
    assert p.paired and p.n == _eval(tf)["n"] == 16 and "re-scored" in p.how and not p.notes
    for d in p.differences:
        want = _eval(lstm)["metrics"][d.metric]["mean"] - _eval(tf)["metrics"][d.metric]["mean"]
        assert d.mean == pytest.approx(want, abs=1e-9), d.metric
        assert d.lo <= d.mean <= d.hi
    assert {d.metric for d in p.differences} == {"entropy_mae_bits", "kl_bits"}
    for inp, run in zip(c.inputs, (tf, lstm), strict=True):
        assert inp.cell["level"] == _eval(run)["verdict"]["level"]  # one seed: the verdict eval.json holds


def test_a_run_against_itself_is_not_measurably_different(suite):
    tf = suite / "runs" / "tf-s0"
    [p] = compare([tf, tf], n_boot=200).pairings
    assert p.paired and all(d.mean == 0 and not d.separated for d in p.differences)


def test_different_test_sequences_are_not_paired(suite, tmp_path):
    """A run scored on other test sequences (here: fewer of them) gets the unpaired comparison only, saying why;
    --n pairs them again over the first n sequences both share."""
    tf = suite / "runs" / "tf-s0"
    other = tmp_path / "fewer"
    shutil.copytree(suite / "runs" / "lstm-s0", other)
    stored = json.loads((other / "eval.json").read_text())
    stored["default"]["n"] = 8
    (other / "eval.json").write_text(json.dumps(stored))
    [p] = compare([tf, other]).pairings
    assert not p.paired and p.how.startswith("not paired: different test sequences") and "n: 16 → 8" in p.how
    assert p.differences and all(d.lo is None and d.hi is None for d in p.differences)
    assert "intervals" in to_text(compare([tf, other]))
    [again] = compare([tf, other], n=8, n_boot=100).pairings
    assert again.paired and again.n == 8


def test_no_paired_reads_only_the_files(suite):
    tf, lstm = suite / "runs" / "tf-s0", suite / "runs" / "lstm-s0"
    [p] = compare([tf, lstm], paired=False).pairings
    assert not p.paired and "--no-paired" in p.how
    want = _eval(lstm)["metrics"]["kl_bits"]["mean"] - _eval(tf)["metrics"]["kl_bits"]["mean"]
    assert next(d for d in p.differences if d.metric == "kl_bits").mean == pytest.approx(want)


# --- config keys and cells ---------------------------------------------------------------------------------


def test_the_config_diff_lists_exactly_the_differing_keys():
    a = {"task": {"name": "hmm", "params": {"K": 20, "S": 5}}, "train": {"lr": 1e-3, "betas": [0.9, 0.99]}, "seed": 0}
    b = {"task": {"name": "hmm", "params": {"K": 50, "S": 5}}, "train": {"lr": 1e-3, "betas": [0.9, 0.95]}, "x": 1}
    assert config_diff([a, b]) == [
        ("seed", ("0", "(absent)")),
        ("task.params.K", ("20", "50")),
        ("train.betas", ("[0.9, 0.99]", "[0.9, 0.95]")),
        ("x", ("(absent)", "1")),
    ]
    assert config_diff([a, b, b]) == [(k, (v[0], v[1], v[1])) for k, v in config_diff([a, b])]
    assert config_diff([a, a, b]) == [(k, (v[0], v[0], v[1])) for k, v in config_diff([a, b])]
    assert config_diff([a, dict(a)]) == []
    assert config_diff([{"k": None}, {}]) == [("k", ("null", "(absent)"))]


def test_the_runs_config_diff_is_their_config_json_less_loggers(suite, tmp_path):
    tf, lstm = suite / "runs" / "tf-s0", suite / "runs" / "lstm-s0"
    logged = tmp_path / "logged"
    shutil.copytree(tf, logged)
    cfg = json.loads((logged / "config.json").read_text())
    cfg["train"]["loggers"] = ["jsonl"]
    (logged / "config.json").write_text(json.dumps(cfg))
    assert compare([tf, logged], paired=False).config_diff == ()  # loggers change no number
    one, two = (_leaves(json.loads((r / "config.json").read_text())) for r in (tf, lstm))
    differ = {k for k in one.keys() | two.keys() if one.get(k) != two.get(k)}
    assert {k for k, _ in compare([tf, lstm], paired=False).config_diff} == differ
    assert "model.arch" in differ


def test_cells_of_a_directory_pool_their_seeds(suite):
    """--cell picks one configuration per cell; the transformer's two seeds pooled as the report pools them (the mean
    of the seed means), paired against the LSTM with per-sequence values averaged over the seeds."""
    c = compare([suite], [{"arch": "transformer"}, {"arch": "lstm"}], n_boot=100)
    tf, lstm = c.inputs
    assert [len(i.runs) for i in c.inputs] == [2, 1] and (tf.arch, lstm.arch) == ("transformer", "lstm")
    seeds = [_eval(suite / "runs" / f"tf-s{s}")["metrics"]["entropy_mae_bits"]["mean"] for s in (0, 1)]
    assert tf.value("entropy_mae_bits")["mean"] == pytest.approx(sum(seeds) / 2)
    [p] = c.pairings
    lstm_mean = _eval(suite / "runs" / "lstm-s0")["metrics"]["entropy_mae_bits"]["mean"]
    d = next(d for d in p.differences if d.metric == "entropy_mae_bits")
    assert p.paired and d.mean == pytest.approx(lstm_mean - sum(seeds) / 2, abs=1e-9)
    assert ("seed", ("[0, 1]", "0")) in c.config_diff
    assert len(compare([suite], paired=False).inputs) == 2  # without --cell: every configuration


# --- the command -------------------------------------------------------------------------------------------


def test_the_command_prints_both_verdicts_and_writes_markdown_and_curves(suite, tmp_path):
    tf, lstm = suite / "runs" / "tf-s0", suite / "runs" / "lstm-s0"
    args = ["compare", str(tf), str(lstm)]
    done = run_cli(args, tmp_path)
    check_ran(args, done)
    rows: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line[:2] in ("A ", "B "):
            rows.setdefault(line[0], line)  # the first: the input's own row, above its differences
    for row, run in zip(("A", "B"), (tf, lstm), strict=True):
        verdict = _eval(run)["verdict"]
        assert f"{verdict['mark']} {verdict['level']}" in rows[row]
    assert "B − A" in done.stdout and "paired over the same 16 test sequences" in done.stdout
    assert "model.arch" in done.stdout

    out, plot = tmp_path / "cmp.md", tmp_path / "curves.png"
    result = runner.invoke(app, ["compare", str(tf), str(lstm), "--markdown", "--out", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("# Comparison of 2 inputs") and "| B − A |" in text and "![" in text and "curves.png" in text
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_markdown_and_text_say_the_same(suite):
    c = compare([suite / "runs" / "tf-s0", suite / "runs" / "lstm-s0"], paired=False)
    text, md = to_text(c), to_markdown(c)
    for phrase in ("Differences against A", "Config keys that differ", "intervals"):
        assert phrase in text and phrase in md


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["{tf}"], "RUN_OR_REPORT: compare needs two or more runs or cells (got 1"),
        (["{tf}", "{empty}"], "RUN_OR_REPORT: {empty}: neither a run directory"),
        (["{tf}", "{missing}"], "RUN_OR_REPORT: {missing}: does not exist"),
        (["{suite}", "--cell", "arch=mamba"], "--cell: arch=mamba: matches no run in"),
        (["{suite}", "--cell", "arch"], "--cell: expected key=value"),
        (["{tf}", "{lstm}", "--cell", "arch=lstm"], "--cell: selects the cells of a directory of runs"),
        (["{tf}", "{lstm}", "--n", "0"], "--n: must be >= 1"),
        (["{tf}", "{lstm}", "--plot", "curves.pdf"], "--plot: must name a .png file"),
    ],
)
def test_bad_input_exits_2_naming_the_argument(suite, tmp_path, args, names):
    (tmp_path / "empty").mkdir()
    where = {
        "tf": suite / "runs" / "tf-s0",
        "lstm": suite / "runs" / "lstm-s0",
        "suite": suite,
        "empty": tmp_path / "empty",
        "missing": tmp_path / "missing",
    }
    result = runner.invoke(app, ["compare", *(a.format(**where) for a in args)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: " + names.format(**where)), result.output
