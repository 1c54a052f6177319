"""Shared by the attention dev scripts: the proxies' attention shapes and inputs, SDPA forward + backward on one
backend, a digest of tensors' bits and CUDA-event timing."""
import hashlib
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

PROXY_SHAPES = {  # name: (batch, heads, kv heads, seq, head_dim) of the proxies' attention
    "dense-20m": (16, 4, 2, 1024, 64),
    "dense-35m": (16, 6, 2, 1024, 64),
    "moe-81m": (16, 6, 2, 2048, 64),
    "dense-113m": (16, 12, 4, 2048, 64),
}


def model_layout(B, S, h, D, g):
    """A random BF16 [B, h, S, D] tensor on [B, S, h, D] memory, the layout the model's attention takes."""
    return torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)


def model_inputs(B, H, KV, S, D, grad=False):
    """q, k, v and the output's gradient in the model's layout, drawn in that order from a generator seeded 1;
    grad: q, k and v require gradients."""
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, go = (model_layout(B, S, h, D, g) for h in (H, KV, KV, H))
    if grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    return q, k, v, go


def start():
    """Every script's first lines: SDPA's notes on the kernels it declines silenced, the versions and the GPU
    printed, the clocks up."""
    warnings.filterwarnings("ignore", category=UserWarning)
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {props.name}, {props.multi_processor_count} SMs")
    warm_clocks()


def sdpa_run(q, k, v, go, backend):
    """Causal grouped-query SDPA on one backend, forward and backward: (o, dq, dk, dv)."""
    for t in (q, k, v):
        t.grad = None
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    o.backward(go)
    return o, q.grad, k.grad, v.grad


def digest(*ts):
    """The first 16 hex digits of the SHA-256 of the tensors' bytes, in order."""
    h = hashlib.sha256()
    for t in ts:
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def warm_clocks():
    """Clocks up before the first timing: a few seconds of large products."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):
        a @ a
    torch.cuda.synchronize()


def time_ms(fn, warm=3, iters=20, rounds=1):
    """The median over `rounds` of the median of `iters` CUDA-event-timed calls (after `warm` untimed ones)."""
    return sorted(time_round(fn, warm, iters) for _ in range(rounds))[rounds // 2]


def time_round(fn, warm, iters):
    for _ in range(warm):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]
