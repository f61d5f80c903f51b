"""Mamba (selective state-space model) in PyTorch: its Size, block and model. The scans it runs (fused, parallel,
sequential, mamba-ssm's CUDA kernel where it is installed) are in models/scans.py, the fused scan compiled from C in
models/scan_kernel.py.

`variant="reference"`, `ReferenceMambaBlock`, follows the Mamba paper / state-spaces reference block (mamba-minimal's
structure):
    [u, z] = in_proj(x);  u = SiLU(causal depthwise conv_k(u));  [dt, B, C] = x_proj(u)
    delta = softplus(dt_proj(dt))  (B,T,Di);  A = -exp(A_log)  (Di,N)
    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t u_t   (B,Di,N);  y_t = h_t C_t + D u_t;  out = out_proj(y * SiLU(z))
with the residual h + block(RMSNorm(h)) and a final RMSNorm. The recurrence is linear in h, so training never
builds a per-step autograd graph. `scan="auto"` (default) picks, by the input's device:
  * CPU: `scan="compiled"`, `compiled_selective_scan`: the recurrence in C, compiled at run time, one pass per
    sequence with its state in cache, its backward recomputing the states from checkpoints; where no C compiler
    builds it, `scan="fused"`, `selective_scan`: the same loop over t as PyTorch ops on (B,N,Di) slabs with a
    hand-written reverse-loop backward. Neither materialises the (B,T,Di,N) dA / dBu tensors (CPU training is
    memory-bound; the compiled scan's forward and backward take 0.24-0.46x the fused one's: timings,
    docs/results/mamba-scans.md).
  * CUDA with `mamba_ssm` importable (the `cuda` extra, `pip install -e '.[cuda]'`): `scan="kernel"`,
    `kernel_selective_scan`, the same recurrence (no D, no gate, no softplus inside) by mamba-ssm's fused CUDA kernel
    `selective_scan_fn`, forward and backward; tested equal to the fused CPU scan (tests/test_gpu.py).
  * elsewhere: `scan="parallel"`, a custom autograd function on the materialised dA, dBu whose backward is itself a
    reverse scan, with a log-depth Hillis-Steele kernel (GPU) or a single in-place pass (CPU; see `parallel_scan`).
An explicit `scan="kernel"` off CUDA, or where `mamba_ssm` does not import, is a ValueError naming model.size.scan.
`scan="sequential"` runs the plain autograd loop over t -- the reference the fast paths are tested against. The states
h_t are materialised (hook point `blocks.{l}.ssm.h`, models/hooks.py) only in a layer whose h a probe asks for.

`variant="paper"`, `PaperMambaBlock`, is the authors' simplified block (`MambaBlock` of
experiments/paper1_bijection/train_mamba.py in vishalmisra/bayesian-wind-tunnel): rank-1 dt, a shared A_log =
log(0.1 [1..N]), clamps on delta, delta A, delta B u and the state, a LayerNorm on y, no pre-norm, nan_to_num after
every block, final LayerNorm. Its state clamp makes the recurrence non-linear, so it always scans sequentially.
Both blocks are a `MambaBlock` (the projections, conv, gate and D skip they share); the size's variant picks one.
"""

from __future__ import annotations

import math
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import nn

from windtunnel.models import scan_kernel
from windtunnel.models.base import InitSize, ResidualModel, size_int
from windtunnel.models.common import Init, initialise, no_weight_decay, zero_residual_projections
from windtunnel.models.hooks import LayerHook
from windtunnel.models.scan_kernel import compiled_selective_scan
from windtunnel.models.scans import (
    kernel_available,
    kernel_selective_scan,
    parallel_scan,
    selective_scan,
    sequential_scan,
)


def auto_scan(device: torch.device, dtype: torch.dtype) -> str:
    """The scan `scan="auto"` runs for inputs on `device`: on CPU the compiled scan where it builds, else the fused
    one; on CUDA mamba-ssm's kernel where it imports (not for float64), else the parallel scan."""
    if device.type == "cpu":
        if scan_kernel.available():
            return "compiled"
        scan_kernel.warn_unavailable()
        return "fused"
    return "kernel" if kernel_available(device) and dtype != torch.float64 else "parallel"


# ---------------------------------------------------------------------------------------------- block


