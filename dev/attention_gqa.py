"""Grouped-query attention two ways: K and V broadcast to the query heads and copied (what
models/layers.cpp grouped_causal_attention does, its backward a sum over each group), against SDPA's
own `enable_gqa` (no copies), per backend, with and without torch.use_deterministic_algorithms, at
the proxies' shapes (batch 16; the bench step's sequence lengths). Times forward + backward from
q, k, v of the model's layout ([B, heads, S, hd], K and V with the KV heads), and checks determinism
by running the backward repeatedly and comparing outputs and gradients bit for bit; the last column
is the largest difference of dq, dk, dv from the copied variant's (same backend and mode).
Dev tool (not part of the build): its findings choose the formulation in models/layers.cpp.

usage: python dev/attention_gqa.py [--reps 10]
"""
import argparse
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_timing import PROXY_SHAPES, digest, time_ms, warm_clocks

SHAPES = {k: PROXY_SHAPES[k] for k in ("dense-20m", "moe-81m", "dense-113m")}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def run(q, k, v, go, backend, native):
    for t in (q, k, v):
        t.grad = None
    B, H, S, D = q.shape
    KV = k.shape[1]
    with sdpa_kernel([backend]):
        if native:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            ke = k.unsqueeze(2).expand(B, KV, H // KV, S, D).reshape(B, H, S, D)
            ve = v.unsqueeze(2).expand(B, KV, H // KV, S, D).reshape(B, H, S, D)
            o = F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
    o.backward(go)
    return o, q.grad, k.grad, v.grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # SDPA's notes on the kernels it declines
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    warm_clocks()
    print("| shape | backend | deterministic mode | K, V | fwd+bwd ms | distinct (o,dq,dk,dv) over reps | max abs diff vs copied |")
    print("|---|---|---|---|---|---|---|")
    for name, (B, H, KV, S, D) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(1)
        mk = lambda h: torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v, go = mk(H).requires_grad_(), mk(KV).requires_grad_(), mk(KV).requires_grad_(), mk(H)
        for bname, backend in BACKENDS.items():
            for det in (False, True):
                torch.use_deterministic_algorithms(det)
                ref = None
                for native in (False, True):
                    label = "enable_gqa" if native else "copied"
                    try:
                        o, dq, dk, dv = run(q, k, v, go, backend, native)
                    except RuntimeError as e:
                        print(f"| {name} | {bname} | {det} | {label} | unavailable: {str(e).splitlines()[0][:70]} | | |", flush=True)
                        continue
                    grads = [t.detach().clone() for t in (dq, dk, dv)]
                    err = "" if ref is None else f"{max((a.float() - b.float()).abs().max().item() for a, b in zip(grads, ref)):.3g}"
                    if ref is None:
                        ref = grads
                    seen = {digest(o, dq, dk, dv)}
                    for _ in range(args.reps - 1):
                        seen.add(digest(*run(q, k, v, go, backend, native)))
                    ms = time_ms(lambda: run(q, k, v, go, backend, native), rounds=3)
                    print(f"| {name} | {bname} | {det} | {label} | {ms:.3f} | {len(seen)} | {err} |", flush=True)
        torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
