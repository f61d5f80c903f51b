"""The paper's and the authors' settings, each value tagged with where it comes from.

One table, `PAPER_SETTINGS[task][arch][key]`, of what the paper states or the authors' code does (key "*" holds
what every architecture of a task shares). Every value is a `Sourced`: its source names the paper section, the
authors' script (a file of vishalmisra/bayesian-wind-tunnel, named in the source), or says "our choice"
where nothing was published. A headline cell's values come from the code that made its number (official-code.md
section 1: the G3 production scripts for the bijection, not the G1 yaml that no script reads). Keys: `task.*`,
`model.*` (size fields: the paper tier sets them in `model.size`), `train.*` and `eval.*` (config fields), and
`form.*` (how their code builds or trains the cell where we have no config field: loss, data, checkpoint, layer
form; `our_forms` says what ours does). The `paper` tier is built from this table, and every tier's deviations
(the paper tier's too) are computed against it, so the report names the source of each "paper" value it prints.

`PAPER_RESULTS` holds only numbers the paper reports (its v3 architecture x primitive table); derived reference
levels (the context-blind floor, chance) are computed by the report from the task, never printed as the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from windtunnel.models import built_ins, info

SOURCE_KINDS = ("paper", "authors' code", "our choice")


@dataclass(frozen=True)
class Sourced:
    """A setting or result and where it comes from ("paper: ...", "authors' code: ...", "our choice: ...")."""

    value: Any
    source: str

    def __post_init__(self) -> None:
        if not any(self.source.startswith(k + ":") for k in SOURCE_KINDS):
            raise ValueError(
                f"source: must start with one of {', '.join(k + ':' for k in SOURCE_KINDS)} (got {self.source!r})"
            )


def _paper(value: Any, where: str) -> Sourced:
    return Sourced(value, f"paper: {where}")


def _code(value: Any, where: str) -> Sourced:
    return Sourced(value, f"authors' code: {where}")


def _ours(value: Any, why: str = "no published value") -> Sourced:
    return Sourced(value, f"our choice: {why}")


def _each(where: str, kind: Any = _code, **values: Any) -> dict[str, Sourced]:
    """Several keys from one source."""
    return {k.replace("__", "."): kind(v, where) for k, v in values.items()}


_TRAINED = built_ins(baseline=False)  # the architectures the table has cells for, in report-row order

# --- sources: the files that made each headline number (official-code.md section 1; `SOURCE_NOTES` says more) --
_G3 = "experiments/jlens/train_dense_checkpoints.py (the production recipe)"
_G3_MODEL = "experiments/jlens/models.py:SepVocabTinyGPT (the production model)"
_G3_DATA = "experiments/jlens/train_mlp_control.py:sample_batch + the G3 scripts' F.cross_entropy over all logits"
_G3_EVAL = "experiments/jlens/train_mlp_control.py:eval_entropy_mae (n=512, seed 7)"
_BIJ_LSTM = "experiments/jlens/train_lstm_seeds.py (the working LSTM retrain)"
_BIJ_LSTM_MODEL = "experiments/paper1_bijection/train_lstm.py:LSTMBijection"
_BIJ_MAMBA = "experiments/paper1_bijection/train_mamba.py (its hyperparameters)"
_BIJ_MAMBA_MODEL = "experiments/paper1_bijection/train_mamba.py:MambaBijection + MambaBlock"
_BIJ_MLP = "experiments/jlens/train_mlp_control.py (the G3 recipe)"
_BIJ_MLP_MODEL = "experiments/jlens/models.py:MLPControl"
_HMM_TF = "experiments/paper1_hmm/train.py (--epochs 50, as REPRODUCE.md runs it)"
_HMM_TF_MODEL = "src/models/gpt_mini.py:GPTMini"
_HMM_MAMBA = "experiments/paper1_hmm/train_mamba.py (its defaults: 30 epochs)"
_HMM_MAMBA_MODEL = "experiments/paper1_hmm/train_mamba.py:MambaHMM + MambaBlock"
_HMM_LSTM = "experiments/paper1_hmm/train_lstm.py (its defaults: 30 epochs)"
_HMM_LSTM_MODEL = "experiments/paper1_hmm/train_lstm.py:LSTMHMM"
_HMM_FIGURES = "experiments/paper1_hmm/figures/hmm_figures_better_colors.py (the checkpoints the HMM figures load)"

# What a short source above cannot say (docs/paper-settings.md prints these under the tables).
SOURCE_NOTES = (
    "Bijection transformer: 0.007 bits is logs/bijection_v20_repl, made by the unreleased train_v256_ddp.py family; "
    "experiments/jlens/train_dense_checkpoints.py retrains it with 'the same architecture, data distribution and "
    "hyperparameters'. configs/bijection_v20.yaml (beta2 0.95, batch 128, 100k steps, G1) is read by no script "
    "(official-code.md section 12.1).",
    "Bijection LSTM: 0.009 bits is logs/lstm_bijection_seed7777, an LSTMBijection; train_lstm.py's own constant-lr "
    "loop crashes before step 1 (section 12.7), so the recipe is that of train_lstm_seeds.py, the working retrain "
    "(which trains LSTMLens, its unrolled twin, untied and without dropout; the model entries follow LSTMBijection).",
    "Bijection Mamba: train_mamba.py's released loop crashes before step 1, so the loop behind "
    "logs/mamba_bijection_v20_* is unreleased and its hyperparameters are the best record. Its CosineAnnealingLR "
    "steps after each update: update s runs at cos(pi (s-1)/T), ours at cos(pi s/T).",
    "HMM transformer: 50 epochs x 157 batches of 64 over its 10,000 sequences in one process (under torchrun each "
    "GPU takes fewer steps of a larger global batch). The first commit's `--max_steps 150000` is rejected by its "
    "argparse (section 12.10).",
    "HMM Mamba and LSTM: the scripts default to 30 epochs (23,460 steps); REPRODUCE.md's command says --epochs 50.",
    "The authors' bijection models allocate 2L = 38 position rows; ours allocate the 37 a sequence uses (the 38th is "
    "never read).",
)
_RECALL_GEN = "src/data/associative_recall.py (generator defaults; the repo has no recall trainer)"
_NO_TRAINER = "no published trainer or budget for this task"
_NO_MODEL = "the authors publish no model of this architecture for this task"

# --- forms: how a cell is built or trained where no config field says it, theirs and ours --------------------------
_RMS_FORM = "pre-norm RMSNorm (eps 1e-5), attention without biases, MLP with biases, GELU, no dropout"
_GPTMINI_FORM = (
    "pre-LN LayerNorm, biases everywhere (attention projections too), GELU, dropout 0.1 on attention, MLP, residual "
    "branches and embeddings (nn.TransformerEncoderLayer)"
)
_GPTMINI_INIT = (
    "N(0, 0.02) on every Linear and Embedding weight, zero biases, no residual-projection scaling; the attention "
    "in_proj keeps xavier-uniform"
)
_NORMAL_INIT = (
    "N(0, 0.02) on every Linear and Embedding weight, zero biases, residual output projections "
    "N(0, 0.02/sqrt(2 n_layers))"
)
_TORCH_INIT = "PyTorch's default init of every module"
_LOSS_2V = "2V-way: cross-entropy over all 2V tied token logits at each key position (key-token logits pushed down)"
_LOSS_V = "V-way: cross-entropy over the V value logits at each key position"
_LOSS_VOCAB = "cross-entropy over every token logit of the tied head at each scored position"
_SOFT_CE = "soft-target cross-entropy against the exact filtered posterior at every observation"
_SOFT_CE_POSTERIOR = "soft-target cross-entropy against the exact posterior at each scored position"
_FRESH = "fresh sequences every step"
_FINAL = "the final weights"
_STOPS = "a non-finite loss or gradient stops the run"
_SKIPS = "a batch with a NaN loss is skipped and training goes on"

# The authors' optimiser in every script: torch.optim.AdamW(model.parameters(), lr, weight_decay), float32.
_ADAMW = {"optimizer": "adamw", "betas": (0.9, 0.999), "weight_decay_on": "all", "dtype": "float32"}
# The production bijection recipe (G3) and the HMM transformer's (experiments/paper1_hmm/train.py).
_G3_RECIPE = {
    "steps": 50_000,
    "batch_size": 256,
    "lr": 3e-4,
    "warmup_steps": 2000,
    "schedule": "cosine",
    "weight_decay": 0.1,
    "grad_clip": 1.0,
}
_HMM_RECIPE = {
    "steps": 7_850,
    "batch_size": 64,
    "lr": 3e-4,
    "warmup_steps": 0,
    "schedule": "cosine",
    "weight_decay": 0.01,
    "grad_clip": 1.0,
}

# The 30-epoch HMM Mamba and LSTM scripts: the HMM transformer's batch and weight decay, 23,460 steps at a constant lr.
_HMM_EPOCHS = {**_HMM_RECIPE, "steps": 23_460, "schedule": "constant"}
# Both Mamba scripts: "lower LR for stability", "tighter clipping", weight decay 0.01.
_MAMBA_RECIPE = {"lr": 1e-4, "grad_clip": 0.5, "weight_decay": 0.01}
# The authors' MambaBlock (ours: variant="paper"), d_inner 2d, N 16, kernel 4, PyTorch's default init.
_MAMBA_BLOCK = {"variant": "paper", "d_state": 16, "expand": 2, "d_conv": 4, "init": "torch"}


def _recipe(where: str, kind: Any = _code, **train: Any) -> dict[str, Sourced]:
    """`train.*` of a recipe run with `torch.optim.AdamW(model.parameters(), ...)` at its default betas (every
    parameter decays), in float32 (no AMP), plus `train`; every value tagged with `where`."""
    return {f"train.{k}": kind(v, where) for k, v in {**_ADAMW, **train}.items()}


def _model(where: str, kind: Any = _code, **size: Any) -> dict[str, Sourced]:
    """`model.*` size fields (the paper tier sets them in `model.size`), tagged with `where`."""
    return {f"model.{k}": kind(v, where) for k, v in size.items()}


def _forms(where: str, **forms: str) -> dict[str, Sourced]:
    """`form.*`: how the authors' code builds or trains a cell where no config field says it (compared with
    `our_forms`)."""
    return {f"form.{k}": _code(v, where) for k, v in forms.items()}


def _ours_train(why: str, recipe: dict[str, Any], **changes: Any) -> dict[str, Sourced]:
    return _recipe(why, _ours, **{**recipe, **changes})


_BIJ_FORMS = {"loss": _LOSS_2V, "data": _FRESH}  # every G3-format bijection model: the 2V-way tied loss, fresh data
_BIJ_EVAL = {"eval.n": _code(512, _G3_EVAL)}

PAPER_SETTINGS: dict[str, dict[str, dict[str, Sourced]]] = {
    "bijection": {
        "*": {"task.V": _paper(20, "§1.1 (V = 20 values)"), "task.L": _paper(19, "§1.1 (L = 19 revealed keys)")},
        "transformer": {
            **_recipe(_G3, **_G3_RECIPE),
            **_model(
                "§2.1; authors' code experiments/jlens/models.py:SepVocabTinyGPT",
                _paper,
                n_layers=6,
                n_heads=6,
                d_model=192,
                d_ff=768,
                pos="learned",
            ),
            **_model(_G3_MODEL, tie=True, init="torch"),
            **_forms(_G3_MODEL, model=_RMS_FORM),
            **_forms(_G3_DATA, **_BIJ_FORMS),
            **_forms(_G3, checkpoint=_FINAL),
            **_BIJ_EVAL,
        },
        "mamba": {
            **_recipe(_BIJ_MAMBA, **{**_G3_RECIPE, **_MAMBA_RECIPE, "warmup_steps": 0}),
            **_model(_BIJ_MAMBA_MODEL, **_MAMBA_BLOCK, n_layers=6, d_model=192, pos="learned", tie=True),
            **_forms(_BIJ_MAMBA, **_BIJ_FORMS, checkpoint=_FINAL, nonfinite=_SKIPS),
            **_BIJ_EVAL,
        },
        "lstm": {
            **_recipe(_BIJ_LSTM, **_G3_RECIPE),
            **_model(_BIJ_LSTM_MODEL, n_layers=6, d_model=192, pos="learned", tie=True, dropout=0.1, init="torch"),
            **_forms(_BIJ_LSTM, **_BIJ_FORMS, checkpoint=_FINAL),
            **_BIJ_EVAL,
        },
        "mlp": _ours_train(_NO_MODEL + " (the prefix MLP is ours); the bijection transformer's recipe", _G3_RECIPE),
        "mlp-pointwise": {
            **_recipe(_BIJ_MLP, **_G3_RECIPE),
            **_model(_BIJ_MLP_MODEL, n_layers=9, d_model=192, ratio=4, tie=True, init="torch"),
            **_forms(_BIJ_MLP, **_BIJ_FORMS, checkpoint=_FINAL),
            **_BIJ_EVAL,
        },
    },
    "hmm": {
        "*": {
            "task.S": _paper(5, "§1.2 (5 hidden states)"),
            "task.O": _paper(5, "§1.2 (5 observation symbols)"),
            "task.K": _paper(20, "§1.2 (K = 20 observations; tested at 30 and 50)"),
        },
        "transformer": {
            **_recipe(_HMM_TF, **_HMM_RECIPE),
            **_model(_HMM_TF_MODEL, n_layers=9, n_heads=8, d_model=256, d_ff=1024, pos="learned", init="normal"),
            **_forms(_HMM_TF_MODEL, model=_GPTMINI_FORM, init=_GPTMINI_INIT),
            **_forms(
                _HMM_TF,
                loss=_SOFT_CE,
                data="10,000 pre-generated sequences (seed 42), 50 epochs",
                checkpoint="the best validation loss of the 50 epochs (best_model.pt, 1,000 validation sequences; "
                "the one the HMM figure scripts load)",
            ),
        },
        "mamba": {
            **_recipe(_HMM_MAMBA, **{**_HMM_EPOCHS, **_MAMBA_RECIPE}),
            **_model(_HMM_MAMBA_MODEL, **_MAMBA_BLOCK, n_layers=9, d_model=256, pos="none"),
            **_forms(_HMM_MAMBA, loss=_SOFT_CE, data="50,000 pre-generated sequences (seed 42), 30 epochs"),
            **_forms(_HMM_FIGURES, checkpoint=_FINAL),
            **_forms(_HMM_MAMBA, nonfinite=_SKIPS),
        },
        "lstm": {
            **_recipe(_HMM_LSTM, **_HMM_EPOCHS),
            **_model(_HMM_LSTM_MODEL, n_layers=9, d_model=256, pos="none", dropout=0.1, init="torch"),
            **_forms(_HMM_LSTM, loss=_SOFT_CE, data="50,000 pre-generated sequences (seed 42), 30 epochs"),
            **_forms(_HMM_FIGURES, checkpoint=_FINAL),
        },
        **{
            arch: _ours_train(_NO_MODEL + "; the HMM transformer's recipe", _HMM_RECIPE)
            for arch in _TRAINED
            if info(arch).follows == "transformer"
        },
    },
    "recall": {
        "*": {
            **_each(_RECALL_GEN, task__N=64, task__key_vocab=256, task__value_vocab=256, task__n_filler=32, task__M=3),
            "task.score_at": _code("slot", _RECALL_GEN + ": the target sits on the answer slot after the key"),
        },
        **{
            arch: _ours_train(
                _NO_TRAINER + "; the bijection transformer's recipe",
                _G3_RECIPE,
                batch_size=64,
                **({"lr": 1e-4} if arch == "mamba" else {}),
            )
            for arch in _TRAINED
        },
    },
    "regression": {
        "*": {
            "task.d": _ours(4, "the paper publishes no regression parameters"),
            "task.n": _ours(24, "the paper publishes no regression parameters"),
        },
        **{
            arch: _ours_train(
                _NO_TRAINER + "; the bijection transformer's recipe",
                _G3_RECIPE,
                **({"lr": 1e-4} if arch == "mamba" else {}),
            )
            for arch in _TRAINED
        },
    },
}

# The sticky HMM is ours (the paper has no such tunnel): the paper HMM's S, O and K, our stickiness and grid, and in
# every architecture's cell the authors' HMM code (recipe, model form, loss), applied unchanged to it.
_STICKY = "a tunnel the paper does not have: a sticky chain needs belief carried about 14 observations back"
PAPER_SETTINGS["hmm-sticky"] = {
    "*": {
        **PAPER_SETTINGS["hmm"]["*"],
        "task.stickiness": _ours((0.85, 0.95), _STICKY),
        "task.min_prob": _ours(0.01, "a 0.05 floor caps the diagonal at 0.80 with 5 states, below rho"),
    },
    **{arch: entries for arch, entries in PAPER_SETTINGS["hmm"].items() if arch != "*"},
}

# What our code does where the table has `form.*` entries (not configurable; `deviations` lists each difference).
_OUR_LOSS = {"bijection": _LOSS_V, "hmm": _SOFT_CE, "hmm-sticky": _SOFT_CE}


def our_loss_form(task: str, loss: str = "auto", params: dict[str, Any] | None = None) -> str | None:
    """What our training loss is for `task` under `train.loss` = `loss` (with task parameters `params`), in the
    table's words: `ce_vocab` on the sep-vocab bijection is the authors' 2V-way tied loss (on the paired format, whose
    V tokens are the values, it is the V-way one); None for a task the table states no loss form for."""
    if loss in ("posterior", "soft_ce") and task in ("bijection", "recall"):
        return _SOFT_CE_POSTERIOR
    if loss == "ce_vocab":
        if task == "bijection":
            return _LOSS_2V if (params or {}).get("format", "sep-vocab") == "sep-vocab" else _LOSS_V
        return _LOSS_VOCAB
    return _OUR_LOSS.get(task)


def our_forms(
    task: str, arch: str, size: dict[str, Any], loss: str = "auto", params: dict[str, Any] | None = None
) -> dict[str, str]:
    """Our fixed `form.*` for a cell of `task` x `arch` whose resolved model size is `size` (a model_dump), trained
    with `train.loss` = `loss` on task parameters `params` (`our_loss_form`)."""
    forms = {"form.data": _FRESH, "form.checkpoint": _FINAL, "form.nonfinite": _STOPS}
    loss_form = our_loss_form(task, loss, params)
    if loss_form is not None:
        forms["form.loss"] = loss_form
    if arch == "transformer":
        forms["form.model"] = _RMS_FORM
        forms["form.init"] = _NORMAL_INIT if size.get("init") == "normal" else _TORCH_INIT
    return forms


# The paper's reported numbers (v3 architecture x primitive table, arXiv 2512.22471 v3).
_V3 = "v3 Table (architecture x primitive), as quoted by a secondary reading [MC]"
PAPER_RESULTS: dict[str, dict[str, Sourced]] = {
    "transformer": {"bijection": _paper(0.007, _V3), "hmm": _paper(0.049, _V3), "recall": _paper(1.0, _V3)},
    "mamba": {"bijection": _paper(0.010, _V3), "hmm": _paper(0.024, _V3), "recall": _paper(0.978, _V3)},
    "lstm": {"bijection": _paper(0.009, _V3), "hmm": _paper(0.411, _V3), "recall": _paper(0.005, _V3)},
    "mlp": {"bijection": _paper(1.85, _V3), "hmm": _paper(0.40, "v3+ HMM table as quoted by a third party [BEDH]")},
}


def paper_setting(task: str, arch: str) -> dict[str, Sourced]:
    """The sourced settings of one cell: the task's shared entries, then the architecture's ({} if unknown)."""
    per_task = PAPER_SETTINGS.get(task, {})
    return {**per_task.get("*", {}), **per_task.get(arch, {})}


def values(entries: dict[str, Sourced], prefix: str) -> dict[str, Any]:
    """`{key without prefix: value}` of the entries under `prefix` (e.g. "train.", "task.", "model.")."""
    return {k[len(prefix) :]: v.value for k, v in entries.items() if k.startswith(prefix)}


def paper_result(arch: str, task: str) -> Sourced | None:
    """The paper's reported number for a Table 1 cell, or None where the paper reports none."""
    return PAPER_RESULTS.get(arch, {}).get(task)


