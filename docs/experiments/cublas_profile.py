#!/usr/bin/env python3
"""cuBLAS's batched expert GEMMs of one balanced shape, once each, for Nsight Compute.

Runs torch.bmm for gate/up (x [E, rows, H] against w13 [E, 2I, H]) and down (h [E, rows, I]
against w2 [E, H, I]) a few times to warm up, then once each between cudaProfilerStart and
cudaProfilerStop, so that `ncu --profile-from-start off` profiles exactly those two kernels (and
whatever cuBLAS launches with them): the kernel's name (its tile and cluster shape), grid, time,
DRAM and L2 bytes, to set beside scripts/profile's table of rt_moe's GEMMs on the same shape with
--balanced-routing (docs/PERF.md 23a: gpumode bench 1 is ~18% behind cuBLAS there).
Usage: cublas_profile.py EXPERTS ROWS [H I] (gpumode bench 1: 32 256; DeepSeek-V3 4096: 256 128).
"""
import sys

import torch

experts, rows = int(sys.argv[1]), int(sys.argv[2])
H = int(sys.argv[3]) if len(sys.argv) > 3 else 7168
I = int(sys.argv[4]) if len(sys.argv) > 4 else 2048
dev = torch.device("cuda")
torch.manual_seed(0)


def randn(*shape, scale=1.0):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(torch.bfloat16)


x, h = randn(experts, rows, H), randn(experts, rows, I)
w13, w2 = randn(experts, 2 * I, H, scale=I ** -0.5), randn(experts, H, I, scale=H ** -0.5)
g = torch.empty(experts, rows, 2 * I, device=dev, dtype=torch.bfloat16)
y = torch.empty(experts, rows, H, device=dev, dtype=torch.bfloat16)
flush = torch.empty(256 << 20, device=dev, dtype=torch.uint8)  # 256 MB: more than the L2
for _ in range(5):
    torch.bmm(x, w13.transpose(1, 2), out=g)
    torch.bmm(h, w2.transpose(1, 2), out=y)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
flush.zero_()
torch.bmm(x, w13.transpose(1, 2), out=g)
flush.zero_()
torch.bmm(h, w2.transpose(1, 2), out=y)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print(f"bmm gate/up and down: {experts} experts x {rows} rows, H={H} I={I}, bf16")
