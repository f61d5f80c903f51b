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
import difflib
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, overload

import torch

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

# TransformerLens' short activation names (`utils.get_act_name`) -> windtunnel's per-layer points, where they exist
TL_SHORT_NAMES = {
    **{name: name for name in ("resid_pre", "resid_mid", "resid_post")},
    **{name: f"attn.{name}" for name in ("q", "k", "v", "pattern", "z")},
    "attn_out": "attn.out",
    "mlp_out": "mlp.out",
}


def _close_names(name: str, valid: Iterable[str]) -> list[str]:
    """Hook points like `name`: its TransformerLens spelling translated first (blocks.0.hook_attn_out ->
    blocks.0.attn.out), then the nearest by spelling; for error messages."""
    valid = list(valid)
    tl = name.replace("hook_", "").replace("attn_out", "attn.out").replace("mlp_out", "mlp.out")
    tl = "final" if tl == "ln_final.normalized" else tl
    first = [tl] if tl in valid and tl != name else []
    return first + [n for n in difflib.get_close_matches(name, valid, n=3) if n not in first]


def _did_you_mean(name: str, valid: Iterable[str]) -> str:
    """' (did you mean a, b?)' listing the points close to `name`, or '' when none is."""
    close = _close_names(name, valid)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _from_end(index: object, size: int, what: str, error: type[Exception]) -> int:
    """`index` in 0..size-1, a negative one counted from the end (-1: the last); `error` naming `what` otherwise."""
    if isinstance(index, bool) or not isinstance(index, int) or not -size <= index < size:
        raise error(f"{what}: layer must be an integer in 0..{size - 1}, or -{size}..-1 from the end (got {index!r})")
    return index % size


