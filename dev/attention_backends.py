"""Which causal-attention backend gives a fast *deterministic* backward on this GPU?

Times forward + backward of scaled-dot-product attention (BF16, causal) per backend, with and
without torch.use_deterministic_algorithms, at the proxies' shapes, and checks determinism by
running the backward repeatedly on the same inputs and comparing dq, dk, dv bit for bit.
Dev tool (not part of the build): its findings choose the backend in models/layers.cpp.

usage: python dev/attention_backends.py [--reps 20]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_timing import digest, time_ms

SHAPES = {  # name: (batch, heads, seq, head_dim)
    "dense-20m": (16, 4, 1024, 64),
    "dense-35m": (16, 6, 1024, 64),
    "moe-81m": (16, 6, 2048, 64),
    "dense-113m": (16, 12, 2048, 64),
}
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def run(q, k, v, go, backend):
    for t in (q, k, v):
        t.grad = None
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(go)
    return o, q.grad, k.grad, v.grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print("| shape | backend | deterministic mode | fwd+bwd ms | distinct (dq,dk,dv) over reps | max abs diff vs math |")
    print("|---|---|---|---|---|---|")
    for name, (B, H, S, D) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(1)
        mk = lambda: torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v, go = mk().requires_grad_(), mk().requires_grad_(), mk().requires_grad_(), mk()
        # FP32 math reference on one batch element for a sanity bound.
        qr, kr, vr = (t[:1].detach().float().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.MATH]):
            orf = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True)
        orf.backward(go[:1].float())
        for bname, backend in BACKENDS.items():
            for det in (False, True):
                torch.use_deterministic_algorithms(det)
                try:
                    o, dq, dk, dv = run(q, k, v, go, backend)
                except RuntimeError as e:
                    print(f"| {name} | {bname} | {det} | unavailable: {str(e).splitlines()[0][:80]} | | |")
                    continue
                err = max((dq[:1].float() - qr.grad).abs().max().item(), (dk[:1].float() - kr.grad).abs().max().item(),
                          (dv[:1].float() - vr.grad).abs().max().item())
                seen = {digest(o, dq, dk, dv)}
                for _ in range(args.reps - 1):
                    o, dq, dk, dv = run(q, k, v, go, backend)
                    seen.add(digest(o, dq, dk, dv))
                ms = time_ms(lambda: run(q, k, v, go, backend))
                print(f"| {name} | {bname} | {det} | {ms:.3f} | {len(seen)} | {err:.3g} |", flush=True)
        torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