class MambaBlock(nn.Module):
    """A selective-SSM mixer, what the two blocks share (their SSM, its init and its delta are each block's own):
        [u, z] = in_proj(x);  u = SiLU(causal depthwise conv_k(u));  [dt, B, C] = x_proj(u)
        delta = softplus(dt_proj(dt));  y = ssm(u, delta, B, C);  out = out_proj((y_norm(y) + D u) * SiLU(z))
    (y_norm: the paper block's only), with hook points ssm.delta, B, C, h (when the scan materialises it) and y."""

    def __init__(
        self, d_model: int, d_state: int, expand: int, d_conv: int, dt_rank: int, a_shape: tuple[int, ...], y_norm: bool
    ) -> None:
        super().__init__()
        self.d_state, self.d_conv, self.dt_rank = d_state, d_conv, dt_rank
        self.d_inner = di = expand * d_model
        self.in_proj = nn.Linear(d_model, 2 * di, bias=False)
        self.conv = nn.Conv1d(di, di, d_conv, groups=di, padding=d_conv - 1)
        self.x_proj = nn.Linear(di, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, di)
        # never weight-decayed (the reference marks both `_no_weight_decay`): decay would pull A toward -1, D toward 0
        self.A_log = no_weight_decay(nn.Parameter(torch.empty(a_shape)))  # (Di,N) per channel or (N,) shared
        self.D = no_weight_decay(nn.Parameter(torch.empty(di)))  # (Di,)
        self.y_norm = nn.LayerNorm(di) if y_norm else None
        self.out_proj = nn.Linear(di, d_model, bias=False)

    def reset_ssm_parameters(self) -> None:  # pragma: no cover - interface
        """The block's own init of A_log, D and dt_proj, under either `init` (run after the generic one)."""
        raise NotImplementedError

    def delta(self, dt: torch.Tensor) -> torch.Tensor:
        """The step sizes, (B,T,r) -> (B,T,Di): softplus(dt_proj(dt))."""
        return F.softplus(self.dt_proj(dt))

    def ssm(  # pragma: no cover - interface
        self, u: torch.Tensor, delta: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor, scan: str, hook: LayerHook
    ) -> torch.Tensor:
        """The state-space recurrence, y (B,T,Di) from u, delta (B,T,Di) and B, C (B,T,N)."""
        raise NotImplementedError

    def read_out(self, h: torch.Tensor, Cm: torch.Tensor, hook: LayerHook) -> torch.Tensor:
        """y_t = h_t C_t: (B,T,Di,N) states and (B,T,N) C -> (B,T,Di), through hook point ssm.h."""
        return torch.einsum("btdn,btn->btd", hook("ssm.h", h), Cm)

    def forward(self, x: torch.Tensor, scan: str, hook: LayerHook) -> torch.Tensor:
        """(B,T,d) -> (B,T,d); `scan`: how the reference block scans (`ReferenceMambaBlock.ssm`)."""
        T = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B,T,Di) each
        u = F.silu(self.conv(u.transpose(1, 2))[..., :T].transpose(1, 2))  # causal depthwise conv, (B,T,Di)
        dt, Bm, Cm = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)  # (B,T,r),(B,T,N)x2
        delta, Bm, Cm = hook("ssm.delta", self.delta(dt)), hook("ssm.B", Bm), hook("ssm.C", Cm)  # (B,T,Di),(B,T,N)x2
        y = hook("ssm.y", self.ssm(u, delta, Bm, Cm, scan, hook))  # (B,T,Di)
        if self.y_norm is not None:
            y = self.y_norm(y)
        y = (y + self.D * u) * F.silu(z)  # (B,T,Di)
        return self.out_proj(y)


