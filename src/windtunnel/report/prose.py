"""The report's prose: the title and the paragraphs that say what each section of report.md shows (build.py places
them). A `string.Template`'s `$name`s are filled in by the section that uses it; every other text is used as is."""

from __future__ import annotations

from string import Template

TITLE = "windtunnel report: is each architecture doing exact Bayesian inference?"

# The at-a-glance grid, under its heading.
GLANCE = (
    "Each cell: its mark and its headline number (the mean over training seeds; entropy error in bits, or accuracy); "
    "click a cell for its interval, seeds and why it is not one level higher."
)

# In view above Table 1, its definitions (TABLE1) folded away under it.
TABLE1_SUMMARY = (
    "Each cell: the mark, the mean over training seeds [its 95% interval], KL, the range of the seed means, how many "
    "seeds are ✓ on their own and the time to verdict (definitions and the marking rule: open)."
)

# Under a table where an interval end lies beyond its metric's range; `$mark` is `formatting.BEYOND_RANGE`.
BEYOND_RANGE = Template(
    "$mark beyond the metric's range (below 0 bits, or past 100%): the Student-t interval over training seeds is "
    "printed as the seeds give it, never clipped; an end past the range says too few seeds, or seeds too far apart, "
    "to bound the value on that side."
)

# The section of each tunnel's forest plot and its cells in detail; FOREST_CAPTION's `$task` is the tunnel.
TUNNELS = (
    "Per tunnel, every cell of Table 1 (its seeds pooled, as the mark is) as a dot coloured by its mark with its 95% "
    "interval, against the ✓ and ◐ thresholds (dashed) and the context-blind floor (dotted), and a row per cell: "
    "the at-a-glance grid links here."
)
FOREST_CAPTION = Template(
    "$task: each cell's mean and 95% interval (seeds pooled), headline metric and KL(exact ‖ model), against the ✓ "
    "and ◐ thresholds and the context-blind floor; on a log axis an arrow at the left edge is an interval reaching "
    "0 bits or below (‡: below 0, beyond the range)"
)

# Table 1; `$rule` is `marks.rule_text()`.
TABLE1 = Template(
    "Entropy error = mean over test sequences and scored positions of |H_model − H_Bayes| in bits "
    "(differential entropy for real answers); accuracy = argmax accuracy at the scored positions, "
    "for the tunnels whose headline metric it is (where each is scored: Reference levels below). "
    "Each cell: mean over training seeds, its interval in brackets, the range of the seed means "
    "and how many seeds are exact on their own (a cell without them is one training seed, its interval the "
    "bootstrap over test sequences once: evaluation noise only). $rule. The test sequences "
    "(seeds.test_seed) are read by nothing but this evaluation and the geometry probes; "
    "training-time evaluation read a separate validation stream. Paper numbers in parentheses are "
    "only those the paper reports (its v3 table), measured at the paper's budgets, which may differ "
    "from this run's (see Deviations). Last in each cell, its time to verdict: the first periodic "
    "validation-stream evaluation whose verdict (the same rule, at the conservative end of bootstrap "
    "intervals over the validation sequences) is ◐ or better, and the first that is ✓, as the median step "
    "and median training seconds (optimiser steps only) over the seeds that got there, and how many did; "
    "'not within N steps' where none did in the N steps trained; 'no validation curve' where the runs "
    "logged no periodic evaluation, and 'validation curve without verdicts' where they logged it before "
    "verdicts were (point metrics alone cannot give the conservative verdict). A run with train.early_stop = n "
    "stopped at its n-th "
    "consecutive ✓ validation verdict, its learning-rate schedule cut there (a finished run: its steps in "
    "What was run)."
)

# The listings under Table 1: each lead is followed by its items joined by "; " and a full stop.
# `$mark` is `table_cells.STATUS_MARK`.
MARKED_RUNS_LEAD = Template(
    "$mark Not the finished run of its config, and never pooled with it: a run stopped before its "
    "last step (unfinished), extended by a resume that changed the learning rates it had trained at (extended), "
    "or whose config.json was edited since it trained (edited) is a row of its own; a run resumed with changed "
    "keys that change no weight (resumed) is marked where it is pooled. Each run, and why: "
)
MIXED_LEAD = (
    "Warning: these runs are of more than one configuration, so they are separate cells (rows labelled by the keys "
    "that differ), never pooled as seeds: "
)
DISAGREEMENTS_LEAD = "Where this run and the paper's number fall on different levels: "
BELOW_FLOOR_LEAD = (
    "On the wrong side of a tunnel's failure floor, an optimisation failure at this budget rather than evidence "
    "about the architecture: "
)
REFERENCE_LEVELS_LEAD = "Reference levels and scoring (derived from the tasks, not reported by the paper): "

LENGTH_GENERALISATION = (
    "Trained at the default length, evaluated at longer ones (mean over all scored positions "
    "of each task's headline metric: entropy error in bits, or accuracy)."
)

# A tunnel's capacity table; `$metric` is the headline metric's title, `$what` and `$param` the tunnel's `capacity`.
CAPACITY_TITLE = Template("$task capacity: $metric against the number of $what")
CAPACITY = Template(
    "Mean $metric over seeds at each number of $what $param evaluated (trained at one "
    "$param; the others evaluated without retraining: smaller values use only trained positions, larger ones "
    "also positions never trained), and the largest $param at which each architecture is exact or "
    "approximate: how far its memory reaches."
)

