"""Data seeds: three disjoint streams, one scheme for training, evaluation and the geometry probes.

Every batch any part of the toolkit samples comes from `task.sample(n, seed=...)` with a seed from here, so a
sequence is a training, validation or test sequence by its seed alone and no stage can read another's data.
"""

from __future__ import annotations

# Three disjoint data streams in the 32 bits a torch CPU generator keeps of a seed:
#   training    [0, 2^31)            train_seed(seed, step): a fresh batch per step, shifted per run seed
#   validation  [2^31, 2^31 + 2^30)  val_seed(seed, index): training-time evaluation, checkpoint choice, tuning
#   test        [2^31 + 2^30, 2^32)  test_seed(index): the reported numbers and the geometry probes; the same
#                                    sequences for every run seed and architecture (paired comparisons), and
#                                    nothing else reads them
TRAIN_RANGE = (0, 2**31)
VALIDATION_RANGE = (2**31, 2**31 + 2**30)
TEST_RANGE = (2**31 + 2**30, 2**32)
STREAMS = ("validation", "test")


def train_seed(seed: int, step: int) -> int:
    """Data seed of training step `step` of a run with seed `seed`: in TRAIN_RANGE."""
    return (_mix32(seed) + step) % 2**31


def val_seed(seed: int, index: int) -> int:
    """Data seed of validation chunk `index` of a run with seed `seed`: in VALIDATION_RANGE."""
    return VALIDATION_RANGE[0] + (_mix32(seed) + index) % 2**30


def test_seed(index: int) -> int:
    """Data seed of test chunk `index`, the same for every run: in TEST_RANGE."""
    return TEST_RANGE[0] + int(index) % 2**30


test_seed.__test__ = False  # type: ignore[attr-defined]  # a library function, not a pytest test


# Held-out sequences per draw: a stream's n sequences are drawn as blocks of this many (the last one shorter), block i
# with stream_seed(stream, seed, i), whatever the forward batch size (`evaluate._blocks`), so `eval --batch-size`
# changes no sequence. It is eval.batch_size's default, which drew chunks of this size: a run evaluated at the default
# batch size draws exactly the sequences it drew before the two were separated.
DRAW_BLOCK = 250


def stream_seed(stream: str, seed: int, index: int) -> int:
    """Data seed of chunk `index` of the "validation" or "test" stream."""
    if stream == "validation":
        return val_seed(seed, index)
    if stream == "test":
        return test_seed(index)
    raise ValueError(f"stream: must be one of {', '.join(STREAMS)} (got {stream!r})")


def _mix32(x: int) -> int:
    """A fixed 32-bit hash of the run seed (splitmix-style), so nearby seeds start far apart."""
    z = (x * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return (z ^ (z >> 31)) % 2**32


__all__ = [
    "DRAW_BLOCK",
    "STREAMS",
    "TEST_RANGE",
    "TRAIN_RANGE",
    "VALIDATION_RANGE",
    "stream_seed",
    "test_seed",
    "train_seed",
    "val_seed",
]
