"""Two paths, one function: fused vs explicit attention, parallel vs sequential Mamba scan, LSTM fast vs cache."""

from __future__ import annotations

import pytest
import torch

from windtunnel import models, tasks
from windtunnel.models.scans import parallel_scan, sequential_scan

SPEC = tasks.make("bijection").spec
REG = tasks.make("regression").spec


def tokens(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, SPEC.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pos", ["learned", "none", "rotary", "learned+rotary"])
def test_fused_equals_explicit_attention(pos):
    torch.manual_seed(0)
    fused = models.make("transformer", SPEC, n_layers=2, n_heads=4, d_model=32, pos=pos, attention="fused")
    explicit = models.make("transformer", SPEC, n_layers=2, n_heads=4, d_model=32, pos=pos, attention="explicit")
    explicit.load_state_dict(fused.state_dict())
    x = tokens(3, 17)
    a, b = fused(x), explicit(x)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    ga = torch.autograd.grad(a.square().sum(), list(fused.parameters()))
    gb = torch.autograd.grad(b.square().sum(), list(explicit.parameters()))
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-3)


def test_auto_attention_is_explicit_on_cpu_and_matches_fused():
    torch.manual_seed(0)
    auto = models.make("transformer", SPEC, n_layers=2, n_heads=4, d_model=32)
    fused = models.make("transformer", SPEC, n_layers=2, n_heads=4, d_model=32, attention="fused")
    fused.load_state_dict(auto.state_dict())
    x = tokens(2, 11)
    torch.testing.assert_close(auto(x), fused(x), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="attention"):
        models.make("transformer", SPEC, attention="flash")


def test_rotary_is_relative():
    """Rotary scores depend only on the offset: shifting q and k together leaves q.k unchanged."""
    from windtunnel.models.transformer import rotary

    q = torch.randn(1, 1, 1, 8).expand(1, 1, 6, 8)
    k = torch.randn(1, 1, 1, 8).expand(1, 1, 6, 8)
    rq, rk = rotary(q), rotary(k)
    s = (rq[..., 3, :] * rk[..., 1, :]).sum(), (rq[..., 5, :] * rk[..., 3, :]).sum()
    torch.testing.assert_close(s[0], s[1])
    assert not torch.allclose((rq[..., 3, :] * rk[..., 1, :]).sum(), (rq[..., 3, :] * rk[..., 2, :]).sum())


def test_learned_plus_rotary_uses_both_position_signals():
    """pos="learned+rotary" = the learned model's absolute embedding plus rotary q/k: with the same weights it
    matches neither a learned-only nor a rotary-only model; with the table zeroed it is the rotary model."""
    torch.manual_seed(0)
    kw = dict(n_layers=2, n_heads=4, d_model=32)
    both = models.make("transformer", SPEC, pos="learned+rotary", **kw)
    learned = models.make("transformer", SPEC, pos="learned", **kw)
    rot = models.make("transformer", SPEC, pos="rotary", **kw)
    learned.load_state_dict(both.state_dict())
    rot.load_state_dict({k: v for k, v in both.state_dict().items() if k != "embed.pos.weight"})
    x = tokens(2, 13)
    with torch.no_grad():
        y = both(x)
        assert not torch.allclose(y, learned(x), atol=1e-4) and not torch.allclose(y, rot(x), atol=1e-4)
        both.embed.pos.weight.zero_()
        torch.testing.assert_close(both(x), rot(x))


