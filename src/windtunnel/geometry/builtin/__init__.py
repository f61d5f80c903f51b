"""The built-in geometry probes, one file each: each module's `PROBE` (geometry/registry.py registers them, in its
`BUILTIN` order). The maths of each lives in its geometry module (keys.py, attention.py, ...) and its drawings in
geometry/figures.py; a probe's file says what the package does with it."""
