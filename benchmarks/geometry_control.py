"""Two experiments against the authors' recipe, each one `time_to_bayes.run` call with two arms per task.

`control`: does the paper's geometry appear under the authors' training ingredients and not under ours? The transformer
at the quick size and the time-to-Bayes budget (3,000 steps x 64), arm "authors" (their production cell's init, AdamW
betas, weight decay and what it decays, schedule, clip and warmup fraction, read from `suites.settings`) against arm
"ours" (N(0, 0.02) init, our best recipe for the cell: `OUR_BEST`), >= 2 seeds each, dense checkpoints (the
frame-precision probe) and every geometry probe on every seed. `side-by-side`: time-to-Bayes of the paper tier's
bijection transformer (the authors' recipe at its own size) and our best recipe at that size, to a stated cap; the
ratio of training seconds to 0.02 bits is the headline.

    python benchmarks/geometry_control.py control --out runs/geometry-control                 # bijection, 2 seeds
    python benchmarks/geometry_control.py control --tasks bijection hmm --out runs/geometry-control
    python benchmarks/geometry_control.py side-by-side --out runs/ttb-side-by-side --cap-steps 3000
    ... --publish docs/results/geometry-control          # copy report, JSON and figures there (replaced)

Training, validation marks (0.05 / 0.02 / 0.01 bits), run reuse, --out's lock and manifest are time-to-Bayes's own
(`windtunnel.time_to_bayes`): an interrupted call re-run with the same options resumes, and a finished run is read
back. Each --out gets report.md, its JSON (geometry_control.json or side_by_side.json), figures/ and time-to-Bayes's
files. `--loss-form authors` (the default) trains the authors arm with the authors' loss form (the bijection's 2V-way
cross-entropy over every tied token logit, `train.loss: ce_vocab`) and ours with our V-way loss over the value logits;
`--loss-form v-way` trains both arms with the V-way loss, as the committed results in docs/results/geometry-control
and docs/results/time-to-bayes-side-by-side were measured. The report states the loss form beside every other
difference from their production code (`suites.paper_diff.config_deviations`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from windtunnel.devices import cpu_has_native_bf16, cpu_simd_flags
from windtunnel.evaluation.crossings import EXACT_FILTER, crossings, format_mark, mark_header, summarize_marks
from windtunnel.executors import ExecutorOptions
from windtunnel.geometry.figures import arms_across_seeds, frame_precision_by_arm
from windtunnel.geometry.seeds import across_seeds, dig, seed_text
from windtunnel.report.document import Bullets, Document, Figure, Heading, Paragraph, Table
from windtunnel.resolve import resolve_config
from windtunnel.store import manifest, rundir
from windtunnel.suites.paper import authors_loss, dense_schedule, run_config
from windtunnel.suites.paper_diff import config_deviations
from windtunnel.suites.settings import paper_setting, values
from windtunnel.time_to_bayes import Cell, cell_runs
from windtunnel.time_to_bayes import run as time_to_bayes
from windtunnel.training.recipes import get_recipe

ARCH = "transformer"
ARMS = ("authors", "ours")
MARKS = ("0.05", "0.02", "0.01")  # the marks (time-to-Bayes also records 0.1)
HEADLINE_MARK = "0.02"
# What the authors arm takes from the authors' production cell (suites.settings.PAPER_SETTINGS), by config key.
AUTHORS_TRAIN_KEYS = ("optimizer", "betas", "weight_decay", "weight_decay_on", "schedule", "grad_clip")
AUTHORS_LR = 1e-3
AUTHORS_LR_NOTE = (  # why the authors arm trains at AUTHORS_LR, not at the authors' own lr
    "lr {lr:g} at this budget, AdamW's lr in the time-to-Bayes rows of docs/results/time-to-bayes.md; the authors' "
    "own lr belongs to their much longer runs ({theirs}); --authors-lr sets it"
)
TTB_FILES = ("time_to_bayes.json", "time_to_bayes.md", "time_to_bayes.png")  # what time-to-Bayes writes in --out
# Our best recipe per task for the quick-size transformer (docs/results/time-to-bayes.md: lowest test entropy error
# at 3,000 steps, Muon on the hidden matrices with warmup-stable-decay, bijection batch 64, HMM batch 32).
OUR_BEST: dict[str, dict[str, Any]] = {
    "bijection": {
        "recipe": "muon",
        "lr": 2e-3,
        "source": "docs/results/time-to-bayes.md: muon (2e-3), bijection, batch 64",
    },
    "hmm": {"recipe": "muon", "lr": 1e-3, "source": "docs/results/time-to-bayes.md: muon (1e-3), HMM, batch 32"},
}
OUR_SET = {"model.size.init": "normal", "train.weight_decay": 0.01, "train.weight_decay_on": "matrices"}
# --loss-form: the authors arm's loss. "authors": the authors' loss form (`suites.paper.authors_loss`: the bijection's
# 2V-way tied loss, train.loss ce_vocab); "v-way": the config's own loss (auto: V-way cross-entropy over the value
# logits for the bijection), what the committed results were measured with. The ours arm always trains with auto.
LOSS_FORMS = ("authors", "v-way")
V_WAY = "auto"
_THEIR_LOSS = (
    "Loss form: the authors train the bijection with a 2V-way cross-entropy over all 2V tied token logits (key "
    "tokens included)"
)
LOSS_NOTES = {
    "authors": _THEIR_LOSS + "; the authors arm trains with it (train.loss ce_vocab, --loss-form authors), ours with "
    "our V-way loss over the value logits.",
    "v-way": _THEIR_LOSS + "; with --loss-form v-way both arms train with our V-way loss over the value logits (the "
    "authors arm has their other ingredients, not their loss).",
}
LOSS_NOTE = LOSS_NOTES["authors"]  # the default --loss-form's
FIGURE_CAPTIONS = {
    "geometry": "probe numbers per arm: trained mean with its across-seed interval (filled), own init (hollow), seeds "
    "(dots), baseline (dashed)",
    "frame": "frame-precision: entropy error and layer-0 attention cosine to the final checkpoint, every seed",
    "time_to_bayes": "validation entropy error against training seconds, every seed",
}
GEOMETRY_FIGURE = (  # the `registry.seed_quantities()` drawn in figures/geometry-<task>.png (the table has all)
    "L0 key mean |cos|, key tokens",
    "L0 key mean |cos|, value tokens",
    "authors' L0 signed key cos, key tokens",
    "authors' L0 signed key cos, value tokens",
    "PC1 var, values at value positions",
    "|Spearman(PC1, H)|, values at value positions",
    "participation ratio, values at value positions",
    "PC1 var, final at scored positions",
    "mass on revealed values, first layer (unrevealed keys)",
    "mass on revealed values, last layer (unrevealed keys)",
)


# --- the arms -------------------------------------------------------------------------------------------------------


def authors_recipe(task: str) -> dict[str, Any]:
    """The authors' production settings of the task's transformer (`suites.settings`): every `AUTHORS_TRAIN_KEYS`
    value, their init, lr, steps, batch and warmup steps."""
    sourced = paper_setting(task, ARCH)
    train = values(sourced, "train.")
    return {
        **{k: list(train[k]) if k == "betas" else train[k] for k in AUTHORS_TRAIN_KEYS},
        "init": values(sourced, "model.")["init"],
        **{k: train[k] for k in ("lr", "steps", "batch_size", "warmup_steps")},
    }


def arm_cells(
    task: str,
    *,
    tier: str,
    steps: int,
    batch_size: int,
    seeds: int,
    authors_lr: float,
    eval_every: int,
    eval_size: int,
    dense: bool,
    loss_form: str = "authors",
) -> dict[str, Cell]:
    """The two arms of one task as time-to-Bayes cells at one size and budget: "authors" (their ingredients, warmup
    the same fraction of the steps as theirs, and with `loss_form` "authors" their loss form) and "ours" (`OUR_BEST`
    with `OUR_SET`, the V-way loss); `dense` adds the frame-precision checkpoint schedule
    (`suites.paper.dense_schedule`). A loss the tier's config already has is not set again, so with "v-way" the cells
    are those from before --loss-form existed."""
    theirs = authors_recipe(task)
    extra: dict[str, Any] = {"train.checkpoint_schedule": dense_schedule(steps)} if dense else {}
    common: dict[str, Any] = {"task": task, "arch": ARCH, "tier": tier, "steps": steps, "batch_size": batch_size}
    common |= {"eval_every": eval_every, "eval_size": eval_size, "seeds": seeds}
    authors_set = {f"train.{k}": theirs[k] for k in AUTHORS_TRAIN_KEYS} | {"model.size.init": theirs["init"]}
    authors_set["train.loss"] = arm_loss(task, check_loss_form(loss_form))
    warmup = round(steps * theirs["warmup_steps"] / theirs["steps"])
    best = OUR_BEST[task]
    return {
        "authors": Cell(
            recipe="baseline",
            lr=authors_lr,
            warmup_steps=warmup,
            set=_changes(task, tier, "baseline", authors_set) | extra,
            **common,
        ),
        "ours": Cell(
            recipe=best["recipe"],
            lr=best["lr"],
            set=_changes(task, tier, best["recipe"], OUR_SET | {"train.loss": V_WAY}) | extra,
            **common,
        ),
    }


def check_loss_form(loss_form: str) -> str:
    """`loss_form` if it is one of `LOSS_FORMS`, else a ValueError naming --loss-form."""
    if loss_form not in LOSS_FORMS:
        raise ValueError(f"--loss-form: must be one of {', '.join(LOSS_FORMS)} (got {loss_form!r})")
    return loss_form


def arm_loss(task: str, loss_form: str) -> str:
    """The authors arm's train.loss under `loss_form`: the authors' loss form ("ce_vocab" for the bijection; auto where
    auto is already theirs, as the HMM's soft targets) or, for "v-way", auto."""
    return (authors_loss(task, ARCH) or V_WAY) if loss_form == "authors" else V_WAY


def _changes(task: str, tier: str, recipe: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The `overrides` whose value the tier's config with `recipe` does not already have (so a cell's label names
    only what its arm changes)."""
    cfg = resolve_config(get_recipe(recipe).apply(run_config(task, ARCH, tier))).model_dump(mode="json")
    return {k: v for k, v in overrides.items() if dig(cfg, *k.split(".")) != v}


def arm_settings(cell: Cell) -> dict[str, Any]:
    """What an arm trains with, read from its first seed's resolved config."""
    cfg = cell_runs(cell)[0].resolved
    t = cfg.train
    return {
        "recipe": cell.recipe_name,
        "optimizer": t.optimizer,
        "lr": t.lr,
        "betas": list(t.betas),
        "schedule": t.schedule,
        "warmup_steps": t.warmup_steps,
        "weight_decay": t.weight_decay,
        "weight_decay_on": t.weight_decay_on,
        "grad_clip": t.grad_clip,
        "loss": t.loss,
        "init": cfg.model.size.get("init"),
        "model": {k: v for k, v in cfg.model.size.items() if k != "init"},
        "steps": t.steps,
        "batch_size": t.batch_size,
        "dtype": t.dtype,
        "dense_checkpoints": len(t.checkpoint_schedule or []),
    }


# --- reading what time-to-Bayes and the probes wrote ---------------------------------------------------------------


def _result_cell(data: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """The summary time-to-Bayes stored for `cell` (by its first seed's config hash)."""
    key = manifest.config_hash(cell_runs(cell)[0].resolved)
    return next(c for c in data["cells"] if c.get("key") == key)


def capped_marks(cell: dict[str, Any], cap_seconds: float | None) -> dict[str, Any]:
    """A time-to-Bayes cell's marks, counting only evaluations within `cap_seconds` of training (None: all)."""
    if cap_seconds is None:
        return cell["marks"]
    per_seed = [
        crossings([e for e in s["curve"] if e["train_s"] <= cap_seconds], cell["metric"]) for s in cell["seeds"]
    ]
    return summarize_marks(per_seed)


def seed_geometry(geometry: dict[str, Any]) -> dict[str, Any]:
    """The per-seed probe numbers the comparison reads: key statistics per token set, the value manifold per position
    set, the attention evidence, the frame-precision summary and the logit lens."""
    dyn = geometry.get("dynamics", {})
    return {
        "step": geometry.get("step"),
        "entropy_error_bits": geometry.get("entropy_error_bits"),
        "token_sets": dig(geometry, "keys", "by_token_set"),
        "position_sets": dig(geometry, "manifold", "by_position_set"),
        "attention": {
            "unseen_value_evidence": dig(geometry, "attention", "unseen_value_evidence"),
            "entropy_bits_per_layer": dig(geometry, "attention", "entropy_bits_per_layer"),
            "drop_first_to_last_pct": dig(geometry, "attention", "drop_first_to_last_pct"),
        },
        "dynamics": {k: v for k, v in dyn.items() if k != "paper"} if isinstance(dyn, dict) else dyn,
        "lens_kl_bits_per_layer": dig(geometry, "lens", "kl_bits_per_layer"),
    }


def arm_result(name: str, cell: Cell, ttb: dict[str, Any], out: Path, cap_seconds: float | None) -> dict[str, Any]:
    """One arm of one task: settings, stated differences from the authors' code, time-to-Bayes marks, final test
    numbers, and per seed its marks and (where probed) geometry; `across_seeds` over the probed seeds."""
    stored = _result_cell(ttb, cell)
    seeds, geometries = [], []
    for s in stored["seeds"]:
        path = out / s["run_dir"] / rundir.GEOMETRY
        geometry = rundir.read_json_object(path) if path.is_file() else None
        if geometry is not None:
            geometries.append(geometry)
        seeds.append(
            {
                "seed": s["seed"],
                "run_dir": s["run_dir"],
                "train_s": s["train_s"],
                "crossings": s["crossings"],
                "final_validation": s["final_validation"],
                "test": s["test"],
                "geometry": None if geometry is None else seed_geometry(geometry),
            }
        )
    return {
        "arm": name,
        "label": stored["label"],
        "settings": arm_settings(cell),
        "source": OUR_BEST[cell.task]["source"] if name == "ours" else "suites.settings.PAPER_SETTINGS",
        "stated_differences": config_deviations(cell_runs(cell)[0].config),
        "metric": stored["metric"],
        "marks": capped_marks(stored, cap_seconds),
        "test": stored["test"],
        "seeds": seeds,
        "across_seeds": across_seeds(geometries) if geometries else {},
    }


def machine(ttb: dict[str, Any]) -> dict[str, Any]:
    """time-to-Bayes's machine record plus the CPU's SIMD flags and whether it computes bf16 natively."""
    return {**ttb["machine"], "simd_flags": cpu_simd_flags(), "native_bf16": cpu_has_native_bf16()}


def ratio_text(authors: dict[str, Any], ours: dict[str, Any], trained: dict[str, float]) -> tuple[float | None, str]:
    """(authors' median seconds / ours, as text) at one mark where both arms reached it on every seed; where one arm
    reached it on every seed and the other on none, a bound from the seconds that one trained without reaching it
    (`trained`: arm -> the least training seconds of its seeds); else (None, "—")."""
    every = {name: m["reached"] == m["of"] > 0 for name, m in (("authors", authors), ("ours", ours))}
    if every["authors"] and every["ours"]:
        r = authors["median_s"] / ours["median_s"]
        return r, f"{r:.2f}×"
    if every["ours"] and authors["reached"] == 0:
        return None, f"> {trained['authors'] / ours['median_s']:.2f}× (authors not there within the cap)"
    if every["authors"] and ours["reached"] == 0:
        return None, f"< {authors['median_s'] / trained['ours']:.2f}× (ours not there within the cap)"
    return None, "—"


# --- the two experiments ---------------------------------------------------------------------------------------------


def control(
    out: str | Path,
    *,
    tasks: tuple[str, ...] = ("bijection",),
    steps: int = 3000,
    batch_size: int = 64,
    seeds: int = 2,
    jobs: int = 2,
    threads: int = 1,
    authors_lr: float = AUTHORS_LR,
    eval_every: int = 100,
    eval_size: int = 256,
    tier: str = "quick",
    fresh: bool = False,
    loss_form: str = "authors",
    command: str = "",
    echo: Any = print,
) -> dict[str, Any]:
    """The geometry control: train and probe both arms of every task (`arm_cells`, dense checkpoints; the authors
    arm's loss by `loss_form`), then write report.md, geometry_control.json and figures/ into `out`; returns the
    JSON."""
    out = Path(out)
    check_loss_form(loss_form)
    cells = {
        task: arm_cells(
            task,
            tier=tier,
            steps=steps,
            batch_size=batch_size,
            seeds=seeds,
            authors_lr=authors_lr,
            eval_every=eval_every,
            eval_size=eval_size,
            dense=True,
            loss_form=loss_form,
        )
        for task in tasks
    }
    every = [c for arms in cells.values() for c in arms.values()]
    ttb = time_to_bayes(every, out, ExecutorOptions(jobs=jobs, threads=threads), echo, fresh=fresh, probe=True)
    theirs = {task: authors_recipe(task) for task in tasks}
    their_runs = "; ".join(f"{t}: {r['lr']:g} for {r['steps']:,} steps x {r['batch_size']}" for t, r in theirs.items())
    data = {
        "experiment": "geometry-control",
        "command": command,
        "machine": machine(ttb),
        "wall_s": ttb["wall_s"],
        "marks": list(MARKS),
        "loss_form": LOSS_NOTES[loss_form],
        "authors_lr": AUTHORS_LR_NOTE.format(lr=authors_lr, theirs=their_runs),
        "tasks": {
            task: {name: arm_result(name, cell, ttb, out, None) for name, cell in arms.items()}
            for task, arms in cells.items()
        },
    }
    for task, arms in data["tasks"].items():
        data["tasks"][task] = {"arms": arms, "comparison": comparison(arms)}
    data["figures"] = [str(f.relative_to(out)) for f in control_figures(data, out / "figures")] + _ttb_figure(out)
    rundir.write_json(out / "geometry_control.json", data)
    rundir.atomic_write(out / "report.md", control_markdown(data, out))
    return data


def side_by_side(
    out: str | Path,
    *,
    cap_steps: int = 3000,
    cap_seconds: float | None = None,
    seeds: int = 2,
    jobs: int = 2,
    threads: int = 1,
    tier: str = "paper",
    batch_size: int | None = None,
    authors_lr: float | None = None,
    eval_every: int = 100,
    eval_size: int = 256,
    fresh: bool = False,
    loss_form: str = "authors",
    command: str = "",
    echo: Any = print,
) -> dict[str, Any]:
    """Time-to-Bayes of the bijection transformer at `tier`'s size (the paper tier: the authors' model): the authors'
    recipe (their batch and lr unless given; schedule laid over `cap_steps`; their loss by `loss_form`) and ours,
    `seeds` each, in one call on one machine; marks within `cap_seconds` of training; writes report.md,
    side_by_side.json and figures/."""
    out = Path(out)
    check_loss_form(loss_form)
    theirs = authors_recipe("bijection")
    cells = arm_cells(
        "bijection",
        tier=tier,
        steps=cap_steps,
        batch_size=batch_size or theirs["batch_size"],
        seeds=seeds,
        authors_lr=authors_lr or theirs["lr"],
        eval_every=eval_every,
        eval_size=eval_size,
        dense=False,
        loss_form=loss_form,
    )
    ttb = time_to_bayes(list(cells.values()), out, ExecutorOptions(jobs=jobs, threads=threads), echo, fresh=fresh)
    arms = {name: arm_result(name, cell, ttb, out, cap_seconds) for name, cell in cells.items()}
    trained = {n: min(min(s["train_s"], cap_seconds or s["train_s"]) for s in a["seeds"]) for n, a in arms.items()}
    ratios = {}
    for mark in MARKS:
        value, text = ratio_text(arms["authors"]["marks"][mark], arms["ours"]["marks"][mark], trained)
        ratios[mark] = {"ratio": value, "text": text}
    data = {
        "experiment": "time-to-bayes side by side",
        "command": command,
        "machine": machine(ttb),
        "wall_s": ttb["wall_s"],
        "cap": {"steps": cap_steps, "seconds": cap_seconds},
        "marks": list(MARKS),
        "headline_mark": HEADLINE_MARK,
        "ratio_authors_over_ours": ratios,
        "loss_form": LOSS_NOTES[loss_form],
        "schedule_note": (
            f"The authors' schedule is laid over the {cap_steps:,} capped steps (warmup "
            f"{theirs['warmup_steps'] / theirs['steps']:.0%} of them as their {theirs['warmup_steps']:,} of "
            f"{theirs['steps']:,}, cosine to 0 at the cap): below {theirs['steps']:,} steps that is their recipe's "
            "shape, not their first steps."
        ),
        "arms": arms,
    }
    data["figures"] = _ttb_figure(out)
    rundir.write_json(out / "side_by_side.json", data)
    rundir.atomic_write(out / "report.md", side_by_side_markdown(data, out))
    return data


# --- comparison, figures, Markdown ----------------------------------------------------------------------------------


def comparison(arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """quantity -> {arm: {"trained", "init"} seed summaries, "baseline": {arm: summary}, "baseline_label"}, for every
    `across_seeds` quantity any arm has."""
    names = list(dict.fromkeys(q for a in arms.values() for q in a["across_seeds"]))
    out: dict[str, dict[str, Any]] = {}
    for q in names:
        rows = {name: a["across_seeds"].get(q) for name, a in arms.items()}
        label = next(r["baseline_label"] for r in rows.values() if r)
        out[q] = {
            **{name: {"trained": r["trained"], "init": r["init"]} if r else None for name, r in rows.items()},
            "baseline": {name: r["baseline"] if r else None for name, r in rows.items()},
            "baseline_label": label,
        }
    return out


def _ttb_figure(out: Path) -> list[str]:
    return ["time_to_bayes.png"] if (out / "time_to_bayes.png").is_file() else []


def control_figures(data: dict[str, Any], fig_dir: Path) -> list[Path]:
    """Per task: the figure quantities per arm with intervals, and the frame-precision curves of every seed."""
    written = []
    for task, t in data["tasks"].items():
        rows = []
        for q in GEOMETRY_FIGURE:
            c = t["comparison"].get(q)
            if c:
                arms = {a: c[a] for a in ARMS if c.get(a)}
                baseline = next((b for b in c["baseline"].values() if b), None)
                rows.append((q, arms, baseline))
        if rows:
            written.append(arms_across_seeds(rows, fig_dir / f"geometry-{task}.png"))
        runs = [
            (f"{arm} s{s['seed']}", i, s["geometry"]["dynamics"])
            for i, arm in enumerate(ARMS)
            for s in t["arms"][arm]["seeds"]
            if s["geometry"] and "checkpoints" in (s["geometry"]["dynamics"] or {})
        ]
        if runs:
            written.append(frame_precision_by_arm(runs, fig_dir / f"frame-precision-{task}.png"))
    return written


def header(doc: Document, data: dict[str, Any]) -> None:
    """Command, machine (CPU, SIMD flags, native bf16, torch, threads, runs at once) and dtype."""
    m = data["machine"]
    flags = " ".join(m["simd_flags"]) if m["simd_flags"] is not None else "unknown (no /proc/cpuinfo flags)"
    dtypes = sorted({a["settings"]["dtype"] for a in _arms(data)})
    doc.add(Paragraph(f"Command: `{data['command'] or '(called from Python)'}`"))
    doc.add(
        Paragraph(
            f"Machine: {m['machine']}; device {m['device']}; SIMD flags: {flags}; native bf16: "
            f"{'yes' if m['native_bf16'] else 'no'}; torch {m['torch']}; {m['threads_per_run']} thread(s) per run, "
            f"{m['jobs']} run(s) at once. Dtype: {', '.join(dtypes)} (every run's train.dtype). Driver wall time "
            f"{data['wall_s']:,.0f} s."
        )
    )


def _arms(data: dict[str, Any]) -> list[dict[str, Any]]:
    if "arms" in data:
        return list(data["arms"].values())
    return [a for t in data["tasks"].values() for a in t["arms"].values()]


def settings_table(by_task: dict[str, dict[str, dict[str, Any]]]) -> Table:
    """One row per task and arm: what it trains with and where that recipe comes from."""
    head = "task, arm, recipe, optimiser, lr, schedule (warmup), betas, weight decay, init, model, steps × batch"
    rows = []
    for task, arms in by_task.items():
        for name, a in arms.items():
            s = a["settings"]
            model = ", ".join(f"{k}={v}" for k, v in s["model"].items())
            rows.append(
                [task, name, s["recipe"], s["optimizer"], f"{s['lr']:g}", f"{s['schedule']} ({s['warmup_steps']})"]
                + [str(tuple(s["betas"])), f"{s['weight_decay']:g} on {s['weight_decay_on']}", str(s["init"]), model]
                + [f"{s['steps']:,} × {s['batch_size']}", str(len(a["seeds"])), a["source"]]
            )
    return Table([*head.split(", "), "seeds", "source"], rows)


def marks_table(by_task: dict[str, dict[str, dict[str, Any]]]) -> Table:
    """One row per task and arm: training seconds to each of `MARKS` (and the exact filter, where a task has one)."""
    arms = [a for t in by_task.values() for a in t.values()]
    marks = [m for m in (*MARKS, EXACT_FILTER) if any(m in a["marks"] for a in arms)]
    rows = []
    for task, t in by_task.items():
        for name, a in t.items():
            test = a["test"]
            final = "—" if test is None else f"{test['mean']:.4f} ({test['min']:.4f}–{test['max']:.4f})"
            hits = [format_mark(a["marks"][m]) if m in a["marks"] else "n/a" for m in marks]
            rows.append([task, name, *hits, final])
    metric = arms[0]["metric"]
    return Table(["task", "arm", *(mark_header(m, metric) for m in marks), "final (test)"], rows)


def differences(by_task: dict[str, dict[str, dict[str, Any]]]) -> Bullets:
    """One bullet per task, arm and group: how the arm departs from the authors' production cell, with sources."""
    items = []
    for task, arms in by_task.items():
        for name, a in arms.items():
            items += [f"{task} / {name} / {g}: " + "; ".join(d) for g, d in a["stated_differences"].items() if d]
    return Bullets(items)


def control_markdown(data: dict[str, Any], out: Path) -> str:
    """The control's report: arms, stated differences, time-to-Bayes marks, geometry across seeds, dynamics."""
    doc = Document("Geometry control: the authors' training ingredients against ours")
    header(doc, data)
    by_task = {task: t["arms"] for task, t in data["tasks"].items()}
    doc.add(
        Paragraph(
            "Each task's transformer trains in two arms with the same model, task, budget and data seeds: authors "
            "(the init, optimiser betas, weight decay and what it applies to, schedule, clip and warmup fraction of "
            "the authors' production cell of that task, from suites.settings, and with --loss-form authors their "
            "loss form) and ours (N(0, 0.02) init, our best recipe for the cell, our loss: V-way for the bijection). "
            "Every seed is probed at its final checkpoint; intervals are Student-t 95% over seeds "
            "(geometry.seeds.across_seeds). Results are as measured; this report draws no verdict."
        )
    )
    doc.add(Heading("Arms"))
    doc.add(settings_table(by_task))
    doc.add(Paragraph(f"Authors arm: {data['authors_lr']}."))
    doc.add(Heading("Stated differences from the authors' production code"))
    doc.add(Paragraph(data["loss_form"]))
    doc.add(differences(by_task))
    doc.add(Heading("Time to Bayes (validation stream)"))
    doc.add(
        Paragraph(
            "Training seconds to first reach each mark, median [range over seeds] @ median step, seeds reaching it; "
            "final = test-stream entropy error, mean (range over seeds)."
        )
    )
    doc.add(marks_table(by_task))
    doc.add(Heading("Geometry across seeds"))
    head = ["quantity", "authors trained", "authors init", "ours trained", "ours init", "baseline"]
    for task, t in data["tasks"].items():
        rows = []
        for q, c in t["comparison"].items():
            cells = [seed_text(c[a][part]) if c.get(a) else "—" for a in ARMS for part in ("trained", "init")]
            base = " / ".join(dict.fromkeys(seed_text(b) for b in c["baseline"].values() if b)) or "—"
            rows.append([q, *cells, f"{c['baseline_label']}: {base}"])
        doc.add(Table(head, rows, caption=f"{task}: mean [95% interval over seeds] of each probe number"))
    doc.add(Heading("Frame–precision dynamics (dense checkpoints)"))
    rows = []
    for task, t in data["tasks"].items():
        for arm in ARMS:
            for s in t["arms"][arm]["seeds"]:
                d = (s["geometry"] or {}).get("dynamics") or {}
                cols = [str(d.get(k, "—")) for k in ("frame_step_90", "frame_step_90_progress", "precision_step_2x")]
                rows.append([task, arm, str(s["seed"]), str(len(d.get("checkpoints", []))), *cols])
    head = ["task", "arm", "seed", "checkpoints", "frame cosine ≥ 0.9 from step", "90% of the way from step"]
    doc.add(Table([*head, "error ≤ 2× final from step"], rows))
    doc.add(Heading("Figures"))
    for name in data["figures"]:
        doc.add(Figure(out / name, FIGURE_CAPTIONS.get(Path(name).stem.split("-")[0], name)))
    return doc.markdown(out)


def side_by_side_markdown(data: dict[str, Any], out: Path) -> str:
    """The side-by-side report: headline ratio, arms, marks within the cap, stated differences."""
    cap = data["cap"]
    cap_text = f"{cap['steps']:,} steps" + (
        f", marks within {cap['seconds']:,g} s of training" if cap["seconds"] else ""
    )
    ratios = data["ratio_authors_over_ours"]
    doc = Document("Time to Bayes side by side: the authors' recipe and ours at the authors' size")
    header(doc, data)
    doc.add(
        Paragraph(
            f"**Headline: training seconds to ≤ {data['headline_mark']} bits, authors / ours = "
            f"{ratios[data['headline_mark']]['text']}** (cap: {cap_text}; validation stream; medians over seeds)."
        )
    )
    doc.add(Table(["mark", "authors / ours"], [[f"≤ {m} bits", ratios[m]["text"]] for m in data["marks"]]))
    doc.add(Heading("Arms"))
    doc.add(settings_table({"bijection": data["arms"]}))
    doc.add(Paragraph(data["schedule_note"]))
    doc.add(Heading("Time to Bayes (validation stream)"))
    doc.add(marks_table({"bijection": data["arms"]}))
    trained = [f"{a['arm']} s{s['seed']}: {s['train_s']:,.1f} s" for a in data["arms"].values() for s in a["seeds"]]
    doc.add(Paragraph("Training seconds per run: " + "; ".join(trained) + "."))
    doc.add(Heading("Stated differences from the authors' production code"))
    doc.add(Paragraph(data["loss_form"]))
    doc.add(differences({"bijection": data["arms"]}))
    for name in data["figures"]:
        doc.add(Figure(out / name, FIGURE_CAPTIONS["time_to_bayes"]))
    return doc.markdown(out)


def publish(out: Path, dest: Path) -> list[Path]:
    """Copy an --out's report, JSON, time-to-Bayes files and figures, every run's geometry.json and seed 0's probe
    figures (as `<task>-<arm>-*.png`) into `dest` (replaced): `publish_tier.publish` with this experiment's files."""
    from publish_tier import publish as publish_dir

    control_json = out / "geometry_control.json"
    names = {}
    if control_json.is_file():
        for task, t in rundir.read_json_object(control_json)["tasks"].items():
            for arm, a in t["arms"].items():
                names.update({Path(s["run_dir"]).name: f"{task}-{arm}" for s in a["seeds"] if s["seed"] == 0})
    top = ("report.md", "geometry_control.json", "side_by_side.json", *TTB_FILES)
    return publish_dir(out, dest, top=top, figures_for=names.get)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="experiment", required=True)
    both = argparse.ArgumentParser(add_help=False)
    both.add_argument("--out", type=Path, required=True)
    both.add_argument("--seeds", type=int, default=2, help="seeds per arm (>= 2 for intervals)")
    both.add_argument("--jobs", type=int, default=2, help="runs at once")
    both.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    both.add_argument("--eval-every", type=int, default=100, help="validation every N steps (the marks' resolution)")
    both.add_argument("--eval-size", type=int, default=256, help="validation sequences per evaluation")
    both.add_argument("--fresh", action="store_true", help="set aside run directories of another config")
    both.add_argument(
        "--loss-form",
        choices=LOSS_FORMS,
        default="authors",
        help="the authors arm's loss: the authors' (2V-way for the bijection) or our V-way loss (ours: always V-way)",
    )
    both.add_argument("--publish", type=Path, help="then copy report, JSON and figures here (replaced)")
    c = sub.add_parser("control", parents=[both], help="the geometry control (quick size, dense checkpoints, probes)")
    c.add_argument("--tasks", nargs="+", default=["bijection"], choices=sorted(OUR_BEST))
    c.add_argument("--steps", type=int, default=3000)
    c.add_argument("--batch", type=int, default=64)
    c.add_argument("--authors-lr", type=float, default=AUTHORS_LR)
    c.add_argument("--tier", default="quick", choices=("quick", "smoke"), help="sizes (smoke: a seconds-long check)")
    s = sub.add_parser("side-by-side", parents=[both], help="time-to-Bayes at the authors' size, both recipes")
    s.add_argument("--cap-steps", type=int, default=3000, help="training steps of every run (the schedules end there)")
    s.add_argument("--cap-seconds", type=float, help="count marks only within this many seconds of training")
    s.add_argument("--batch", type=int, help="batch size (default: the authors' 256)")
    s.add_argument("--authors-lr", type=float, help="(default: the authors' 3e-4)")
    s.add_argument("--tier", default="paper", choices=("paper", "smoke"), help="sizes (smoke: a seconds-long check)")
    args = parser.parse_args()
    opts = {
        "seeds": args.seeds,
        "jobs": args.jobs,
        "threads": args.threads,
        "eval_every": args.eval_every,
        "eval_size": args.eval_size,
        "tier": args.tier,
        "fresh": args.fresh,
        "loss_form": args.loss_form,
        "authors_lr": args.authors_lr,
        "command": shlex.join(["python", *sys.argv]),
    }
    if args.experiment == "control":
        control(args.out, tasks=tuple(args.tasks), steps=args.steps, batch_size=args.batch, **opts)
    else:
        side_by_side(args.out, cap_steps=args.cap_steps, cap_seconds=args.cap_seconds, batch_size=args.batch, **opts)
    print((args.out / "report.md").read_text())
    if args.publish:
        print(f"{len(publish(args.out, args.publish))} files/folders -> {args.publish}")


if __name__ == "__main__":
    main()
