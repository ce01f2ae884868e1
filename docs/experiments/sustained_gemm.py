#!/usr/bin/env python3
"""How fast cuBLAS runs the expert GEMMs when it runs long enough to meet the power limit.

rt_moe_bench's dense ceiling (tools/bench_ceilings.cpp) is cublasGemmEx 8192^3: a median of single
products and one run of 18 back to back (25 ms). A prefill forward is timed as the median of 20
forwards of 25 ms back to back, by which time the H200 is at its 700 W limit (docs/PERF.md 15f).
This script, on the GPU host (PyTorch), times windows of ~25 ms of cuBLAS work for SECONDS seconds
each and prints the rate of the first windows, the median and the last, for:
  - dense: 8192^3 (x @ W^T, as the ceiling);
  - grouped: the DeepSeek-V3 expert GEMMs at T = 16384 and 4096 with every expert given the same
    rows (T k / E), as batched products (torch.bmm), plus the shared expert's dense products: what
    cuBLAS does on the same shapes with perfect balance and no gather;
  - race: 8 experts, top-4, T = 16384 (8192 rows an expert);
  - gpumode bench 1 and 2 (32 experts, top-4, one shared; T = 2048 and 8192) balanced likewise,
    to set beside rt_moe_bench --balanced-routing.
Usage: sustained_gemm.py [SECONDS] (default 2).
"""
import statistics
import sys
import time

import torch

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
dev = torch.device("cuda")
torch.manual_seed(0)


def randn(*shape, scale=1.0):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(torch.bfloat16)


def run(name, flops, fn, window_ms=25.0):
    torch.cuda.synchronize()
    # Calls a window: as many as take ~window_ms, from one timed call.
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    per = max(1, round(window_ms / s.elapsed_time(e)))
    rates, start = [], time.time()
    while time.time() - start < SECONDS:
        s.record()
        for _ in range(per):
            fn()
        e.record(); e.synchronize()
        rates.append(per * flops / (s.elapsed_time(e) * 1e-3) / 1e12)
    first = " ".join(f"{r:.0f}" for r in rates[:3])
    print(f"{name:<34} {per:>3} calls/window {len(rates):>4} windows  first {first}  "
          f"median {statistics.median(rates):.0f}  last {statistics.median(rates[-5:]):.0f}  "
          f"max {max(rates):.0f} TFLOP/s", flush=True)
    time.sleep(1.0)  # cool down between cases


def dense(n=8192):
    a, w = randn(n, n), randn(n, n)
    out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    run(f"dense {n}^3", 2.0 * n ** 3, lambda: torch.matmul(a, w.t(), out=out))


def grouped(name, experts, rows, shared_rows, H=7168, I=2048):
    x = randn(experts, rows, H)
    w13 = randn(experts, 2 * I, H, scale=I ** -0.5)
    w2 = randn(experts, H, I, scale=H ** -0.5)
    h = randn(experts, rows, I)
    g = torch.empty(experts, rows, 2 * I, device=dev, dtype=torch.bfloat16)
    y = torch.empty(experts, rows, H, device=dev, dtype=torch.bfloat16)
    flops_gu = 2.0 * experts * rows * H * 2 * I
    flops_dn = 2.0 * experts * rows * I * H
    fns, flops = [], 0.0
    fns.append(lambda: torch.bmm(x, w13.transpose(1, 2), out=g)); flops += flops_gu
    fns.append(lambda: torch.bmm(h, w2.transpose(1, 2), out=y)); flops += flops_dn
    if shared_rows:
        xs, hs = randn(shared_rows, H), randn(shared_rows, I)
        ws13, ws2 = randn(2 * I, H, scale=I ** -0.5), randn(H, I, scale=H ** -0.5)
        gs = torch.empty(shared_rows, 2 * I, device=dev, dtype=torch.bfloat16)
        ys = torch.empty(shared_rows, H, device=dev, dtype=torch.bfloat16)
        fns.append(lambda: torch.matmul(xs, ws13.t(), out=gs))
        fns.append(lambda: torch.matmul(hs, ws2.t(), out=ys))
        flops += 2.0 * shared_rows * H * 3 * I
    run(f"{name} gate/up only", flops_gu, fns[0])
    run(f"{name} down only", flops_dn, fns[1])

    def all_():
        for f in fns:
            f()
    run(f"{name} all expert GEMMs", flops, all_)
    del x, w13, w2, h, g, y
    torch.cuda.empty_cache()


print(torch.cuda.get_device_name(), torch.__version__, "cuBLAS", torch.backends.cuda.preferred_blas_library(), flush=True)
dense()
grouped("DeepSeek-V3 T=16384 (512 rows x 256)", 256, 512, 16384)
grouped("DeepSeek-V3 T=4096 (128 rows x 256)", 256, 128, 4096)
grouped("race T=16384 (8192 rows x 8)", 8, 8192, 0)
grouped("gpumode bench 1 T=2048 (256 rows x 32)", 32, 256, 2048)
grouped("gpumode bench 2 T=8192 (1024 rows x 32)", 32, 1024, 8192)
dense()