def settings_markdown() -> str:
    """The sourced tables as Markdown (docs/paper-settings.md is this text; a test keeps them equal)."""
    lines = [
        "# The paper's and the authors' settings, with sources",
        "",
        "Generated from `windtunnel.suites.settings` (`python -m windtunnel.suites.settings > "
        "docs/paper-settings.md`). The `paper` tier is built from these values; every other tier's departures "
        "from them (and the paper tier's own, where our code cannot match theirs) are listed in its report's "
        "Deviations section with the source named. `model.*` are size fields, `train.*` and `eval.*` config fields, "
        "`form.*` what the authors' code does where we have no config field (compared with what ours does). "
        'Sources: "paper" = the paper\'s text or table (arXiv 2512.22471), "authors\' code" = a file of '
        'vishalmisra/bayesian-wind-tunnel (named in the source column), "our choice" = nothing '
        "was published.",
        "",
    ]
    for task, per_arch in PAPER_SETTINGS.items():
        lines += [f"## {task}", "", "| architecture | setting | value | source |", "|---|---|---|---|"]
        for arch, entries in per_arch.items():
            for key, v in entries.items():
                lines.append(f"| {'all' if arch == '*' else arch} | `{key}` | {v.value} | {v.source} |")
        lines.append("")
    lines += [
        '## Reported results (Table 1\'s "paper" numbers)',
        "",
        "| architecture | task | value | source |",
        "|---|---|---|---|",
    ]
    for arch, cells in PAPER_RESULTS.items():
        for task, v in cells.items():
            lines.append(f"| {arch} | {task} | {v.value} | {v.source} |")
    lines += ["", "## Notes on the sources", "", *(f"- {note}" for note in SOURCE_NOTES)]
    lines += [
        "",
        "Numbers the paper does not report (the context-blind floor, chance levels) are never printed as "
        "the paper's: the report computes them from the task as reference levels.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(settings_markdown(), end="")