@pytest.mark.parametrize("kernel", ["hillis-steele", "loop"])
@pytest.mark.parametrize("T", [1, 2, 7, 16, 37])
def test_parallel_scan_matches_loop_forward_and_grad(T, kernel):
    g = torch.Generator().manual_seed(T)
    a = torch.rand(2, T, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    b = torch.randn(2, T, 3, 4, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(2, T, 3, 4, generator=g, dtype=torch.float64)
    hp, hs = parallel_scan(a, b, kernel), sequential_scan(a, b)
    torch.testing.assert_close(hp, hs)
    gp = torch.autograd.grad((hp * w).sum(), (a, b))
    gs = torch.autograd.grad((hs * w).sum(), (a, b))
    torch.testing.assert_close(gp, gs)
    small = (a[:1, :, :1, :2].detach().requires_grad_(), b[:1, :, :1, :2].detach().requires_grad_())
    assert torch.autograd.gradcheck(lambda u, v: parallel_scan(u, v, kernel), small)


def test_scan_kernel_is_validated():
    with pytest.raises(ValueError, match="kernel"):
        parallel_scan(torch.ones(1, 2, 1), torch.ones(1, 2, 1), "blelloch")


@pytest.mark.parametrize("spec", [SPEC, REG], ids=["tokens", "real"])
def test_mamba_parallel_equals_sequential_model(spec):
    torch.manual_seed(0)
    par = models.make("mamba", spec, n_layers=2, d_model=16, scan="parallel").double()
    seq = models.make("mamba", spec, n_layers=2, d_model=16, scan="sequential").double()
    seq.load_state_dict(par.state_dict())
    x = tokens(2, 13) if spec.input_kind == "tokens" else torch.randn(2, 13, spec.input_dim, dtype=torch.float64)
    a, b = par(x), seq(x)
    torch.testing.assert_close(a, b)
    ga = torch.autograd.grad(a.sum(), list(par.parameters()))
    gb = torch.autograd.grad(b.sum(), list(seq.parameters()))
    for name, u, v in zip([n for n, _ in par.named_parameters()], ga, gb, strict=True):
        torch.testing.assert_close(u, v, msg=name)
    # asking for the states (parallel scan, every state kept) gives the same output
    out_cache, cache = par.run_with_cache(x, names=["blocks.0.ssm.h"])
    torch.testing.assert_close(out_cache, a)
    assert cache["blocks.0.ssm.h"].shape == (2, 13, par.d_inner, par.d_state)


def test_mamba_reference_init():
    m = models.make("mamba", SPEC, n_layers=1, d_model=32)
    blk = m.blocks[0]
    assert blk.dt_rank == 2 and blk.A_log.shape == (64, 16)
    torch.testing.assert_close(-torch.exp(blk.A_log[0]), -torch.arange(1.0, 17.0))
    dt = torch.nn.functional.softplus(blk.dt_proj.bias)
    assert (dt >= 1e-4 - 1e-9).all() and (dt <= 0.1 + 1e-6).all()
    paper = models.make("mamba", SPEC, n_layers=1, d_model=32, variant="paper").blocks[0]
    assert paper.dt_rank == 1 and paper.A_log.shape == (16,)
    torch.testing.assert_close(paper.A_log.exp(), 0.1 * torch.arange(1.0, 17.0))


def test_mamba_paper_variant_param_count():
    """The authors' MambaBijection 6 x 192 with 38 learned positions has 1,441,632 params."""
    m = models.make("mamba", SPEC, n_layers=6, d_model=192, variant="paper", max_len=38)
    assert m.n_params() == 1_441_632


@pytest.mark.parametrize("extra", [{}, {"norm_inputs": True, "residual": True}], ids=["plain", "norm-residual"])
@pytest.mark.parametrize("spec", [SPEC, REG], ids=["tokens", "real"])
def test_lstm_cache_path_equals_fast_path(spec, extra):
    torch.manual_seed(0)
    model = models.make("lstm", spec, n_layers=3, d_model=16, **extra)
    x = tokens(2, 11) if spec.input_kind == "tokens" else torch.randn(2, 11, spec.input_dim)
    fast = model(x)
    names = [f"blocks.{l}.{n}" for l in range(3) for n in ("lstm.c", "lstm.h", "resid_post")]
    slow, cache = model.run_with_cache(x, names=names, grad=True)  # asking for c runs every layer's cell loop
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-4)
    for l in range(3):
        if not extra:
            torch.testing.assert_close(cache[f"blocks.{l}.lstm.h"], cache[f"blocks.{l}.resid_post"])
    gf = torch.autograd.grad(fast.sum(), list(model.parameters()))
    gs = torch.autograd.grad(slow.sum(), list(model.parameters()))
    for u, v in zip(gf, gs, strict=True):
        torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-3)


def test_lstm_official_param_count():
    """The authors' LSTMBijection (6 x 192, 38 learned positions, tied head, LayerNorm) = 1,794,048."""
    assert models.make("lstm", SPEC, n_layers=6, d_model=192, pos="learned", max_len=38).n_params() == 1_794_048


def test_prefix_mlp_equals_flattened_padded_prefix():
    """The cumulative-sum first layer equals a Linear on [e(x_0); ...; e(x_t); 0; ...] (module docstring)."""
    torch.manual_seed(0)
    m = models.make("mlp", SPEC, n_layers=1, d_model=12, d_emb=3)
    x = tokens(2, 9)
    e = m.embed.slot(x)  # (B,T,d_emb)
    T, L = 9, m.max_len
    W = m.embed.weight.reshape(L * 3, 12)  # the flattened first-layer weight
    mask = torch.ones(T, T).tril()  # slot s visible at position t
    flat = mask[None, :, :, None] * e[:, None, :, :]  # (B,T,T,d_emb)
    flat = torch.cat([flat, torch.zeros(2, T, L - T, 3)], dim=2).reshape(2, T, L * 3)  # zero-padded prefix
    want = flat @ W + m.embed.bias + m.embed.pos.weight[:T]
    torch.testing.assert_close(m.embed(x), want, atol=1e-6, rtol=1e-5)
