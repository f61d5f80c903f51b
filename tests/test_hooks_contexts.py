"""Hook contexts as a careless user meets them: a replacement of the wrong dtype, contexts left out of order, and a
forward pass on another thread while hooks are on."""

from __future__ import annotations

import threading

import pytest
import torch

from hook_models import build, inputs


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_a_replacement_of_another_dtype_is_an_error_naming_the_hook(dtype):
    model = build("transformer")
    x = inputs(model)
    with pytest.raises(ValueError, match=rf"hook 'blocks\.0\.resid_post': .*dtype torch\.float32 \(got {dtype}\)"):
        model.run_with_hooks(x, {"blocks.0.resid_post": lambda a, name: a.to(dtype)})
    with pytest.raises(ValueError, match=r"hook 'final': must return None or a tensor \(got list\)"):
        model.run_with_hooks(x, {"final": lambda a, name: [1.0]})
    assert model._active is None  # the failed pass left nothing switched on


def test_contexts_left_in_any_order_remove_exactly_their_own_hooks():
    model = build("transformer")
    x = inputs(model)
    with torch.no_grad():
        base = model(x)
        plus_one = model.run_with_hooks(x, {"embed": lambda a, name: a + 1})
        times_two = model.run_with_hooks(x, {"embed": lambda a, name: a * 2})
        outer = model.hooks({"embed": lambda a, name: a + 1})
        inner = model.hooks({"embed": lambda a, name: a * 2})
        outer.__enter__()
        inner.__enter__()
        outer.__exit__(None, None, None)  # the outer context first: only the inner hook stays
        torch.testing.assert_close(model(x), times_two)
        inner.__exit__(None, None, None)
        assert model._active is None and torch.equal(model(x), base)

        first, second = model.hooks({"embed": lambda a, name: a + 1}), model.ablate(layers={0})
        first.__enter__()
        second.__enter__()
        second.__exit__(None, None, None)  # and in order
        torch.testing.assert_close(model(x), plus_one)
        first.__exit__(None, None, None)
        assert model._active is None and torch.equal(model(x), base)


def test_hooks_are_per_thread():
    """A forward pass on another thread, of the same model, while this thread's hooks are on, is the plain pass;
    and that thread's own hooks do not reach this one."""
    model = build("transformer")
    x = inputs(model)
    seen: dict[str, object] = {}
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with torch.no_grad():
            seen["plain"] = model(x)
            with model.hooks({"final": lambda a, name: torch.zeros_like(a)}):
                entered.set()
                release.wait(30)
                seen["own"] = model(x)

    with torch.no_grad():
        base = model(x)
        with model.hooks({"embed": lambda a, name: a + 1}):
            worker = threading.Thread(target=other)
            worker.start()
            assert entered.wait(30)
            hooked = model(x)  # the other thread's zeroing hook is not this thread's
            release.set()
            worker.join(30)
        assert torch.equal(seen["plain"], base)  # this thread's hook did not patch the other thread's pass
        assert torch.equal(seen["own"], model.run_with_hooks(x, {"final": lambda a, name: torch.zeros_like(a)}))
        torch.testing.assert_close(hooked, model.run_with_hooks(x, {"embed": lambda a, name: a + 1}))
        assert not torch.equal(hooked, base)
    assert model._active is None and model._hook_users == 0
