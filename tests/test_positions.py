"""Length generalisation by default: a learned position table reserves positions for 2.5x the training length, and
reserving them changes no weight, no random number and no step of training (models/common.py `PositionTable`,
resolve.resolve_config); models without a table read any length."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from tiny_runs import smoke_config
from windtunnel import models, runs, tasks
from windtunnel.config import build_config, config_to_json
from windtunnel.models import presets
from windtunnel.models.common import PositionTable, init_weights
from windtunnel.resolve import check_override, resolve_config
from windtunnel.training.train import train


def _layout(model: torch.nn.Module) -> str:
    """The names, shapes and dtypes of the state dict: exact, whatever the CPU."""
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(f"{k}:{tuple(v.shape)}:{v.dtype};".encode())
    return h.hexdigest()[:16]


def _fingerprint(model: torch.nn.Module) -> tuple[float, float, float]:
    """(sum of squares, a fixed signed projection, sum of |w|) of every weight in float64. Another draw moves the
    projection by about sqrt(n) weights; a kernel that rounds each weight a few ulps differently moves it by at most
    `_ROUNDING` times the sum of |w|."""
    flat = torch.cat([v.detach().double().flatten() for v in model.state_dict().values()])  # (n,)
    i = torch.arange(flat.numel(), dtype=torch.int64)
    signs = ((i * 2654435761) % 1024).double() / 512 - 1  # (n,) in [-1, 1), integer arithmetic: exact everywhere
    return float(flat.square().sum()), float((flat * signs).sum()), float(flat.abs().sum())


def _rng_digest() -> str:
    return hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:16]


# The largest relative change a fingerprint may show between CPUs. float32 rounds at 6e-8 relative, and the
# transcendental kernels (Mamba's dt initialisation: exp, log, expm1; the normal draws' log, cos, sin) differ by a few
# ulps between CPU kinds and vector widths: measured between AVX-512 and ATEN_CPU_CAPABILITY=default (no SIMD), the
# fingerprints differ by 6e-9 relative at most; a different draw moves them by whole percents.
_ROUNDING = 1e-6

# Smoke HMM models built at seed 3, recorded with the code before positions could be reserved: (layout, the weights'
# fingerprint, global RNG state after construction). max_len None is the task's length, 100 = 93 + 7 is a table longer
# than the training length without reservation (a config whose eval.overrides are longer). The RNG digest is exact
# (the same draws in the same order). The weights were first pinned as sha256 of their bits (on an AMD EPYC, AVX-512),
# which Mamba's initialisation does not reproduce on an Intel Xeon with AMX: the fingerprints were taken from the code
# that still matched those hashes, and are compared within `_ROUNDING`.
BEFORE = {
    ("transformer", (), None): (
        "1511a690af3f827f",
        167.32626480243482,
        3.6414804879641096,
        476.41109515589494,
        "2af3869ed676841a",
    ),
    ("transformer", (), 100): (
        "e721120c52498606",
        167.40839016931108,
        -0.8722987688231869,
        479.9107047448996,
        "71a0384e0c3d093d",
    ),
    ("transformer", (("init", "torch"),), None): (
        "1511a690af3f827f",
        6678.2901128881185,
        -29.755414186940826,
        6607.363622785119,
        "f39f249a7e9cac13",
    ),
    ("transformer", (("init", "torch"),), 100): (
        "e721120c52498606",
        6909.652353613691,
        -25.554405264996312,
        6785.572567683348,
        "65e7f0945e30fa53",
    ),
    ("mamba", (("pos", "learned"),), None): (
        "36602429149bd1d9",
        12118.382354997619,
        20.07660689365371,
        5378.72822042575,
        "273b28350e1dc76c",
    ),
    ("mamba", (("pos", "learned"),), 100): (
        "eee33ae856606a73",
        12067.88094779957,
        11.387732489098209,
        5373.50388525347,
        "e67f9bfeff3c0f7e",
    ),
    ("mamba", (("init", "torch"), ("pos", "learned")), None): (
        "36602429149bd1d9",
        18502.95562328615,
        -30.49664975954688,
        11337.955420056853,
        "a414312fec0eb184",
    ),
    ("mamba", (("variant", "paper"),), None): (
        "64bb288a7e82de13",
        6862.3640245624265,
        -33.57202631233402,
        6816.554674892451,
        "a83d9f1975dff242",
    ),
    ("mamba", (("variant", "paper"),), 100): (
        "a514b1a489dc9e53",
        7092.90469047842,
        -29.89535882102902,
        6992.1386887822955,
        "fe237352f1bca650",
    ),
    ("lstm", (("pos", "learned"),), None): (
        "4bbf0796063278f6",
        211.3109190129889,
        8.588847068428889,
        1632.4755650059233,
        "315159119dc77fff",
    ),
    ("lstm", (("init", "torch"), ("pos", "learned")), 100): (
        "4f15086b48a1cbc6",
        6806.6179715560775,
        -37.34595201549281,
        6793.5088756251225,
        "1c7bf780c95c56f4",
    ),
    ("mlp", (), None): (
        "b2051e60c49acaac",
        162.66526080094684,
        5.834915760893387,
        476.04495053343175,
        "e094b9969b95565e",
    ),
    ("mlp", (), 100): (
        "3483892729cfbea5",
        163.1967002212602,
        1.4940232774844686,
        495.2460288062671,
        "2e037705b6a08afa",
    ),
    ("mlp-pointwise", (), None): (
        "023126cdd45051b9",
        102.73629041450364,
        -1.5486688596875176,
        396.0939811830034,
        "ae095d80a3a5afd9",
    ),
    ("mlp-pointwise", (), 100): (
        "499fa1682d24f728",
        102.81888965080196,
        -1.2342410158514798,
        399.80423979634304,
        "1f926c8e9496433d",
    ),
}


# Recorded with torch 2.13's CPU generators; another torch may draw otherwise (the fingerprint holds for AVX-512, AVX2
# and ATEN_CPU_CAPABILITY=default alike: within 6e-9 of each other, relative).
SAME_GENERATOR = torch.__version__.startswith("2.13.")


@pytest.mark.skipif(not SAME_GENERATOR, reason="draws recorded with torch 2.13's CPU generators")
@pytest.mark.parametrize("key", list(BEFORE), ids=lambda k: f"{k[0]}-{dict(k[1])}-{k[2]}")
def test_models_without_reservation_draw_what_they_drew_before(key):
    arch, extra, max_len = key
    spec = tasks.make("hmm").spec
    torch.manual_seed(3)
    fields = {**dict(extra), **({} if max_len is None else {"max_len": max_len})}
    model = models.make(arch, spec, presets.preset("hmm", arch, "smoke"), **fields)
    layout, squares, projection, total, rng = BEFORE[key]
    assert (_layout(model), _rng_digest()) == (layout, rng)
    got = _fingerprint(model)
    assert got[0] == pytest.approx(squares, rel=_ROUNDING) and got[2] == pytest.approx(total, rel=_ROUNDING)
    assert got[1] == pytest.approx(projection, abs=_ROUNDING * total)


def test_a_table_without_reserved_rows_is_the_nn_embedding_it_replaced():
    """On any platform: the table draws what `nn.Embedding` draws, under PyTorch's init and `init_weights`."""
    for init in (lambda m: None, init_weights):
        torch.manual_seed(1)
        old = torch.nn.Embedding(93, 16)
        init(old)
        after_old = torch.get_rng_state()
        torch.manual_seed(1)
        new = PositionTable(93, 16)
        init(new)
        assert torch.equal(torch.get_rng_state(), after_old)
        assert new.state_dict().keys() == old.state_dict().keys() and torch.equal(new.weight, old.weight)
        torch.manual_seed(1)
        reserved = PositionTable(153, 16, reserved=60)
        init(reserved)
        assert torch.equal(torch.get_rng_state(), after_old) and torch.equal(reserved.weight, old.weight)
        assert reserved.max_len == 153 and reserved.rows(153, torch.device("cpu")).shape == (153, 16)