# In view above the approximations tables; APPROXIMATIONS folded away under it.
APPROXIMATIONS_SUMMARY = (
    "Per run: the posterior it is closest to, its belief horizon, and its gain in bits over each approximate "
    "posterior (> 0: measurably closer to the exact posterior than that approximation; what each column is: open)."
)
APPROXIMATIONS_CAPTION = Template("$task: windows 'last w obs' in order of w.")

# Followed by each present tunnel's `approximations_note`.
APPROXIMATIONS = (
    "Per run: the posterior it is closest to (smallest KL(posterior ‖ model); 'not separated' where a paired "
    "bootstrap interval of the KL margin reaches zero; 'none' where it is not measurably better than the "
    "context-blind reference; in Table 1's pooled cells, 'too few seeds to separate' where the interval is a "
    "Student-t one over fewer than three seeds, and 'seeds disagree: k of n measurably better than "
    "context-blind' where some seeds are on their own and the pooled cell is not), its belief horizon (the "
    "largest w such that it is measurably closer to the exact "
    "posterior than every window filter of at most w observations), and its gain over each approximation, "
    "KL(exact ‖ approximation) − KL(exact ‖ model) in bits with a paired 95% bootstrap interval over test "
    "sequences. The last row is each approximation's own entropy error and KL against the exact posterior. "
)

# Followed by CONTROLS_PASSED, or CONTROLS_FAILED with the flagged predictors joined by "; " and a full stop.
CONTROLS = (
    "Each tunnel's controls match the exact posterior's entropy (or predictive variance) without doing "
    "the inference (e.g. uniform over a fixed set of as many values as are still possible, the exact "
    "posterior with its classes renamed, another sequence's posterior, the prior mean with the exact "
    "variance), and each approximate posterior is scored as a predictor of its own. They are marked by the "
    "same rule as every model, on the same test sequences. "
)
CONTROLS_PASSED = "None of the controls earns ✓ or ◐, and no approximation earns ✓."
CONTROLS_FAILED = "RULE FAILURE: these earned a mark they must not: "

TIME_TO_BAYES = (
    "Training seconds (optimiser steps only: no evaluation, checkpoints or probes) until the validation-stream "
    "headline metric first reached each mark, read from each run's periodic evaluations: median over seeds "
    "[range] @ median step, and how many seeds reached it (— = none within the budget). Runs trained in "
    "parallel share the machine, so seconds are comparable within one tier run, not across machines."
)

GEOMETRY = (
    "Headline number of each probe (definitions in docs/geometry.md). Key orthogonality, "
    "two statistics of the answer (value) tokens' layer-0 keys, which are not the authors' token set "
    "(their qkv_analysis.py keyed tokens 0..V−1, the key tokens: both sets are in Geometry across "
    "seeds below): ours = mean |off-diagonal cosine| of "
    "RMSNorm(E)·W_K (0 = orthogonal), beside the same model at init and i.i.d. Gaussian keys; "
    "the authors' = signed mean off-diagonal cosine of the raw E·W_K (their qkv_analysis.py), "
    "beside init and Gaussian keys (mean ± spread). 'L0 keys in training' says how training "
    "moved each statistic from init. Lens KL is given in both directions, first (embedding) → "
    "last layer: KL(Bayes‖lens) (ours) and KL(lens‖Bayes), the authors' direction, with the "
    "Bayes posterior floored at 1e-12 as theirs was. Memory: how far the belief moves (KL, bits) when "
    "one observation 1 or J lags back is resampled, beside the exact filter's move under the same edits. "
    "Paper: layer-0 key cosine 0.052 vs 0.082 "
    "random; attention entropy drop 85–90%; PC1 84–90%; Mamba five clusters, entropy R² 0.40 "
    "(Mamba) vs 0.004 (LSTM)."
)

GEOMETRY_ACROSS_SEEDS = (
    "Every probed seed of each cell (docs/geometry.md): mean over seeds [Student-t 95% interval, ≥ 2 "
    "seeds, taken where the statistic's range maps to the real line (Fisher z for correlations, logit for "
    "shares) and mapped back; a correlation with PC1 as |r|, its sign being the PC's], the same probe on "
    "the model at init and a baseline (for entropy statistics the context-blind reference: position and "
    "current input, at their best). Within position: the entropy statistics position cannot fake, 'not "
    "measurable' where the entropy does not vary within a position. Keys: layer 0, on the key tokens "
    "0..V−1 (the authors' qkv_analysis.py set) and on the value tokens (the set of the per-run table "
    "above). Manifold: value vectors (the last layer's W_V on its residual input) and the final "
    "representation, at the value positions (the authors' geometric_analysis.py) and at the scored "
    "positions, beside Gaussian points of the same count and dimension. Attention: at unrevealed keys, "
    "the mass on the revealed values (an exact eliminator reads only those: mass 1, spread evenly). Memory: "
    "every seed's value with their median and range, never a mean (seeds can differ by orders of magnitude), "
    "the move's share of the exact filter's beside the same share for the shortest window filter that reads "
    "that lag (which scores about 1 without being exact)."
)

WHAT_WAS_RUN = (
    "Status is that of the run's default evaluation (eval.json's record; † as under Table 1), steps those its "
    "weights trained for, of those its config trains where fewer. The last column is the validation-stream "
    "headline metric at the last two periodic evaluations: a run still improving there stopped on its budget, "
    "not on a plateau."
)
NO_RUN_METADATA = "run metadata not recorded"
NO_DEVIATIONS = "none recorded (runs made outside `windtunnel reproduce`; see each run's config.json)"
