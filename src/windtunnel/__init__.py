"""windtunnel: Bayesian wind tunnels for sequence models (arXiv 2512.22471)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("windtunnel")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