# Architectures with a learned position table, in every init mode and with dropout (which draws during training).
TABLES = [
    ("transformer", {}),
    ("transformer", {"pos": "learned"}),
    ("transformer", {"init": "torch"}),
    ("mamba", {"pos": "learned"}),
    ("mamba", {"pos": "learned", "init": "torch"}),
    ("mamba", {"variant": "paper"}),
    ("lstm", {"pos": "learned"}),
    ("lstm", {"pos": "learned", "init": "torch", "dropout": 0.1}),
]


@pytest.mark.parametrize(("arch", "extra"), TABLES)
def test_reserving_changes_no_weight_and_no_random_number(arch, extra):
    spec = tasks.make("hmm").spec
    T, R = spec.seq_len, 60
    size = presets.preset("hmm", arch, "smoke")
    torch.manual_seed(7)
    plain = models.make(arch, spec, size, **extra)
    after_plain = torch.get_rng_state()
    torch.manual_seed(7)
    reserved = models.make(arch, spec, size, **extra, max_len=T + R, reserved_positions=R)
    assert torch.equal(torch.get_rng_state(), after_plain)  # the next draw of the run is the same
    a, b = plain.state_dict(), reserved.state_dict()
    assert set(b) - set(a) == {"embed.pos.reserved_weight"}
    for name, value in a.items():  # every weight, the trained rows of the position table included
        assert torch.equal(value, b[name]), name
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in reserved.named_parameters()]
    assert plain.n_params() == reserved.n_params()  # the reserved rows are no parameter: nothing trains them
    rows = reserved.embed.pos.reserved_weight
    assert rows.shape == (R, size.d_model) and torch.isfinite(rows).all() and rows.std() > 0
    assert reserved.max_len == T + R
    torch.manual_seed(7)  # deterministic: the same seed draws the same reserved rows
    again = models.make(arch, spec, size, **extra, max_len=T + R, reserved_positions=R)
    assert torch.equal(again.embed.pos.reserved_weight, rows)
    # sequences up to the training length read only the trained rows; longer ones read the reserved rows
    x = tasks.make("hmm", K=50).sample(2, seed=0).inputs
    plain.eval(), reserved.eval()
    with torch.no_grad():
        torch.testing.assert_close(reserved(x[:, :T]), plain(x[:, :T]), rtol=0, atol=0)
        assert reserved(x).shape[:2] == (2, 153)
    with pytest.raises(ValueError, match="max_len"):
        plain(x)