class ReferenceMambaBlock(MambaBlock):
    """The Mamba paper's block (the state-spaces reference): low-rank dt, A = -exp(A_log) per channel (Di,N) with
    the S4D-real init, a linear recurrence that any scan computes."""

    def __init__(self, d_model: int, d_state: int, expand: int, d_conv: int, dt_rank: int) -> None:
        super().__init__(d_model, d_state, expand, d_conv, dt_rank, a_shape=(expand * d_model, d_state), y_norm=False)

    @torch.no_grad()
    def reset_ssm_parameters(self, dt_min: float = 1e-3, dt_max: float = 0.1, dt_floor: float = 1e-4) -> None:
        """S4D-real A = -[1..N] per channel, D = 1, dt_proj's weight U(+-1/sqrt(r)) and its bias the inverse softplus
        of a dt log-uniform in [dt_min, dt_max]."""
        n = torch.arange(1, self.d_state + 1, dtype=torch.float32, device=self.A_log.device)
        self.D.fill_(1.0)
        self.A_log.copy_(torch.log(n).expand(self.d_inner, -1))  # S4D-real: A = -[1..N] per channel
        nn.init.uniform_(self.dt_proj.weight, -(self.dt_rank**-0.5), self.dt_rank**-0.5)
        u = torch.rand(self.d_inner, device=self.D.device)
        dt = torch.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=dt_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus: softplus(bias) = dt

    def ssm(
        self, u: torch.Tensor, delta: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor, scan: str, hook: LayerHook
    ) -> torch.Tensor:
        """scan: "sequential" (autograd loop), "parallel" (`parallel_scan`), "fused" (`selective_scan`), "compiled"
        (`compiled_selective_scan`, the fused scan in C) or "kernel" (`kernel_selective_scan`, mamba-ssm on CUDA);
        the last three never materialise the states: `ssm.h` is not reached."""
        scans = {"fused": selective_scan, "compiled": compiled_selective_scan, "kernel": kernel_selective_scan}
        if (fused := scans.get(scan)) is not None:  # the scans that never materialise the states (B,T,Di,N)
            return fused(u, delta, -torch.exp(self.A_log), Bm, Cm)  # (B,T,Di)
        A = -torch.exp(self.A_log)  # (Di,N)
        dA = delta[..., None] * A  # (B,T,Di,N)
        dBu = (delta * u)[..., None] * Bm[:, :, None, :]  # (B,T,Di,N)
        h = sequential_scan(dA.exp(), dBu) if scan == "sequential" else parallel_scan(dA.exp(), dBu)  # (B,T,Di,N)
        return self.read_out(h, Cm, hook)


class PaperMambaBlock(MambaBlock):
    """The authors' simplified block (`MambaBlock` of experiments/paper1_bijection/train_mamba.py): rank-1 dt, one
    A_log (N,) shared over channels, clamps on delta, delta A, delta B u and the state, a LayerNorm on y. The state
    clamp makes the recurrence non-linear, so it always scans sequentially (`scan` is not read)."""

    def __init__(self, d_model: int, d_state: int, expand: int, d_conv: int) -> None:
        super().__init__(d_model, d_state, expand, d_conv, dt_rank=1, a_shape=(d_state,), y_norm=True)

    @torch.no_grad()
    def reset_ssm_parameters(self) -> None:
        """The authors' init: A_log = log(0.1 [1..N]), D = 1, dt_proj's weight U(+-0.01) and its bias 0.1."""
        n = torch.arange(1, self.d_state + 1, dtype=torch.float32, device=self.A_log.device)
        self.D.fill_(1.0)
        self.A_log.copy_(torch.log(0.1 * n))
        nn.init.uniform_(self.dt_proj.weight, -0.01, 0.01)
        nn.init.constant_(self.dt_proj.bias, 0.1)

    def delta(self, dt: torch.Tensor) -> torch.Tensor:
        return super().delta(dt).clamp(1e-4, 10.0)  # (B,T,Di)

    def ssm(
        self, u: torch.Tensor, delta: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor, scan: str, hook: LayerHook
    ) -> torch.Tensor:
        A = -torch.exp(self.A_log.clamp(max=5.0)).expand(self.d_inner, -1)  # (Di,N), shared over channels
        dA = (delta[..., None] * A).clamp(-20.0, 0.0)  # (B,T,Di,N)
        dBu = ((delta * u)[..., None] * Bm[:, :, None, :]).clamp(-10.0, 10.0)  # (B,T,Di,N)
        h = sequential_scan(dA.exp(), dBu, clamp=100.0)  # (B,T,Di,N)
        return self.read_out(h, Cm, hook)


