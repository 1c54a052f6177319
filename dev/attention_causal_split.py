"""Flash attention's deterministic backward, split along the sequence into causal triangles and full
rectangles on concurrent streams.

In deterministic mode flash's backward gives each (batch, head) pair one thread block that walks
all its key blocks: 192 blocks of one block an SM at dense-113m, 1.45 waves, the second one half
empty. Cut the sequence into n ranges of S/n: query range i attends to key range i causally (a
triangle, flash's causal backward on the ranges) and to the key ranges before it fully (one
rectangle, flash's non-causal backward on queries i and keys [0, i S/n)), each with the whole
forward's output and log-sum-exp. Every part is deterministic; dQ of range i and dK, dV of range j
are the parts' sums in a fixed order. The same work, in 2n - 1 launches of shorter blocks that
fill the GPU, on concurrent streams. This script times forward (cuDNN) + backward per n (launched
one by one, and replayed as a CUDA graph as the model's step is) against the
model's attention (cuDNN's forward, flash's deterministic backward on the whole sequence), checks
the bits over repeated backwards and prints the largest difference from the whole backward.
Dev tool (not part of the build): its findings choose models/deterministic_attention.cpp's backward.

usage: python dev/attention_causal_split.py [--reps 10] [--splits 2,4]
"""
import argparse

import torch

from attention_chunked import CudnnForwardFlashBackward, chunked_run
from sdpa_timing import PROXY_SHAPES, digest, model_inputs, start, time_ms

aten = torch.ops.aten


class CausalSplit(CudnnForwardFlashBackward):
    """cuDNN's forward; flash's deterministic backward as n triangles and n - 1 rectangles, part p on stream p."""

    def __init__(self, n):
        self.n = n
        self.streams = [torch.cuda.Stream() for _ in range(2 * n - 1)]

    def backward(self, go):
        q, k, v, o, lse, cq, ck, seed, off = self.saved
        S = q.shape[2]
        c = S // self.n
        main = torch.cuda.current_stream()
        lse = lse.contiguous()
        parts = []  # (query range i, keys [k0, k1), causal, (dq, dk, dv))
        s_i = 0
        for i in range(self.n):
            qs = slice(i * c, (i + 1) * c)
            for k0, k1, causal in ((i * c, (i + 1) * c, True), (0, i * c, False)):
                if k1 <= k0:
                    continue
                st = self.streams[s_i]
                s_i += 1
                st.wait_stream(main)
                with torch.cuda.stream(st):
                    ks = slice(k0, k1)
                    g = aten._scaled_dot_product_flash_attention_backward(
                        go[:, :, qs], q[:, :, qs], k[:, :, ks], v[:, :, ks], o[:, :, qs], lse[:, :, qs].contiguous(), cq, ck, c, k1 - k0,
                        0.0, causal, seed, off)
                    for t in g:
                        t.record_stream(main)
                parts.append((i, k0, k1, causal, g))
        for st in self.streams:
            main.wait_stream(st)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        # Fixed order: a range's triangle first, then its rectangle (queries) / the rectangles by query range (keys).
        for i, k0, k1, causal, (gq, gk, gv) in parts:
            dq[:, :, i * c:(i + 1) * c] += gq
            dk[:, :, k0:k1] += gk
            dv[:, :, k0:k1] += gv
        return dq, dk, dv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--splits", default="2,4")
    args = ap.parse_args()
    start()
    torch.use_deterministic_algorithms(True)
    print("| shape | variant | fwd+bwd ms | as a CUDA graph | distinct (o,dq,dk,dv) over reps | max abs diff vs whole backward |")
    print("|---|---|---|---|---|---|")
    for name, (B, H, KV, S, D) in PROXY_SHAPES.items():
        q, k, v, go = model_inputs(B, H, KV, S, D)
        whole = CudnnForwardFlashBackward()
        ref = [t.clone() for t in chunked_run(q, k, v, go, whole)]
        variants = [("cudnn forward, flash backward (the model's)", whole)]
        for n in (int(x) for x in args.splits.split(",")):
            if S % (n * 128) == 0:
                variants.append((f"cudnn forward, flash backward split in {n} ranges ({2 * n - 1} parts, concurrent)", CausalSplit(n)))
        for vname, impl in variants:
            out = chunked_run(q, k, v, go, impl)
            err = max((a.float() - b.float()).abs().max().item() for a, b in zip(out, ref))
            seen = {digest(*out)}
            for _ in range(args.reps - 1):
                seen.add(digest(*chunked_run(q, k, v, go, impl)))
            ms = time_ms(lambda: chunked_run(q, k, v, go, impl), rounds=3)
            # Captured as a CUDA graph, as the model's step runs: the host's launch cost gone.
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                chunked_run(q, k, v, go, impl)
            gms = time_ms(graph.replay, rounds=3)
            print(f"| {name} | {vname} | {ms:.3f} | {gms:.3f} | {len(seen)} | {err:.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
