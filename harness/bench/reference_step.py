#!/usr/bin/env python3
"""The transformer of models/transformer.cpp (dense or MoE; BF16, or a 4-bit recipe as fake quantization) in plain PyTorch, eager or
under torch.compile (default or reduce-overhead, i.e. CUDA graphs), for timing only: `ufp4 bench step` runs it in the same call as its own steps and
compares step times.

Same architecture and dtype flow as ours: FP32 master weights, BF16 activations (autocast; the
embedding output cast to BF16), RMSNorm in FP32, rotate-half RoPE, grouped-query attention through
scaled_dot_product_attention (causal; SDPA's own enable_gqa where torch has it, --gqa), SwiGLU with one fused gate/up projection, untied LM head,
cross entropy in FP32; AdamW (weight decay on matrices), gradient clipping at 1.0, loss read every
step. MoE layers (all but the first `--dense-layers`) as a plain PyTorch MoE is written today: the router
on FP32 activations (its product in BF16 under autocast) and an FP32 softmax, top-k renormalized, the (token, slot) pairs sorted by expert, one gather, the
experts' SwiGLU as two torch._grouped_mm calls on stacked weights, an index_add_ combine, the
load-balancing loss, and a shared expert as a dense MLP. Writes its timings as TOML to --out.

--deterministic runs it as our training step runs, in deterministic mode: torch.use_deterministic_algorithms
(SDPA then takes flash's deterministic backward, index_add_ a sorted form), cuDNN deterministic, cuBLAS
with a fixed workspace, new memory left unfilled (as ours leaves it): the like-for-like peer of our
deterministic step.
"""
import argparse
import math
import os
import platform
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- Fake quantization, as a researcher writes it (--recipe e2m1_ref | ufp4): quantize then dequantize in
# torch ops, 1 x 16 blocks with FP32 max scales, RHT-16 as a 16 x 16 matmul with random signs, rounding to
# the grid by its spacing (round, or floor(y + torch.rand) for stochastic rounding), and an autograd
# Function for the three GEMMs of every linear. The recipes of models/recipes/: e2m1_ref = E2M1, RHT on WGRAD
# only, SR on dY (DGRAD and WGRAD); ufp4 = the same on the E1M2 grid with RHT on all three GEMMs. Embedding,
# router and LM head stay BF16. Every operand is blocked along its GEMM's reduction in the layout it has (rows
# of a (T, N) operand along N, its columns along T), so no transposed copy is made. For timing; --self-test
# checks the rounding against the grids' level tables.
GRID_MAX = {"e2m1": 6.0, "e1m2": 1.75}
GRID_LEVELS = {"e2m1": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], "e1m2": [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]}
RECIPES = {"e2m1_ref": ("e2m1", {"fprop": False, "dgrad": False, "wgrad": True}),
           "ufp4": ("e1m2", {"fprop": True, "dgrad": True, "wgrad": True})}