class MambaSize(InitSize):
    """Size of a `Mamba`. `dt_rank` "auto": ceil(d_model/16). `variant`: "reference" (Mamba-1: pre-norm RMSNorm
    residual) or "paper" (the authors' block: no pre-norm, LayerNorm on y, scalar dt). `pos` None: "learned" for
    the paper variant, "none" for the reference one. `init` None (`InitSize`): "normal" for the reference variant,
    "torch" for the paper one, whose authors' block keeps PyTorch's defaults (at 6 x 192 a block's output is ~0.19
    of the residual stream's norm at init under "torch", ~0.05 under "normal"). Run directories written before
    `init` existed trained the paper variant with "normal", and their stored configs read as that
    (`store.records.run_dir.ConfigFile.upgrade`).
    `scan` (reference variant; the paper variant always scans sequentially): "auto" = on CPU "compiled" where a C
    compiler builds it, else "fused"; on CUDA "kernel" (mamba-ssm's `selective_scan_fn`) when `mamba_ssm` imports,
    else parallel; "kernel" explicitly, off CUDA or without mamba_ssm, and "compiled" off the CPU or where it does not
    build, are a ValueError at the forward. A layer whose state `ssm.h` is hooked or cached materialises
    it with the parallel scan, or the sequential one when scan="sequential".
    `zero_init_out`: zero every block's out_proj at init (`common.zero_residual_projections`), so every block starts
    as the identity."""

    n_layers: int = size_int(6)
    d_model: int = size_int(192)
    d_state: int = size_int(16)
    expand: int = size_int(2)
    d_conv: int = size_int(4)
    dt_rank: int | Literal["auto"] = "auto"
    variant: Literal["reference", "paper"] = "reference"
    scan: Literal["auto", "fused", "compiled", "parallel", "sequential", "kernel"] = "auto"
    pos: Literal["none", "learned"] | None = None
    tie: bool = True
    eps: float = Field(default=1e-5, gt=0)
    logit_scale: bool = False
    zero_init_out: bool = False

    def default_init(self) -> Init:
        return "torch" if self.variant == "paper" else "normal"

    def positions(self) -> str:
        """`pos` resolved: "learned" or "none"."""
        return ("learned" if self.variant == "paper" else "none") if self.pos is None else self.pos

    def learned_positions(self) -> bool:
        return self.positions() == "learned"

    def position_limit(self) -> bool:
        return self.learned_positions()

    @field_validator("dt_rank", mode="before")
    @classmethod
    def _dt_rank(cls, v: Any) -> int | Literal["auto"]:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError("must be 'auto' or an integer >= 1")


class Mamba(ResidualModel):
    """Stack of Mamba blocks; its size is a `MambaSize`.

    Ablation: `with model.ablate(layers={l}):` makes layer l the identity.
    """

    Size = MambaSize
    size: MambaSize
    row, color, cost = 20, "C1", 3.4  # models.info: report row, figure colour, relative training cost
    layer_hooks = ("ssm.delta", "ssm.B", "ssm.C", "ssm.h", "ssm.y", "ssm.out")
    resid_parts = ("ssm.out",)

    def build_layers(self) -> None:
        """n_layers blocks of the size's variant with its residual: reference, h + block(RMSNorm(h)) and a final
        RMSNorm; paper (the authors' model), h + block(h) with NaN and inf replaced after it, a final LayerNorm."""
        s = self.size
        self.n_layers, self.scan = s.n_layers, s.scan
        self.d_state, self.d_conv, self.d_inner = s.d_state, s.d_conv, s.expand * s.d_model
        if s.variant == "paper":
            self.blocks = nn.ModuleList(
                PaperMambaBlock(s.d_model, s.d_state, s.expand, s.d_conv) for _ in range(s.n_layers)
            )
            self.norms = nn.ModuleList(nn.Identity() for _ in range(s.n_layers))
            self.norm = nn.LayerNorm(s.d_model, eps=s.eps)
            self.nan_to_num = True
        else:
            dt_rank = math.ceil(s.d_model / 16) if s.dt_rank == "auto" else s.dt_rank
            self.blocks = nn.ModuleList(
                ReferenceMambaBlock(s.d_model, s.d_state, s.expand, s.d_conv, dt_rank) for _ in range(s.n_layers)
            )
            self.norms = nn.ModuleList(nn.RMSNorm(s.d_model, eps=s.eps) for _ in range(s.n_layers))
            self.norm = nn.RMSNorm(s.d_model, eps=s.eps)
            self.nan_to_num = False

    def initialise_weights(self) -> None:
        """`init` on the Linear/Embedding weights, then each block's own SSM init, then `zero_init_out`."""
        s = self.size
        initialise(self, s.init)
        for block in self.blocks:
            cast(MambaBlock, block).reset_ssm_parameters()  # ModuleList items are typed Module
        if s.zero_init_out:
            zero_residual_projections(self)

    def layer(self, l: int, h: torch.Tensor) -> torch.Tensor:
        scan: str = self.scan
        if self.wants(f"blocks.{l}.ssm.h"):  # the fused scan never holds the states: materialise them here only
            scan = "sequential" if scan == "sequential" else "parallel"
        elif scan == "auto":
            scan = auto_scan(h.device, h.dtype)
        hook = self.layer_hook(l)
        h = h + hook("ssm.out", self.blocks[l](self.norms[l](h), scan, hook))  # (B,T,d)
        return torch.nan_to_num(h) if self.nan_to_num else h

    def state_size(self, T: int) -> int:
        """SSM state (Di x N) plus the conv buffer (Di x (k-1)) per layer; independent of T."""
        return self.n_layers * (self.d_inner * self.d_state + self.d_inner * (self.d_conv - 1))
