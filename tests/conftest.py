"""Test-wide settings: one intra-op thread (tiny models run faster on a shared 2-core machine; thread pools
spinning against each other made them ~20x slower there)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run only where CUDA is available (never in CI); elsewhere they are reported as skipped."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