class FakeQuant:
    def __init__(self, grid, device, seed=1234):
        self.grid, self.gmax = grid, GRID_MAX[grid]
        h = torch.ones(1, 1)
        while h.shape[0] < 16:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        g = torch.Generator().manual_seed(seed)
        signs = torch.randint(0, 2, (16,), generator=g).float() * 2 - 1
        self.rot = (torch.diag(signs) @ h / 4.0).to(device)  # orthogonal: rot @ rot.T = I
        self.rand_like = torch.rand_like  # stochastic rounding's uniforms (the self-test puts in its own)

    def spacing(self, a):
        """The distance between the grid's levels around magnitude a: E1M2 is uniform; E2M1 doubles at 2 and 4."""
        if self.grid == "e1m2":
            return 0.25
        return torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))

    def __call__(self, x, rht=False, sr=False, dim=-1):
        """x dequantized in x's dtype, in blocks of 16 along dim: -1 (along rows) or -2 (down columns), rotated
        first with rht (in x's dtype). Both operands of a GEMM are blocked and rotated alike along its reduction,
        so their product needs no inverse."""
        n = x.shape[dim]
        assert n % 16 == 0, f"fake quantization in blocks of 16: a dimension of {n}"
        if dim == -1:
            b = x.reshape(-1, 16)
            if rht:
                b = b @ self.rot.to(x.dtype)
        else:
            b = x.reshape(*x.shape[:-2], n // 16, 16, x.shape[-1])
            if rht:
                b = self.rot.t().to(x.dtype) @ b
        bf = b.float()
        scale = bf.abs().amax(dim, keepdim=True) / self.gmax
        scale = torch.where(scale > 0, scale, 1.0)
        t = bf / scale
        a = t.abs()
        step = self.spacing(a)
        y = a / step
        q = (torch.floor(y + self.rand_like(y)) if sr else torch.round(y)) * step
        # At the top level y + rand can round up to the next integer in FP32 (rand within an ulp of 1, or t an ulp
        # above gmax from amax / (amax / gmax)): one level past the grid, so saturate as the hardware formats do.
        q = q.clamp_max(self.gmax)
        return (torch.copysign(q, t) * scale).reshape(x.shape).to(x.dtype)


def pad_rows(x, multiple=16):
    pad = (-x.shape[0]) % multiple  # zero rows add nothing to a product over the rows
    return F.pad(x, (0, 0, 0, pad)) if pad else x


class FakeQuantGemms(torch.autograd.Function):
    """y = x w^T with every GEMM's operands fake-quantized along its reduction: FPROP over K, DGRAD over
    N (dY with SR), WGRAD over the tokens (dY with SR)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, x, w, fq, rht):
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, w)
        ctx.fq, ctx.rht, ctx.shape = fq, rht, x.shape
        y = fq(x2, rht["fprop"]) @ fq(w, rht["fprop"]).t()
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        fq, rht = ctx.fq, ctx.rht
        dy2 = dy.reshape(-1, dy.shape[-1]).to(x2.dtype)
        dx = fq(dy2, rht["dgrad"], sr=True) @ fq(w, rht["dgrad"], dim=-2)
        dw = fq(pad_rows(dy2), rht["wgrad"], sr=True, dim=-2).t() @ fq(pad_rows(x2), rht["wgrad"], dim=-2)
        return dx.reshape(ctx.shape), dw, None, None


class FakeQuantLinear(nn.Linear):
    def __init__(self, d_in, d_out, fq, rht):
        super().__init__(d_in, d_out, bias=False)
        self.fq, self.rht = fq, rht

    def forward(self, x):
        return FakeQuantGemms.apply(x, self.weight, self.fq, self.rht)


def expert_rows_padded(x, offs, experts):
    """x (rows sorted by expert, offs: cumulative ends) with each expert's rows padded to whole blocks of 16, and
    the padded ends: each expert's WGRAD then reduces over whole blocks of its own tokens only. Sizes stay on the
    device (no host read); the padded length is bounded by rows + 16 a expert."""
    offs = offs.long()
    rows = torch.arange(x.shape[0], device=x.device)
    counts = torch.diff(offs, prepend=offs.new_zeros(1))
    blocks = (counts + 15) // 16 * 16
    ends = torch.cumsum(blocks, 0)
    expert = torch.searchsorted(offs, rows, right=True)
    at = rows - (offs - counts)[expert] + (ends - blocks)[expert]
    length = (x.shape[0] + 15) // 16 * 16 + 16 * experts  # whole blocks: the grouped GEMM reads it by columns
    padded = x.new_zeros(length, x.shape[1]).index_copy_(0, at, x)
    return padded, ends.to(torch.int32)


def expert_wgrad(dy, xs, offs, fq, rht, sr=True):
    """Every expert's dW_e = dY_e^T X_e as one grouped GEMM over the tokens, each expert's tokens in blocks of 16."""
    e = offs.shape[0]
    dyp, ends = expert_rows_padded(dy, offs, e)
    xp, _ = expert_rows_padded(xs, offs, e)
    dw = torch._grouped_mm(fq(dyp, rht, sr=sr, dim=-2).t(), fq(xp, rht, dim=-2), offs=ends)
    used = torch.diff(offs, prepend=offs.new_zeros(1)) > 0
    return torch.where(used[:, None, None], dw, 0.0)  # an expert without tokens: a group of no rows, zero by definition


class FakeQuantExperts(torch.autograd.Function):
    """The routed experts' GEMM ys = xs w_e^T over tokens sorted by expert (offs: cumulative ends), FPROP,
    DGRAD and WGRAD as grouped GEMMs of fake-quantized operands (WGRAD over each expert's tokens padded to
    whole blocks of 16)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, xs, w, offs, fq, rht):
        ctx.save_for_backward(xs, w, offs)
        ctx.fq, ctx.rht = fq, rht
        return torch._grouped_mm(fq(xs, rht["fprop"]), fq(w, rht["fprop"]).transpose(1, 2), offs=offs)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dy):
        xs, w, offs = ctx.saved_tensors
        fq, rht = ctx.fq, ctx.rht
        dy = dy.to(xs.dtype)
        dx = torch._grouped_mm(fq(dy, rht["dgrad"], sr=True), fq(w, rht["dgrad"], dim=-2), offs=offs)
        dw = expert_wgrad(dy, xs, offs, fq, rht["wgrad"]).to(w.dtype)
        return dx, dw, None, None, None