class ActivationCache(dict[str, torch.Tensor]):
    """{hook name: activation} from `run_with_cache`: a dict (in forward order) that knows the model's layers, for
    `stack` (one point over the layers), `decompose_resid` (the residual stream as a sum of block outputs),
    `accumulated_resid` (the stream at each layer) and TransformerLens' `cache[short_name, layer]` keys."""

    def __init__(self, cache: Mapping[str, torch.Tensor], model: HookedModel) -> None:
        super().__init__(cache)
        self.n_layers = model.n_layers
        self.layer_points = ("resid_pre", *model.layer_hooks, "resid_post")  # names inside blocks.{l}.
        self.resid_parts = model.resid_parts
        self.model_name = type(model).__name__
        self.hook_names = model.hook_names  # every point of the model: what a missing key could have been

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        """cache[name], or TransformerLens' cache[short_name, layer] for blocks.{layer}.{point} (see `key_of`)."""
        return super().__getitem__(self.key_of(key) if isinstance(key, tuple) else key)

    def __missing__(self, key: str) -> torch.Tensor:
        """KeyError saying why `key` is absent: a point of the model that was not cached, or no point at all."""
        if key in self.hook_names:
            raise KeyError(f"{key!r}: not in the cache; ask run_with_cache for it (names_filter=...)")
        raise KeyError(
            f"{key!r}: no hook point of {self.model_name}{_did_you_mean(str(key), self.hook_names)}; "
            "cache.keys() lists what was cached (docs/hooks.md)"
        )

    def key_of(self, key: tuple[str, int]) -> str:
        """The hook name of TransformerLens' (short name, layer) key: `blocks.{layer}.{point}`, where the point is
        windtunnel's per-layer name or TL's (q, pattern, attn_out, mlp_out ...), and a negative layer counts from
        the end; KeyError naming the valid names or layers."""
        what = f"cache[{', '.join(map(repr, key))}]"
        if len(key) != 2 or not isinstance(key[0], str):
            raise KeyError(f"{what}: expected (name, layer), e.g. cache['resid_post', 0] (no TL layer type needed)")
        short, layer = key
        point = TL_SHORT_NAMES.get(short, short)
        if point not in self.layer_points:
            aliases = [tl for tl, name in TL_SHORT_NAMES.items() if name in self.layer_points and tl != name]
            raise KeyError(
                f"{what}: {short!r} is no per-layer point of {self.model_name}; those are "
                f"{', '.join(self.layer_points)}" + (f" (TL's {', '.join(aliases)} too)" if aliases else "")
            )
        l = _from_end(layer, self.n_layers, f"{what} on {self.model_name} ({self.n_layers} layers)", KeyError)
        return f"blocks.{l}.{point}"

    def __repr__(self) -> str:  # names and shapes: the dict's own repr would print every tensor
        shapes = ", ".join(f"{name}: {tuple(x.shape)}" for name, x in self.items())
        return f"ActivationCache({self.model_name}, {{{shapes}}})"

    def stack(self, point: str) -> torch.Tensor:
        """`blocks.{l}.{point}` of every layer l stacked on a new first dim: (n_layers, *shape of one layer's)."""
        if point not in self.layer_points:
            raise ValueError(
                f"stack({point!r}): not a per-layer point of {self.model_name}, so there is nothing to stack over "
                f"layers; per-layer points (named without blocks.{{l}}.) are {', '.join(self.layer_points)}"
            )
        if not self.n_layers:
            raise ValueError(f"stack({point!r}): {self.model_name} has no layers")
        names = [f"blocks.{l}.{point}" for l in range(self.n_layers)]
        self._require(names, f"stack({point!r})")
        return torch.stack([self[name] for name in names])

    def decompose_resid(self, layer: int | None = None) -> tuple[torch.Tensor, list[str]]:
        """The residual stream entering layer `layer` (None: leaving the last one, what the final norm reads) as
        the sum of what wrote it: parts (n_parts,B,T,d) and their names [embed, blocks.0.<resid_parts>, ...].

        It holds as cached: a hook that replaces the stream itself (a patched resid_*, `ablate(parts="block")`)
        breaks the sum.
        """
        if not self.resid_parts:
            raise ValueError(
                f"decompose_resid: {self.model_name}'s layers replace the residual stream rather than add to it "
                "(no resid_parts), so it is no sum of block outputs"
            )
        upto = self.n_layers if layer is None else check_int("layer", layer, 0, self.n_layers)
        names = ["embed", *(f"blocks.{l}.{part}" for l in range(upto) for part in self.resid_parts)]
        self._require(names, "decompose_resid")
        return torch.stack([self[name] for name in names]), names  # (n_parts,B,T,d)

    @overload
    def accumulated_resid(
        self,
        layer: int | None = None,
        *,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: int | slice | None = None,
        mlp_input: bool = False,
        return_labels: Literal[False] = False,
    ) -> torch.Tensor: ...

    @overload
    def accumulated_resid(
        self,
        layer: int | None = None,
        *,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: int | slice | None = None,
        mlp_input: bool = False,
        return_labels: Literal[True],
    ) -> tuple[torch.Tensor, list[str]]: ...

    def accumulated_resid(
        self,
        layer: int | None = None,
        *,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: int | slice | None = None,
        mlp_input: bool = False,
        return_labels: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """TransformerLens' accumulated residual stream: resid_pre of layers 0..layer-1 and the stream entering
        `layer` (its resid_pre; layer = n_layers, -1 or None: the last layer's resid_post, labelled final_post),
        stacked as (n_components,B,T,d), or (n_components,B,d) with an int `pos_slice`.

        `incl_mid` adds resid_mid of the layers before `layer`, `mlp_input` that of `layer` itself (what its MLP
        reads); labels, with `return_labels`, are TL's: 0_pre, 0_mid, ..., final_post.
        """
        what = f"accumulated_resid on {self.model_name}"
        if apply_ln:
            raise ValueError(
                f"{what}: apply_ln=True needs the norm scales TL caches (ln*.hook_scale), which windtunnel does not; "
                "apply model.norm to the result yourself (each stream then gets its own scale)"
            )
        if (incl_mid or mlp_input) and "resid_mid" not in self.layer_points:
            raise ValueError(f"{what}: incl_mid / mlp_input need resid_mid, a transformer point; it has none")
        if pos_slice is not None and not isinstance(pos_slice, int | slice):
            raise ValueError(f"{what}: pos_slice must be an int or a slice of positions (got {pos_slice!r})")
        n = self.n_layers
        if not n:
            raise ValueError(f"{what}: it has no layers, so no residual stream between them")
        span = f"{what} ({n} layers; layer {n} is the final stream)"
        upto = n if layer is None else _from_end(layer, n + 1, span, ValueError)  # the layer whose input ends the stack
        keys: list[tuple[str, int]] = []  # (point, layer) in TL's order
        labels: list[str] = []
        for l in range(upto + 1):
            if l == n:
                keys.append(("resid_post", n - 1))
                labels.append("final_post")
                break
            keys.append(("resid_pre", l))
            labels.append(f"{l}_pre")
            if (incl_mid and l < upto) or (mlp_input and l == upto):
                keys.append(("resid_mid", l))
                labels.append(f"{l}_mid")
        names = [self.key_of(key) for key in keys]
        self._require(names, "accumulated_resid")
        where = slice(None) if pos_slice is None else pos_slice  # positions, dim 1 of each (B,T,d) stream
        resid = torch.stack([self[name][:, where] for name in names])  # (n_components,B,T,d), or (n,B,d) for an int
        return (resid, labels) if return_labels else resid

    def _require(self, names: list[str], what: str) -> None:
        """ValueError naming what `what` needs that was not cached, and how to ask for it."""
        missing = [name for name in names if name not in self]
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise ValueError(f"{what}: {shown} not in the cache; ask run_with_cache for them (names_filter=...)")


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
    "TL_SHORT_NAMES",
    "ActivationCache",
    "FwdHooks",
    "HookFn",
    "HookPoint",
    "HookSpec",
    "HookedModel",
    "LayerHook",
    "NamesFilter",
]
