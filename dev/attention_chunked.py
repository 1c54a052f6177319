"""Flash attention's deterministic backward, run as batch chunks on concurrent streams.

In deterministic mode flash attention's backward gives each (batch, head) pair about
ceil(SMs / (batch x heads)) thread blocks, each walking its share of the key blocks and summing dQ
in a private accumulator (no atomics). At the proxies' shapes that is about 192 blocks of one block
an SM: 1.45 waves, the second one half empty. Cutting the batch into chunks, each chunk's backward
on its own stream, gives more, shorter blocks that fill the GPU; each chunk is deterministic by
itself, so the whole is too. This script times forward + backward per chunk count against SDPA's
deterministic flash (what models/layers.cpp runs) and the non-deterministic backends, checks the
bits over repeated backwards, and prints the chunked gradients' largest difference from SDPA's.
Dev tool (not part of the build): its findings choose the attention of models/layers.cpp.

Also: cuDNN's forward (deterministic) with flash's deterministic backward fed cuDNN's output and
log-sum-exp, and each forward alone.

Also: cuDNN's forward with flash's backward in batch chunks (each chunk count).

usage: python dev/attention_chunked.py [--reps 10] [--chunks 1,2,4,8]
"""
import argparse

import torch
from torch.nn.attention import SDPBackend

from sdpa_timing import PROXY_SHAPES, digest, model_inputs, sdpa_run, start, time_ms

SHAPES = PROXY_SHAPES

aten = torch.ops.aten


class Chunked:
    """Forward by flash's op (or cuDNN's: its output and log-sum-exp feed flash's backward) on the current stream;
    backward in `chunks` batch slices, slice i on stream i."""

    def __init__(self, chunks, concurrent=True, forward="flash"):
        self.chunks = chunks
        self.streams = [torch.cuda.Stream() for _ in range(chunks)] if concurrent else None
        self.cudnn = forward == "cudnn"
        self.mixed = CudnnForwardFlashBackward() if self.cudnn else None

    def forward(self, q, k, v):
        if self.cudnn:
            self.mixed.forward(q, k, v)
            q, k, v, o, lse, cq, ck, seed, off = self.mixed.saved
            S = q.shape[2]
            self.saved = (q, k, v, o, lse.contiguous(), cq, ck, S, S, seed, off)
            return o
        r = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)
        self.saved = (q, k, v) + tuple(r[:8])
        return r[0]

    def backward(self, go):
        q, k, v, o, lse, cq, ck, mq, mk, seed, off = self.saved
        B = q.shape[0]
        step = B // self.chunks
        main = torch.cuda.current_stream()
        parts = []
        for i in range(self.chunks):
            sl = slice(i * step, (i + 1) * step)
            s = self.streams[i] if self.streams else main
            s.wait_stream(main)
            with torch.cuda.stream(s):
                g = aten._scaled_dot_product_flash_attention_backward(go[sl], q[sl], k[sl], v[sl], o[sl], lse[sl], cq, ck, mq, mk, 0.0,
                                                                      True, seed, off)
                for t in g:
                    t.record_stream(main)
            parts.append(g)
        for s in self.streams or []:
            main.wait_stream(s)
        return tuple(torch.cat([p[j] for p in parts]) for j in range(3))


class CudnnForwardFlashBackward:
    """cuDNN's forward (deterministic) and its log-sum-exp into flash's deterministic backward."""

    def forward(self, q, k, v):
        r = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)
        # flash's placeholders for the sequence offsets and the RNG state (no dropout): take them from a
        # flash forward of one query row, which costs nothing next to the attention.
        f = aten._scaled_dot_product_flash_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], 0.0, True, False)
        self.saved = (q, k, v, r[0], r[1].view(q.shape[0], q.shape[1], q.shape[2]), f[2], f[3], f[6], f[7])
        return r[0]

    def backward(self, go):
        q, k, v, o, lse, cq, ck, seed, off = self.saved
        S = q.shape[2]
        return aten._scaled_dot_product_flash_attention_backward(go, q, k, v, o, lse.contiguous(), cq, ck, S, S, 0.0, True, seed, off)


def chunked_run(q, k, v, go, impl):
    o = impl.forward(q, k, v)
    dq, dk, dv = impl.backward(go)
    return o, dq, dk, dv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--chunks", default="1,2,4,8")
    args = ap.parse_args()
    start()
    print("| shape | variant | deterministic mode | fwd+bwd ms | distinct (o,dq,dk,dv) over reps | max abs diff vs SDPA flash det |")
    print("|---|---|---|---|---|---|")
    for name, (B, H, KV, S, D) in SHAPES.items():
        q, k, v, go = model_inputs(B, H, KV, S, D, grad=True)
        torch.use_deterministic_algorithms(True)
        ref = [t.clone() for t in sdpa_run(q, k, v, go, SDPBackend.FLASH_ATTENTION)]
        variants = [("sdpa flash", True, lambda: sdpa_run(q, k, v, go, SDPBackend.FLASH_ATTENTION))]
        for c in (int(x) for x in args.chunks.split(",")):
            if B % c:
                continue
            impl = Chunked(c)
            variants.append((f"chunks {c}, concurrent", True, lambda impl=impl: chunked_run(q, k, v, go, impl)))
            mixed_c = Chunked(c, forward="cudnn")
            variants.append((f"cudnn forward, flash backward in chunks {c}, concurrent", True,
                             lambda impl=mixed_c: chunked_run(q, k, v, go, impl)))
            if c == 2:
                seq = Chunked(c, concurrent=False)
                variants.append((f"chunks {c}, one stream", True, lambda seq=seq: chunked_run(q, k, v, go, seq)))
        mixed = CudnnForwardFlashBackward()
        variants.append(("cudnn forward, flash backward", True, lambda: chunked_run(q, k, v, go, mixed)))
        variants.append(("sdpa flash", False, lambda: sdpa_run(q, k, v, go, SDPBackend.FLASH_ATTENTION)))
        variants.append(("sdpa cudnn", False, lambda: sdpa_run(q, k, v, go, SDPBackend.CUDNN_ATTENTION)))
        for vname, det, fn in variants:
            torch.use_deterministic_algorithms(det)
            try:
                out = fn()
            except RuntimeError as e:
                print(f"| {name} | {vname} | {det} | unavailable: {str(e).splitlines()[0][:100]} | | |", flush=True)
                continue
            err = max((a.float() - b.float()).abs().max().item() for a, b in zip(out, ref))
            seen = {digest(*out)}
            for _ in range(args.reps - 1):
                seen.add(digest(*fn()))
            ms = time_ms(fn, rounds=3)
            print(f"| {name} | {vname} | {det} | {ms:.3f} | {len(seen)} | {err:.3g} |", flush=True)
        torch.use_deterministic_algorithms(True)
        with torch.no_grad():
            for vname, fwd in (("forward only: flash", lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)),
                               ("forward only: cudnn", lambda: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False))):
                try:
                    print(f"| {name} | {vname} | True | {time_ms(fwd, rounds=3):.3f} | | |", flush=True)
                except RuntimeError as e:
                    print(f"| {name} | {vname} | True | unavailable: {str(e).splitlines()[0][:100]} | | |", flush=True)
        torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
