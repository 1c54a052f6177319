"""cuDNN's fused attention backward, made deterministic by cutting the keys into chunks.

cuDNN's backward runs one thread block per (key block, head, batch) and adds each block's share of dQ
into a shared FP32 accumulator with atomics: with more than one key block per query row, the order of
the additions, and so dQ's bits, changes from run to run. Given keys [c, c + L) alone, with the
queries [c, S) that see them (a causal mask with its diagonal at the top left), the log-sum-exp and
output of the whole forward, each query row gets its dQ share from one key block if L is at most the
kernel's key block: nothing races. dK and dV of those keys are whole; dQ is the sum of the chunks'
shares, taken here in a fixed order. This probe checks, per chunk length, whether repeated backwards
give the same bits, how far the gradients are from an FP64 reference (beside flash's deterministic
backward, what models/layers.cpp runs), and times it against that and against cuDNN's own backward.
Dev tool (not part of the build).

usage: python dev/attention_kv_chunks.py [--reps 10] [--lengths 64,128,256] [--shapes dense-113m,...]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from sdpa_timing import PROXY_SHAPES, digest, model_inputs, sdpa_run, start, time_ms

SHAPES = PROXY_SHAPES

aten = torch.ops.aten


def cudnn_forward(q, k, v):
    r = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)
    return r  # out, lse, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug mask


_BIAS = [None]  # what stands for "no bias" in the backward's (non-optional) attn_bias: None, else the forward's empty mask


def cudnn_backward(go, q, k, v, o, lse, r, max_q, max_k):
    """r: the forward's outputs (RNG state and sequence offsets, unused without dropout and packing)."""
    try:
        return aten._scaled_dot_product_cudnn_attention_backward(go, q, k, v, o, lse, r[6], r[7], _BIAS[0], r[2], r[3], max_q, max_k,
                                                                 0.0, True)
    except (TypeError, RuntimeError) as e:
        if _BIAS[0] is not None:
            raise
        print(f"(attn_bias None refused: {str(e).splitlines()[0][:120]}; passing the forward's debug mask)")
        _BIAS[0] = r[8]
        return cudnn_backward(go, q, k, v, o, lse, r, max_q, max_k)


class KvChunks:
    """cuDNN forward; backward as one cuDNN backward per key chunk of length L, dQ summed in chunk order.

    streams: the chunks' backwards on that many streams (round robin), the sum after all of them."""

    def __init__(self, L, streams=1, fp32_sum=True):
        self.L = L
        self.streams = [torch.cuda.Stream() for _ in range(streams)] if streams > 1 else None
        self.fp32_sum = fp32_sum

    def forward(self, q, k, v):
        r = cudnn_forward(q, k, v)
        self.saved = (q, k, v, r[0], r[1], r)
        return r[0]

    def backward(self, go):
        q, k, v, o, lse, r = self.saved
        S = q.shape[2]
        main = torch.cuda.current_stream()
        parts = []
        for i, c in enumerate(range(0, S, self.L)):
            s = self.streams[i % len(self.streams)] if self.streams else main
            if s is not main:
                s.wait_stream(main)
            with torch.cuda.stream(s):
                e = min(c + self.L, S)
                g = cudnn_backward(go[:, :, c:], q[:, :, c:], k[:, :, c:e], v[:, :, c:e], o[:, :, c:], lse[:, :, c:], r, S - c, e - c)
                if s is not main:
                    for t in g:
                        t.record_stream(main)
            parts.append((c, e, g))
        for s in self.streams or []:
            main.wait_stream(s)
        dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32 if self.fp32_sum else q.dtype)
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
        for c, e, g in parts:
            dq[:, :, c:] += g[0]
            dk[:, :, c:e] = g[1]
            dv[:, :, c:e] = g[2]
        return dq.to(q.dtype), dk, dv

    def backward_calls_only(self, go):
        """The chunks' backwards without the sum (its cost with a fused sum is bandwidth: see the printout)."""
        q, k, v, o, lse, r = self.saved
        S = q.shape[2]
        for c in range(0, S, self.L):
            e = min(c + self.L, S)
            cudnn_backward(go[:, :, c:], q[:, :, c:], k[:, :, c:e], v[:, :, c:e], o[:, :, c:], lse[:, :, c:], r, S - c, e - c)