def _smoke_cfg(arch: str, extra: dict, **more):
    size = {f"model.{k}": v for k, v in extra.items()}
    return smoke_config(**{"task.name": "hmm", "task.K": 6, "model.arch": arch, **size, "seed": 11, **more})


def _numbers(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.endswith("_s")}  # timings differ from run to run


@pytest.mark.parametrize(
    ("arch", "extra"),
    [("transformer", {}), ("mamba", {"pos": "learned"}), ("lstm", {"pos": "learned", "dropout": 0.1})],
)
def test_training_with_reserved_positions_is_bitwise_the_same(tmp_path, arch, extra):
    plain_cfg = _smoke_cfg(arch, extra, **{"model.reserved_positions": 0})
    reserved_cfg = _smoke_cfg(arch, extra)
    train(plain_cfg, tmp_path / "plain", progress=False)
    train(reserved_cfg, tmp_path / "reserved", progress=False)
    plain, reserved = runs.load_run(tmp_path / "plain"), runs.load_run(tmp_path / "reserved")
    T = tasks.make("hmm", K=6).spec.seq_len
    assert plain.config.model.max_len == T and plain.config.model.reserved_positions is None
    assert reserved.config.model.max_len == tasks.make("hmm", K=15).spec.seq_len  # 2.5 x 6 = 15
    assert reserved.config.model.reserved_positions == reserved.config.model.max_len - T
    assert [_numbers(m) for m in plain.metrics()] == [_numbers(m) for m in reserved.metrics()]  # loss, grad norm
    for step in plain.checkpoints():
        a, b = plain.load_checkpoint(step).state_dict(), reserved.load_checkpoint(step).state_dict()
        assert set(b) - set(a) == {"embed.pos.reserved_weight"}
        assert all(torch.equal(a[k], b[k]) for k in a), step
    assert plain.eval().to_json()["default"]["metrics"] == reserved.eval().to_json()["default"]["metrics"]
    # the reserved run evaluates at 2.5 x K; the run without the reservation refuses to
    check_override(reserved.config, {"K": 15})
    with pytest.raises(ValueError, match="max_len"):
        check_override(plain.config, {"K": 15})


def _resolved(task: str, arch: str, **overrides):
    return resolve_config(
        build_config(overrides={"task.name": task, "model.arch": arch, "model.preset": "quick", **overrides})
    )


