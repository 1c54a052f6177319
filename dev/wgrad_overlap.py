"""Weight gradients on a second stream, beside the attention backward.

Flash attention's deterministic backward gives each (batch, head) pair one thread block at the
proxies' shapes: about 1.45 blocks an SM, so for the second half of the kernel most SMs idle. A
layer's weight gradients (dW = dY^T X of the MLP's two linears and the attention's projection) need
nothing from the attention backward: queued on a second stream before it, they can run on the idle
SMs. This script times, at one layer's shapes, the attention backward alone, the three weight
gradients alone, both on one stream, and the weight gradients on a second stream (normal and low
priority), in deterministic mode (flash's deterministic backward, as the model runs) and not (cuDNN's
backward). Dev tool (not part of the build): its findings choose whether the model
queues weight gradients on a second stream (models/quant_linear.cpp).

usage: python dev/wgrad_overlap.py [--iters 20]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sdpa_timing import model_inputs, start, time_ms

# name: (batch, heads, kv heads, seq, head_dim, d_model, ffn)
SHAPES = {
    "dense-113m": (16, 12, 4, 2048, 64, 768, 2048),
    "dense-35m": (16, 6, 2, 1024, 64, 384, 1024),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    start()
    print("| shape | attention backward | variant | ms |")
    print("|---|---|---|---|")
    for name, (B, H, KV, S, D, d, ffn) in SHAPES.items():
        q, k, v, go = model_inputs(B, H, KV, S, D)
        T = B * S
        bf = dict(device="cuda", dtype=torch.bfloat16)
        # The layer's weight-gradient operands: fc2 (ffn -> d), fc1 (d -> 2 ffn), proj (d -> d).
        gemms = [(torch.randn(T, d, **bf), torch.randn(T, ffn, **bf)), (torch.randn(T, 2 * ffn, **bf), torch.randn(T, d, **bf)),
                 (torch.randn(T, d, **bf), torch.randn(T, d, **bf))]

        def wgrads():
            return [dy.t().mm(x).float() for dy, x in gemms]

        side = torch.cuda.Stream()
        low = torch.cuda.Stream(priority=0)
        high = torch.cuda.Stream(priority=-1)
        for det, backend, label in ((True, SDPBackend.FLASH_ATTENTION, "flash, deterministic"),
                                    (False, SDPBackend.CUDNN_ATTENTION, "cuDNN, not deterministic")):
            torch.use_deterministic_algorithms(det)
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)
            attn = lambda o=o, qg=qg, kg=kg, vg=vg: torch.autograd.grad(o, (qg, kg, vg), go, retain_graph=True)

            def serial():
                attn()
                wgrads()

            def overlapped(s):
                def run():
                    main = torch.cuda.current_stream()
                    s.wait_stream(main)
                    with torch.cuda.stream(s):
                        wgrads()
                    attn()
                    main.wait_stream(s)
                return run

            rows = [("attention backward alone", attn), ("weight gradients alone", wgrads), ("both, one stream", serial),
                    ("weight gradients on a second stream", overlapped(side)),
                    ("weight gradients on a low-priority stream", None)]
            for vname, fn in rows:
                if fn is None:
                    # The main work on a high-priority stream, the weight gradients on a low-priority one.
                    def prio():
                        high.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(high):
                            overlapped(low)()
                        torch.cuda.current_stream().wait_stream(high)
                    fn = prio
                ms = time_ms(fn, iters=args.iters, rounds=3)
                print(f"| {name} | {label} | {vname} | {ms:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