def reference(q, k, v, go):
    """FP64 attention and its gradients (math), on a slice of the batch."""
    qq, kk, vv = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=True)
    o.backward(go.double())
    return o.detach(), qq.grad, kk.grad, vv.grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--lengths", default="64,128,256")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    start()
    print(aten._scaled_dot_product_cudnn_attention_backward.default._schema)
    print("| shape | variant | fwd+bwd ms | bwd calls alone ms | distinct o / dq / dk / dv over reps | "
          "rel. err dq / dk / dv vs fp64 (batch 0-1) |")
    print("|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        B, H, KV, S, D = SHAPES[name]
        q, k, v, go = model_inputs(B, H, KV, S, D, grad=True)
        ref = reference(q[:2], k[:2], v[:2], go[:2])

        def relerr(out):
            return " / ".join(f"{((a[:2].double() - r).norm() / r.norm()).item():.2e}" for a, r in zip(out[1:], ref[1:]))

        variants = [("sdpa flash, deterministic", True, lambda: sdpa_run(q, k, v, go, SDPBackend.FLASH_ATTENTION), None),
                    ("sdpa cudnn, not deterministic", False, lambda: sdpa_run(q, k, v, go, SDPBackend.CUDNN_ATTENTION), None)]
        for L in (int(x) for x in args.lengths.split(",")):
            for streams in (1, 4):
                impl = KvChunks(L, streams)

                def run(impl=impl):
                    o = impl.forward(q, k, v)
                    return (o,) + impl.backward(go)

                def calls(impl=impl):
                    impl.backward_calls_only(go)

                # torch's deterministic switch off: it refuses cuDNN's backward by name; the bits are checked here instead
                variants.append((f"cudnn, key chunks of {L}, {streams} stream(s)", False, run, calls if streams == 1 else None))
        for vname, det, fn, calls in variants:
            torch.use_deterministic_algorithms(det)
            try:
                out = fn()
            except RuntimeError as e:
                print(f"| {name} | {vname} | unavailable: {str(e).splitlines()[0][:160]} | | | |", flush=True)
                continue
            seen = [set() for _ in range(4)]
            for _ in range(args.reps):
                r = fn()
                for j in range(4):
                    seen[j].add(digest(r[j]))
            err = relerr(out)
            ms = time_ms(fn, rounds=3)
            cms = f"{time_ms(calls, rounds=3):.3f}" if calls else ""
            print(f"| {name} | {vname} | {ms:.3f} | {cms} | {' / '.join(str(len(s)) for s in seen)} | {err} |", flush=True)
        torch.use_deterministic_algorithms(True)
        try:
            impl = KvChunks(128)
            impl.forward(q, k, v)
            impl.backward(go)
            print(f"| {name} | key chunks of 128 under torch.use_deterministic_algorithms(True): accepted | | | | |")
        except RuntimeError as e:
            print(f"| {name} | key chunks of 128 under torch.use_deterministic_algorithms(True): {str(e).splitlines()[0][:120]} | | | | |")
        torch.use_deterministic_algorithms(False)
        with torch.no_grad():
            fwd_ms = time_ms(lambda: cudnn_forward(q, k, v), rounds=3)
        elems = B * H * S * D
        print(f"| {name} | cudnn forward alone | {fwd_ms:.3f} | | | |")
        print(f"| {name} | (a fused dQ sum reads about {elems * 2 * (S // 128 + 1) / 2 / 1e9:.2f} GB at chunks of 128) | | | | |",
              flush=True)


if __name__ == "__main__":
    main()
