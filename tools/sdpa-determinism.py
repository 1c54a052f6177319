# What deterministic mode costs scaled-dot-product attention alone (forward + backward, BF16, causal),
# at a proxy's shape, timed with CUDA events in one process: python3 tools/sdpa-determinism.py
import torch, torch.nn.functional as F
B, H, S, D = 16, 12, 2048, 64  # dense-113m at batch 16 x 2048
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
g = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
def step():
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(g)
for det in (False, True, False, True):
    torch.use_deterministic_algorithms(det)
    for _ in range(3): step()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); a.record()
    for _ in range(20): step()
    b.record(); b.synchronize()
    print(f"sdpa fwd+bwd {B}x{H}x{S}x{D} deterministic={det}: {a.elapsed_time(b) / 20:.3f} ms", flush=True)
