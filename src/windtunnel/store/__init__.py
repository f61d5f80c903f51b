"""Run directories on disk, and nothing above them: file names, atomic writes and checked reads (`rundir`), the typed
record of every file (`records`), a driver's manifest, reuse and set-aside (`manifest`), one writer per directory
(`lock`). No torch, no marks, no config resolution: what a number means lives above."""