def test_the_reservation_rule():
    seq = lambda task, **p: tasks.make(task, **p).spec.seq_len  # noqa: E731
    # the README's pair: the quick HMM transformer trains at K = 20 (93 positions) and evaluates at K = 50 (153)
    cfg = _resolved("hmm", "transformer")
    assert (cfg.model.max_len, cfg.model.reserved_positions) == (seq("hmm", K=50), seq("hmm", K=50) - seq("hmm"))
    assert check_override(cfg, {"K": 50}).spec.seq_len == 153
    with pytest.raises(ValueError, match="max_len = 153"):
        check_override(cfg, {"K": 51})
    assert _resolved("hmm", "mamba").model.max_len == 153  # the quick HMM Mamba has learned positions
    assert _resolved("recall", "transformer").model.max_len == seq("recall", N=160)
    assert _resolved("regression", "transformer").model.max_len == seq("regression", n=60)
    assert _resolved("regression", "transformer", **{"task.n": 9}).model.max_len == seq("regression", n=23)  # half up
    # nothing reserved: bijection (V fixes its length), no learned table, the MLPs (capacity-matched), baselines
    for task, arch, extra in [
        ("bijection", "transformer", {}),
        ("hmm", "lstm", {}),
        ("hmm", "transformer", {"model.pos": "rotary"}),
        ("hmm", "mlp", {}),
        ("hmm", "mlp-pointwise", {}),
    ]:
        cfg = _resolved(task, arch, **extra)
        assert cfg.model.max_len == seq(task) and cfg.model.reserved_positions is None, (task, arch)
    assert resolve_config(build_config(overrides={"task.name": "hmm", "model.arch": "oracle"})).model.max_len == 93
    # an explicit max_len or reserved_positions is what the config gets
    assert _resolved("hmm", "transformer", **{"model.max_len": 100}).model.max_len == 100
    assert _resolved("hmm", "transformer", **{"model.reserved_positions": 0}).model.max_len == 93
    assert _resolved("hmm", "transformer", **{"model.reserved_positions": 7}).model.max_len == 100
    # evaluation settings already as long: the table covers them, with nothing reserved (the paper/quick suites)
    cfg = _resolved("hmm", "transformer", **{"eval.overrides": [{"K": 30}, {"K": 50}]})
    assert (cfg.model.max_len, cfg.model.reserved_positions) == (153, None)
    with pytest.raises(ValueError, match="reserved_positions"):
        _resolved("hmm", "transformer", **{"model.max_len": 100, "model.reserved_positions": 8})
    with pytest.raises(ValueError, match="no learned position table"):
        _resolved("hmm", "lstm", **{"model.reserved_positions": 4})


def test_reservation_is_recorded_and_idempotent():
    reserved, plain = _resolved("hmm", "transformer"), _resolved("bijection", "transformer")
    assert resolve_config(reserved) == reserved and resolve_config(plain) == plain
    assert json.loads(config_to_json(reserved))["model"]["reserved_positions"] == 60
    assert "reserved_positions" not in json.loads(config_to_json(plain))["model"]  # as stored before the field


def test_tasks_declare_their_length_parameter():
    assert {name: tasks.info(name).length_param for name in ("bijection", "hmm", "recall", "regression")} == {
        "bijection": None,
        "hmm": "K",
        "recall": "N",
        "regression": "n",
    }


@pytest.mark.parametrize(
    ("arch", "extra"),
    [("transformer", {"pos": "rotary"}), ("transformer", {"pos": "none"}), ("mamba", {}), ("lstm", {})],
)
def test_models_without_a_table_read_any_length(arch, extra):
    spec = tasks.make("hmm", K=6).spec
    model = models.make(arch, spec, presets.preset("hmm", arch, "smoke"), **extra).eval()
    assert not model.size.position_limit()
    x = tasks.make("hmm", K=50).sample(2, seed=0).inputs
    with torch.no_grad():
        assert model(x).shape[:2] == (2, 153)
    cfg = resolve_config(
        build_config(overrides={"task.name": "hmm", "task.K": 6, "model.arch": arch, "model.preset": "smoke"})
    )
    if not extra:  # the smoke Mamba and LSTM: no table, so no reservation, and no limit on what they evaluate
        assert check_override(cfg, {"K": 50}).spec.seq_len == 153
