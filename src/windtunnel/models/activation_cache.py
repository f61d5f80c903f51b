"""`ActivationCache`, what `HookedModel.run_with_cache` returns: a dict of activations by hook name that knows the
model's layers (stack a point over layers, the residual stream as a sum of block outputs or accumulated layer by
layer, TransformerLens' (short name, layer) keys)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal, overload

import torch

from windtunnel.models.common import check_int

if TYPE_CHECKING:
    from windtunnel.models.hooks import HookedModel

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


__all__ = ["TL_SHORT_NAMES", "ActivationCache"]
