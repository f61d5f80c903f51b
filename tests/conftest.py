"""Test-wide settings: one intra-op thread (tiny models run faster, and parallel test workers don't fight)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
