"""Shared by the attention dev scripts: a digest of tensors' bits and CUDA-event timing."""
import hashlib

import torch


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
