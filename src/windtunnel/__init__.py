"""windtunnel: Bayesian wind tunnels for sequence models (arXiv 2512.22471)."""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the type checker sees save_run itself; at run time it is imported on first use
    from windtunnel.runs import save_run

try:
    __version__ = version("windtunnel")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__", "save_run"]


def __getattr__(name: str) -> Any:
    """`windtunnel.save_run` (runs.save_run), imported on first use: `import windtunnel` stays light."""
    if name == "save_run":
        from windtunnel.runs import save_run

        return save_run
    raise AttributeError(f"module 'windtunnel' has no attribute {name!r}")
