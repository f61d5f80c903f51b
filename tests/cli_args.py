"""Command-line arguments shared by the CLI tests: a tiny smoke training run on the CPU."""

SMOKE = [
    "--preset",
    "smoke",
    "--steps",
    "2",
    "--no-progress",
    "--set",
    "task.V=5",
    "--set",
    "task.L=4",
    "--set",
    "train.batch_size=4",
    "--set",
    "eval.n=8",
    "--set",
    "train.device=cpu",
]