def self_test(dev):
    """The fake quantizer against the grids' level tables (round to the nearest level; stochastic rounding to
    a neighbouring level, unbiased), blocking down columns against blocking the transposed copy, and the
    experts' grouped WGRAD against an expert-by-expert loop. Exit 0 when every check holds."""
    torch.manual_seed(7)
    ok = True
    def check(name, cond):
        nonlocal ok
        ok = ok and bool(cond)
        print(f"reference_step self-test: {name}: {'ok' if cond else 'FAIL'}", file=sys.stderr)
    for grid in ("e2m1", "e1m2"):
        fq = FakeQuant(grid, dev)
        levels = torch.tensor(GRID_LEVELS[grid], device=dev)
        x = torch.randn(4096, 64, device=dev) * torch.rand(4096, 1, device=dev) * 10
        b = x.reshape(-1, 16)
        scale = b.abs().amax(-1, keepdim=True) / fq.gmax
        t = b / scale
        dist = (t.abs().unsqueeze(-1) - levels).abs()
        want = torch.copysign(levels[dist.argmin(-1)], t) * scale
        got = fq(x).reshape(-1, 16)
        # Ties (a magnitude exactly between two levels) may go either way: the argmin takes the lower.
        tie = dist.sort(-1).values[..., :2].diff(dim=-1).squeeze(-1) == 0
        check(f"{grid} round to nearest ({int(tie.sum())} ties left out)", torch.equal(got[~tie], want[~tie]))
        sr = torch.stack([fq(x[:256], sr=True) for _ in range(2000)]).float()
        on_grid = ((sr.reshape(2000, -1, 16) / scale[:256 * 64 // 16]).abs().unsqueeze(-1) - levels).abs().amin(-1).max()
        check(f"{grid} stochastic rounding on the grid", on_grid < 1e-5)
        bias = (sr.mean(0) - x[:256]).abs() / (scale[:256 * 64 // 16].repeat_interleave(16, 0).reshape(256, 64) * fq.gmax)
        check(f"{grid} stochastic rounding unbiased (max |mean - x| {bias.max().item():.4f} of a block's max)", bias.max() < 0.03)
        # The top level with the largest uniform below 1: y + rand rounds up to the next integer in FP32, one level
        # past the grid, which the quantizer must saturate. A block whose max is 2 gmax has a scale of exactly 2
        # however the division rounds (on CUDA a division by a Python scalar is a multiplication by its
        # reciprocal), so t is exactly gmax and the top level dequantizes to the block's max again; first, that
        # this block does reach past the grid without the saturation (else the check would pass vacuously).
        top = torch.zeros(1, 16, device=dev)
        top[0, 0] = 2 * fq.gmax
        u = torch.full((1,), 1 - 2.0**-24, device=dev)
        top_step = fq.spacing(torch.full((1,), fq.gmax, device=dev))
        past = (torch.floor(fq.gmax / top_step + u) * top_step).item() > fq.gmax
        fq.rand_like = lambda y: torch.full_like(y, 1 - 2.0**-24)
        check(f"{grid} stochastic rounding saturates at the top level", past and fq(top, sr=True)[0, 0].item() == 2 * fq.gmax)
        fq.rand_like = torch.rand_like
        w = torch.randn(96, 128, device=dev)
        check(f"{grid} blocks down columns = blocks of the transposed copy",
              torch.equal(fq(w, dim=-2), fq(w.t().contiguous()).t()))
        xs = torch.randn(200, 64, device=dev, dtype=torch.bfloat16)
        dy = torch.randn(200, 32, device=dev, dtype=torch.bfloat16)
        offs = torch.tensor([30, 30, 111, 200], device=dev, dtype=torch.int32)
        got = expert_wgrad(dy, xs, offs, fq, rht=True, sr=False)
        start, want = 0, torch.zeros(4, 32, 64, device=dev)
        for e, end in enumerate(offs.tolist()):
            if end > start:
                want[e] = (fq(pad_rows(dy[start:end]), True, dim=-2).t() @ fq(pad_rows(xs[start:end]), True, dim=-2)).float()
            start = end
        err = (got.float() - want).abs().max().item()
        check(f"{grid} experts' grouped WGRAD = expert by expert (max |diff| {err:.2e})", err <= 1e-2 * want.abs().max().item())
    return 0 if ok else 1


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def rotate(x, cos, sin):
    a, b = x.chunk(2, -1)
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def linear(d_in, d_out, a):
    """A BF16 linear, or a fake-quantized one under --recipe."""
    return nn.Linear(d_in, d_out, bias=False) if a.fq is None else FakeQuantLinear(d_in, d_out, a.fq, a.rht)


class Moe(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, h, e = a.d_model, a.expert_ffn, a.experts
        self.k, self.e = a.top_k, e
        self.fq, self.rht = a.fq, a.rht
        self.router = nn.Parameter(torch.randn(e, d) / math.sqrt(d))
        self.w1 = nn.Parameter(torch.randn(e, 2 * h, d) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(e, d, h) / math.sqrt(h))
        self.shared = None
        if a.shared:
            self.shared = nn.ModuleList([linear(d, 2 * h * a.shared, a), linear(h * a.shared, d, a)])

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(F.linear(x.float(), self.router), -1)
        w, idx = probs.topk(self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        flat = idx.flatten()
        # Tokens an expert, by comparison (histc has no deterministic CUDA form; bincount reads its max on the host).
        counts = (flat.unsqueeze(1) == torch.arange(self.e, device=flat.device)).sum(0)
        aux = self.e * ((counts / flat.numel()) * probs.mean(0)).sum()
        order = torch.argsort(flat, stable=True)
        token = order // self.k
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = x[token].to(torch.bfloat16)
        if self.fq is None:
            g, u = torch._grouped_mm(xs, self.w1.to(torch.bfloat16).transpose(1, 2), offs=offs).chunk(2, -1)
            ys = torch._grouped_mm(F.silu(g) * u, self.w2.to(torch.bfloat16).transpose(1, 2), offs=offs)
        else:
            g, u = FakeQuantExperts.apply(xs, self.w1, offs, self.fq, self.rht).chunk(2, -1)
            ys = FakeQuantExperts.apply((F.silu(g) * u).contiguous(), self.w2, offs, self.fq, self.rht)
        ys = ys * w.flatten()[order].unsqueeze(1).to(ys.dtype)
        out = torch.zeros_like(x, dtype=ys.dtype).index_add_(0, token, ys)
        if self.shared is not None:
            sg, su = self.shared[0](x).chunk(2, -1)
            out = out + self.shared[1](F.silu(sg) * su)
        return out.view(shape), aux


class Block(nn.Module):
    def __init__(self, a, moe=False):
        super().__init__()
        self.h, self.kv, self.hd = a.heads, a.kv_heads, a.d_model // a.heads
        self.sdpa_gqa = a.gqa == "sdpa" and a.kv_heads != a.heads
        self.norm1, self.norm2 = RMSNorm(a.d_model, a.norm_eps), RMSNorm(a.d_model, a.norm_eps)
        self.qkv = linear(a.d_model, (a.heads + 2 * a.kv_heads) * self.hd, a)
        self.proj = linear(a.heads * self.hd, a.d_model, a)
        self.moe = Moe(a) if moe else None
        if not moe:
            self.fc1 = linear(a.d_model, 2 * a.ffn, a)
            self.fc2 = linear(a.ffn, a.d_model, a)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.h * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q = rotate(q.view(B, S, self.h, self.hd).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, S, self.kv, self.hd).transpose(1, 2), cos, sin)
        v = v.view(B, S, self.kv, self.hd).transpose(1, 2)
        if self.kv != self.h and not self.sdpa_gqa:
            k = k.repeat_interleave(self.h // self.kv, 1)
            v = v.repeat_interleave(self.h // self.kv, 1)
        if self.sdpa_gqa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(B, S, self.h * self.hd))
        if self.moe is not None:
            y, aux = self.moe(self.norm2(x))
            return x + y, aux
        g, u = self.fc1(self.norm2(x)).chunk(2, -1)
        return x + self.fc2(F.silu(g) * u), None


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding = nn.Embedding(a.vocab, a.d_model)
        nn.init.normal_(self.embedding.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList([Block(a, a.experts > 0 and i >= a.dense_layers) for i in range(a.layers)])
        self.aux_coeff = a.aux_coeff
        self.final_norm = RMSNorm(a.d_model, a.norm_eps)
        self.lm_head = None if a.tied else nn.Linear(a.d_model, a.vocab, bias=False)
        half = (a.d_model // a.heads) // 2
        inv = a.rope_theta ** (-torch.arange(0, half, dtype=torch.float64) / half)
        ang = torch.outer(torch.arange(0, a.seq, dtype=torch.float64), inv)
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())

    def forward(self, tokens, targets):
        h = self.embedding(tokens).to(torch.bfloat16)
        S = tokens.shape[1]
        aux = []
        for b in self.blocks:
            h, a = b(h, self.cos[:S], self.sin[:S])
            if a is not None:
                aux.append(a)
        h = self.final_norm(h)
        logits = self.lm_head(h) if self.lm_head is not None else F.linear(h, self.embedding.weight)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        return loss + self.aux_coeff * sum(aux) / len(aux) if aux else loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("d-model", "layers", "heads", "kv-heads", "ffn", "vocab", "seq", "batch"):
        p.add_argument("--" + k, type=int, required="--self-test" not in sys.argv)
    for k in ("experts", "top-k", "expert-ffn", "shared", "dense-layers"):
        p.add_argument("--" + k, type=int, default=0)
    p.add_argument("--aux-coeff", type=float, default=0.01)
    p.add_argument("--compile", action="store_true", help="the model under torch.compile (the optimizer step stays eager)")
    p.add_argument("--compile-mode", choices=["default", "reduce-overhead"], default="default",
                   help="torch.compile's mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--gqa", choices=["sdpa", "repeat"], default="sdpa",
                   help="grouped-query attention: SDPA's enable_gqa (torch >= 2.5), or K and V repeated per query head")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--optimizer", choices=["fused", "foreach"], default="fused")
    p.add_argument("--norm-eps", type=float, default=1e-6)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--deterministic", action="store_true", help="deterministic algorithms, as our training step runs")
    p.add_argument("--recipe", choices=["bf16"] + sorted(RECIPES), default="bf16",
                   help="bf16, or a 4-bit recipe as plain fake quantization (FakeQuant, FakeQuantGemms)")
    p.add_argument("--self-test", action="store_true", help="check the fake quantizer (FakeQuant, the experts' WGRAD) and exit")
    p.add_argument("--out")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("reference_step: no CUDA device", file=sys.stderr)
        return 2
    if a.self_test:
        return self_test(torch.device("cuda"))
    if not a.out:
        p.error("--out is required")
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS handle
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        if hasattr(torch.utils, "deterministic"):
            torch.utils.deterministic.fill_uninitialized_memory = False
    dev = torch.device("cuda")
    if a.gqa == "sdpa" and "enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""):
        a.gqa = "repeat"  # this torch has no enable_gqa
    a.fq, a.rht = None, None
    if a.recipe != "bf16":
        grid, a.rht = RECIPES[a.recipe]
        a.fq = FakeQuant(grid, dev)
    torch.manual_seed(1)
    model = Transformer(a).to(dev)
    forward = torch.compile(model, mode=a.compile_mode) if a.compile else model
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    kw = {"fused": True} if a.optimizer == "fused" else {"foreach": True}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8, **kw)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    times, loss = [], float("nan")
    for step in range(a.warmup + a.steps):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            l = forward(tokens[:, :-1], tokens[:, 1:])
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = l.item()
        t1.record()
        t1.synchronize()
        if step >= a.warmup:
            times.append(t0.elapsed_time(t1))
        print(f"reference_step: step {step + 1}/{a.warmup + a.steps} {times[-1] if times else 0:.2f} ms loss {loss:.4f}",
              file=sys.stderr, flush=True)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    with open(a.out, "w") as f:
        f.write(f"step_ms_median = {statistics.median(times)!r}\nstep_ms_mean = {statistics.mean(times)!r}\n")
        f.write(f"step_ms_sd = {sd!r}\npeak_memory_gb = {torch.cuda.max_memory_allocated() / 1e9!r}\n")
        f.write(f"loss = {loss if math.isfinite(loss) else 0.0!r}\n")
        f.write(f'torch = "{torch.__version__}"\npython = "{platform.python_version()}"\n')
        f.write(f'device = "{torch.cuda.get_device_name(0)}"\noptimizer = "{a.optimizer}"\ncompiled = {str(a.compile).lower()}\n')
        f.write(f'compile_mode = "{a.compile_mode if a.compile else ""}"\ngqa = "{a.gqa}"\n')
        f.write(f'deterministic = {str(a.deterministic).lower()}\nrecipe = "{a.recipe}"\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
