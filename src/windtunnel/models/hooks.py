"""Named hook points: read, cache or replace any activation of a model without editing its code.

Every architecture calls `self.hook(name, x)` at the same named places (docs/hooks.md lists them with shapes):

    embed                                   (B,T,d)   the input embedding (+ positions)
    blocks.{l}.resid_pre / resid_post       (B,T,d)   the residual stream entering / leaving layer l
    blocks.{l}.resid_mid                    (B,T,d)   transformer: after attention, before the MLP
    blocks.{l}.attn.q|k|v|z                 (B,H,T,dh) transformer: queries, keys (after rotary), values, per-head
                                                      outputs (pattern @ v)
    blocks.{l}.attn.pattern                 (B,H,T,T) transformer: attention weights
    blocks.{l}.attn.out / mlp.out           (B,T,d)   what attention / the MLP adds to the residual stream
    blocks.{l}.ssm.delta|B|C|h|y|out        Mamba: step sizes (B,T,Di), input/readout projections (B,T,N), the
                                                      state (B,T,Di,N), the readout C h (B,T,Di), the block output
    blocks.{l}.lstm.h|c                     (B,T,d)   LSTM: hidden and cell states of layer l
    final                                   (B,T,d)   after the final norm: what the head reads

    out, cache = model.run_with_cache(x, names=["blocks.0.attn.pattern", "final"])   # only what is asked
    with model.hooks({"blocks.1.resid_pre": lambda x, name: x + steer}):            # replace an activation
        out = model(x)

A hook function gets (activation, name) and returns a tensor of the same shape, dtype and device to replace it, or
None to leave it (anything else is a ValueError naming the hook). Hooks belong to the thread that entered them: a
forward pass on another thread, of the same model, sees none of them. Each `hooks()` context removes exactly the
functions it added when it exits, whatever the order its contexts exit in.
What is not asked is not computed: Mamba keeps its fused scan unless `ssm.h` of that layer is asked, and the
transformer materialises attention weights only where `attn.pattern` is asked (or its attention mode is explicit).
Replacing a recurrent state (`ssm.h`, `lstm.h`, `lstm.c`) replaces the recorded sequence of states that the layer
reads out from; it does not re-run the recurrence from the patched step.
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from windtunnel.models.common import check_choice, check_int

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
LayerHook = Callable[[str, torch.Tensor], torch.Tensor]  # (name inside blocks.{l}., x) -> x, from `layer_hook(l)`

_LAYER_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


@dataclass
class _Active:
    """What the hooks of one model do right now: functions per name, and the names whose values are kept."""

    fns: dict[str, list[HookFn]] = field(default_factory=dict)
    keep: frozenset[str] = frozenset()
    cache: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class _Stack:
    """One thread's hook state for one model: the live `hooks()` entries (in entry order) and `run_with_cache`
    requests (innermost last); `active` is what they add up to (None: nothing)."""

    entries: list[dict[str, HookFn]] = field(default_factory=list)
    caches: list[_Active] = field(default_factory=list)
    active: _Active | None = None

    def rebuild(self) -> None:
        fns: dict[str, list[HookFn]] = {}
        for entry in self.entries:
            for name, fn in entry.items():
                fns.setdefault(name, []).append(fn)
        if self.caches:
            cache = self.caches[-1]
            cache.fns = fns
            self.active = cache
        else:
            self.active = _Active(fns=fns) if fns else None


class _PerThread(threading.local):
    """Hook state per thread, per model (weakly keyed: a model that is gone takes its state with it)."""

    def __init__(self) -> None:
        self.models: weakref.WeakKeyDictionary[HookedModel, _Stack] = weakref.WeakKeyDictionary()


_THREADS = _PerThread()
_USERS_LOCK = threading.Lock()  # guards HookedModel._hook_users, the count of threads with hooks on a model


class HookedModel:
    """Mixin: named hook points (`hook`), `hooks()`, `run_with_cache()`, `run_with_hooks()` and `ablate()`.

    An architecture sets `n_layers`, lists its per-layer names in `layer_hooks` and calls `self.hook(name, x)`;
    `self.wants(name)` tells it whether an activation that costs extra to compute is asked for.
    """

    n_layers: int
    n_heads: int = 0  # attention heads per layer (0: no attention)
    layer_hooks: tuple[str, ...] = ()  # names inside blocks.{l}. beyond resid_pre / resid_post
    _hook_users: int = 0  # threads with hooks or a cache on this model now (0: the plain forward pass)

    if TYPE_CHECKING:  # the mixin is always combined with an nn.Module, whose __call__ runs forward

        def __call__(self, inputs: torch.Tensor) -> torch.Tensor: ...

    # ------------------------------------------------------------------ this thread's state

    @property
    def _active(self) -> _Active | None:
        """What this thread's hooks and cache request do on this model (None: nothing)."""
        if not self._hook_users:  # the plain forward pass: one attribute read
            return None
        stack = _THREADS.models.get(self)
        return stack.active if stack is not None else None

    @contextlib.contextmanager
    def _pushed(self, entry: dict[str, HookFn] | None = None, cache: _Active | None = None) -> Iterator[None]:
        """Add a `hooks()` entry or a cache request for this thread; on exit remove exactly that one."""
        models = _THREADS.models  # the entering thread's, even if another thread leaves the context
        stack = models.get(self)
        if stack is None:
            stack = models[self] = _Stack()
            with _USERS_LOCK:
                self._hook_users += 1
        if entry is not None:
            stack.entries.append(entry)
        if cache is not None:
            stack.caches.append(cache)
        stack.rebuild()
        try:
            yield
        finally:
            if entry is not None:
                stack.entries = [e for e in stack.entries if e is not entry]
            if cache is not None:
                stack.caches = [c for c in stack.caches if c is not cache]
            stack.rebuild()
            if not stack.entries and not stack.caches:
                models.pop(self, None)
                with _USERS_LOCK:
                    self._hook_users -= 1

    # ------------------------------------------------------------------ the points

    @property
    def hook_names(self) -> tuple[str, ...]:
        """Every hook point of this model, in forward order."""
        per_layer = ("resid_pre", *self.layer_hooks, "resid_post")
        return ("embed", *(f"blocks.{l}.{n}" for l in range(self.n_layers) for n in per_layer), "final")

    def hook(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """The activation `x` at hook point `name`, after any hook function replaced it (kept if asked)."""
        active = self._active
        if active is None:  # the plain forward pass: one attribute read per point
            return x
        for fn in active.fns.get(name, ()):
            new = fn(x, name)
            if new is not None:
                _check_replacement(name, x, new)
                x = new
        if name in active.keep:
            active.cache[name] = x
        return x

    def layer_hook(self, l: int) -> LayerHook:
        """`hook` for the points of layer l, named without their `blocks.{l}.` prefix."""
        return lambda name, x: self.hook(f"blocks.{l}.{name}", x)

    def wants(self, name: str) -> bool:
        """True when `name` is cached or hooked in the current pass (so a costly activation must be computed)."""
        active = self._active
        return active is not None and (name in active.keep or name in active.fns)

    def check_hook_names(self, names: Iterable[str]) -> list[str]:
        """The names as a list; ValueError for one that is not a hook point of this model, listing the valid ones."""
        names = list(names)
        valid = set(self.hook_names)
        for name in names:
            if name not in valid:
                m = _LAYER_NAME.match(name)
                where = (
                    f"layer {m.group(1)} is out of range (n_layers = {self.n_layers})"
                    if m and f"blocks.0.{m.group(2)}" in valid
                    else "no such point"
                )
                local = ", ".join(("resid_pre", *self.layer_hooks, "resid_post"))
                raise ValueError(
                    f"hook {name!r}: {where} on {type(self).__name__}; hook points are embed, "
                    f"blocks.{{l}}.{{{local}}} for l < {self.n_layers}, and final (docs/hooks.md)"
                )
        return names

    # ------------------------------------------------------------------ using them

    @contextlib.contextmanager
    def hooks(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """`with model.hooks({name: fn}):` every forward pass inside calls fn(activation, name) at that point.

        Contexts nest: an inner hook on the same point runs after the outer one, on its result. The hooks are this
        thread's only, and leaving a context removes exactly its own hooks, in whatever order contexts are left.
        """
        self.check_hook_names(fns)
        for name, fn in fns.items():
            if not callable(fn):
                raise ValueError(f"hook {name!r}: expected a function (activation, name) -> tensor or None")
        with self._pushed(entry=dict(fns)):
            yield

    def run_with_cache(
        self, inputs: torch.Tensor, names: Iterable[str] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(output, {name: activation}) for the asked `names` (default: every hook point), under any active hooks.

        Only what is asked is computed: Mamba's recurrent state h (B,T,Di,N per layer, the largest activation)
        and the attention weights cost memory and the slow paths, so ask for them by name when a probe needs them.
        """
        keep = frozenset(self.check_hook_names(self.hook_names if names is None else names))
        request = _Active(keep=keep)
        with self._pushed(cache=request):
            out = self(inputs)
        return out, dict(request.cache)

    def run_with_hooks(self, inputs: torch.Tensor, fns: Mapping[str, HookFn]) -> torch.Tensor:
        """One forward pass with `fns` active (`hooks()` for a single call)."""
        with self.hooks(fns):
            return self(inputs)

    # ------------------------------------------------------------------ ablation, as hooks

    @property
    def ablation_parts(self) -> tuple[str, ...]:
        """What `ablate(parts=...)` can switch off: 'block' always, 'attn' and 'mlp' where a layer has both."""
        has = set(self.layer_hooks)
        return ("attn", "mlp", "block") if {"attn.out", "mlp.out"} <= has else ("block",)

    @contextlib.contextmanager
    def ablate(
        self, heads: Iterable[tuple[int, int]] = (), layers: Iterable[int] = (), parts: str = "block"
    ) -> Iterator[None]:
        """`with model.ablate(heads={(l, h)}, layers={l}, parts="attn"|"mlp"|"block"):` zeroes components.

        An ablated part adds nothing to the residual stream (`attn.out` / `mlp.out` become zero); an ablated
        'block' makes the layer the identity (resid_post = resid_pre); an ablated head's output `attn.z` is zeroed
        before the output projection.
        """
        check_choice("parts", parts, self.ablation_parts)
        heads = sorted({(int(l), int(h)) for l, h in heads})
        layers = sorted({int(l) for l in layers})
        for l in layers:
            check_int("layers", l, 0, self.n_layers - 1)
        if heads and not self.n_heads:
            raise ValueError(f"heads: {type(self).__name__} has no attention heads to ablate")
        for l, h in heads:
            check_int("heads (layer)", l, 0, self.n_layers - 1)
            check_int("heads (head)", h, 0, self.n_heads - 1)
        fns: dict[str, HookFn] = {}
        for l in {l for l, _ in heads}:
            fns[f"blocks.{l}.attn.z"] = _zero_heads([h for m, h in heads if m == l])
        for l in layers:
            if parts == "block":
                stash: dict[str, torch.Tensor] = {}
                fns[f"blocks.{l}.resid_pre"] = _remember(stash)
                fns[f"blocks.{l}.resid_post"] = _recall(stash)
            else:
                fns[f"blocks.{l}.{parts}.out"] = _zero
        with self.hooks(fns):
            yield


def _check_replacement(name: str, x: torch.Tensor, new: object) -> None:
    """ValueError naming hook `name` unless `new` can stand in for `x`: a tensor of its shape, dtype and device."""
    if not isinstance(new, torch.Tensor):
        raise ValueError(f"hook {name!r}: must return None or a tensor (got {type(new).__name__})")
    for what, want, got in (("shape", tuple(x.shape), tuple(new.shape)), ("dtype", x.dtype, new.dtype)):
        if want != got:
            raise ValueError(f"hook {name!r}: must return None or a tensor of {what} {want} (got {got})")
    if new.device != x.device:
        raise ValueError(f"hook {name!r}: must return a tensor on {x.device} (got one on {new.device})")


def _zero(x: torch.Tensor, name: str) -> torch.Tensor:
    return torch.zeros_like(x)


def _zero_heads(heads: list[int]) -> HookFn:
    def fn(z: torch.Tensor, name: str) -> torch.Tensor:  # z (B,H,T,dh)
        z = z.clone()
        z[:, heads] = 0.0
        return z

    return fn


def _remember(stash: dict[str, torch.Tensor]) -> HookFn:
    def fn(x: torch.Tensor, name: str) -> None:
        stash["x"] = x

    return fn


def _recall(stash: dict[str, torch.Tensor]) -> HookFn:
    def fn(x: torch.Tensor, name: str) -> torch.Tensor:
        return stash["x"]

    return fn


__all__ = ["HookFn", "HookedModel", "LayerHook"]
