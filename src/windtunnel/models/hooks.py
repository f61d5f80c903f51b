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

    out, cache = model.run_with_cache(x, names_filter=["blocks.0.attn.pattern", "final"])   # only what is asked
    cache.stack("resid_post")                   # (n_layers,B,T,d): one point over every layer
    parts, labels = cache.decompose_resid()     # (n_parts,B,T,d): embed + what each block added; sums to the stream
    cache["resid_post", -1]                     # TransformerLens' (short name, layer) key: blocks.{L-1}.resid_post
    resid, labels = cache.accumulated_resid(return_labels=True)  # (n_layers+1,B,T,d): resid_pre of each, final post
    out = model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.z", fn), (lambda name: "mlp" in name, probe)])
    with model.hooks({"blocks.1.resid_pre": lambda x, hook: x + steer}):                   # replace an activation
        out = model(x)

`names_filter` (TransformerLens' name; `names` is the same argument) is a list of names, one name, or a function
name -> bool; the pass runs without autograd unless `grad=True`. The cache is an `ActivationCache`, a dict.
A hook function gets (activation, hook) and returns a tensor of the same shape, dtype and device to replace it, or
None to leave it (anything else is a ValueError naming the hook). `hook` is a `HookPoint`: a str, the name, with
`.name` and `.layer()` as in TransformerLens, so `fn(x, name)` and `fn(x, hook)` both work unchanged. Hooks belong
to the thread that entered them: a forward pass on another thread, of the same model, sees none of them. Each
`hooks()` context removes exactly the functions it added when it exits, whatever the order its contexts exit in.
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

from windtunnel.models.activation_cache import ActivationCache, _did_you_mean
from windtunnel.models.common import check_choice, check_int

_LAYER_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


class HookPoint(str):
    """The name of a hook point as a hook function gets it: a plain `str` for `fn(activation, name)`, with
    TransformerLens' `.name` and `.layer()` for `fn(activation, hook)`, so both forms work without inspecting fn."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The hook point's name, e.g. "blocks.0.attn.pattern"."""
        return str(self)

    def layer(self) -> int:
        """l of a `blocks.{l}.*` point; ValueError for embed and final, which belong to no layer."""
        m = _LAYER_NAME.match(self)
        if m is None:
            raise ValueError(f"hook {self.name!r}: not a per-layer point (blocks.{{l}}.*), so it has no layer")
        return int(m.group(1))


HookFn = Callable[[torch.Tensor, HookPoint], "torch.Tensor | None"]
LayerHook = Callable[[str, torch.Tensor], torch.Tensor]  # (name inside blocks.{l}., x) -> x, from `layer_hook(l)`
NamesFilter = str | Iterable[str] | Callable[[str], bool]  # which points `run_with_cache` keeps (None: all)
HookSpec = str | Callable[[str], bool]  # a fwd_hooks name: one hook point, or a predicate name -> bool (as in TL)
FwdHooks = Mapping[str, HookFn] | Iterable[tuple[HookSpec, HookFn]]  # {name: fn} or TransformerLens' [(name, fn)]


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
    `self.wants(name)` tells it whether an activation that costs extra to compute is asked for. `resid_parts` names
    the points a layer adds to the stream (resid_post = resid_pre + their sum), for `ActivationCache.decompose_resid`.
    """

    n_layers: int
    n_heads: int = 0  # attention heads per layer (0: no attention)
    layer_hooks: tuple[str, ...] = ()  # names inside blocks.{l}. beyond resid_pre / resid_post
    resid_parts: tuple[str, ...] = ()  # layer points that add up to resid_post - resid_pre (): the layer replaces it
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
        fns = active.fns.get(name)
        if fns:
            point = HookPoint(name)
            for fn in fns:
                new = fn(x, point)
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
                    f"layer {m.group(1)} is out of range (n_layers = {self.n_layers}) on {type(self).__name__}"
                    if m and f"blocks.0.{m.group(2)}" in valid
                    else f"no such point on {type(self).__name__}" + _did_you_mean(name, self.hook_names)
                )
                local = ", ".join(("resid_pre", *self.layer_hooks, "resid_post"))
                raise ValueError(
                    f"hook {name!r}: {where}; hook points are embed, "
                    f"blocks.{{l}}.{{{local}}} for l < {self.n_layers}, and final (docs/hooks.md)"
                )
        return names

    # ------------------------------------------------------------------ using them

    @contextlib.contextmanager
    def hooks(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """`with model.hooks({name: fn}):` every forward pass inside calls fn(activation, hook) at that point.

        Contexts nest: an inner hook on the same point runs after the outer one, on its result. The hooks are this
        thread's only, and leaving a context removes exactly its own hooks, in whatever order contexts are left.
        """
        self.check_hook_names(fns)
        for name, fn in fns.items():
            if not callable(fn):
                raise ValueError(f"hook {name!r}: expected a function (activation, hook) -> tensor or None")
        with self._pushed(entry=dict(fns)):
            yield

    def run_with_cache(
        self,
        inputs: torch.Tensor,
        names: NamesFilter | None = None,
        *,
        names_filter: NamesFilter | None = None,
        grad: bool = False,
    ) -> tuple[torch.Tensor, ActivationCache]:
        """(output, cache) with the points `names_filter` selects (default: all), under any active hooks.

        `names_filter` (or `names`, its older spelling; not both): a list of names, one name, or a function
        name -> bool. The pass runs under torch.no_grad() (output and cache carry no graph) unless `grad=True`.
        Only what is asked is computed: Mamba's recurrent state h (B,T,Di,N per layer, the largest activation)
        and the attention weights cost memory and the slow paths, so ask for them by name when a probe needs them.
        """
        if names is not None and names_filter is not None:
            raise ValueError("run_with_cache: give names_filter or names (two spellings of one argument), not both")
        request = _Active(keep=frozenset(self.select_hook_names(names_filter if names is None else names)))
        with self._pushed(cache=request), contextlib.nullcontext() if grad else torch.no_grad():
            out = self(inputs)
        return out, ActivationCache(request.cache, self)

    def select_hook_names(self, names_filter: NamesFilter | None) -> list[str]:
        """The hook points a `names_filter` selects, in forward order for a function; unknown names are a
        ValueError (`check_hook_names`)."""
        if names_filter is None:
            return list(self.hook_names)
        if isinstance(names_filter, str):
            return self.check_hook_names([names_filter])
        if callable(names_filter):
            return [name for name in self.hook_names if names_filter(name)]
        if not isinstance(names_filter, Iterable):
            raise ValueError(
                "names_filter: expected hook names (a list), one name, or a function name -> bool "
                f"(got {type(names_filter).__name__})"
            )
        return self.check_hook_names(names_filter)

    def run_with_hooks(
        self,
        inputs: torch.Tensor,
        fns: FwdHooks | None = None,
        *,
        fwd_hooks: FwdHooks | None = None,
        bwd_hooks: Iterable[object] = (),
        reset_hooks_end: bool = True,
    ) -> torch.Tensor:
        """One forward pass with hooks active, removed after it (also when it raises): `hooks()` for one call.

        `fwd_hooks` (TransformerLens' name; `fns`, positional, is the same argument) is {name: fn} or TL's
        [(name, fn), ...], where a name may be a predicate name -> bool; pairs on one point run in list order,
        each on the result of the one before. TL's bwd_hooks and reset_hooks_end=False are ValueErrors saying why.
        """
        if fns is not None and fwd_hooks is not None:
            raise ValueError("run_with_hooks: give fwd_hooks or fns (two spellings of one argument), not both")
        if list(bwd_hooks):
            raise ValueError(
                "run_with_hooks: bwd_hooks are not supported (hook points are forward-only); take gradients with "
                "run_with_cache(x, grad=True) and torch.autograd.grad on the cached activation"
            )
        if not reset_hooks_end:
            raise ValueError(
                "run_with_hooks: reset_hooks_end=False is not supported (hooks belong to one call); keep hooks "
                "across passes with `with model.hooks({name: fn}):`"
            )
        with contextlib.ExitStack() as stack:
            for entry in self._hook_entries(fns if fwd_hooks is None else fwd_hooks):
                stack.enter_context(self.hooks(entry))
            return self(inputs)

    def _hook_entries(self, fwd_hooks: FwdHooks | None) -> list[dict[str, HookFn]]:
        """`hooks()` entries for fwd_hooks, one per (name or predicate, fn) pair, in order; a predicate that
        selects no point is a ValueError (TL's names, e.g. hook_z, select none here)."""
        if fwd_hooks is None:
            return []
        pairs = list(fwd_hooks.items() if isinstance(fwd_hooks, Mapping) else fwd_hooks)
        entries: list[dict[str, HookFn]] = []
        fn: HookFn  # each pair's function; hooks() checks that it is callable
        for pair in pairs:
            if not (
                isinstance(pair, tuple | list) and len(pair) == 2 and (isinstance(pair[0], str) or callable(pair[0]))
            ):
                raise ValueError(f"fwd_hooks: expected (name or name -> bool, fn) pairs or {{name: fn}} (got {pair!r})")
            spec, fn = pair
            names = self.select_hook_names(spec)
            if not names:
                raise ValueError(
                    f"fwd_hooks: the filter {getattr(spec, '__name__', spec)!r} selects no hook point of "
                    f"{type(self).__name__} (points are named like blocks.0.attn.z, not TL's hook_z; docs/hooks.md)"
                )
            entries.append(dict.fromkeys(names, fn))
        return entries

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


__all__ = [
    "FwdHooks",
    "HookFn",
    "HookPoint",
    "HookSpec",
    "HookedModel",
    "LayerHook",
    "NamesFilter",
]
