"""Four architectures behind one protocol (see `windtunnel.models.base`)."""

# Built-in architectures register themselves on import.
from windtunnel.models import baselines, lstm, mamba, mlp, transformer  # noqa: E402, F401, I001
from windtunnel.models.base import InitSize, ModelSize, ResidualModel, SequenceModel, predictive
from windtunnel.models.registry import check, is_import_string, make, names, register, resolve, size_class

__all__ = [
    "InitSize",
    "ModelSize",
    "ResidualModel",
    "SequenceModel",
    "check",
    "is_import_string",
    "make",
    "names",
    "predictive",
    "register",
    "resolve",
    "size_class",
]
