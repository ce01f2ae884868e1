// Device helpers shared by the kernel families: 16-bit float types, conversions, and the PTX
// wrappers (griddepcontrol, cp.async, ldmatrix, mma.sync). No CUDA header is included: NVRTC
// compiles the templates with only the embedded headers, so every instruction is spelled out here.
#pragma once

#include "params.h"

namespace rt_moe {

struct F16 {};   // IEEE binary16
struct BF16 {};  // bfloat16

template <typename D>
struct DTypeOps;

template <>
struct DTypeOps<F16> {
  static __device__ __forceinline__ float to_float(unsigned short bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  static __device__ __forceinline__ unsigned short from_float(float f) {
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
    return bits;
  }
  // (lo, hi) -> one 32-bit register, lo in the low half.
  static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned bits;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
    return bits;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct DTypeOps<BF16> {
  static __device__ __forceinline__ float to_float(unsigned short bits) {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
  static __device__ __forceinline__ unsigned short from_float(float f) {
    unsigned short bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
    return bits;
  }
  static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned bits;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
    return bits;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// The element of y (T, k + S, H), each expert's output times its routing weight, that the down
// GEMMs write and the combine sums (MoeConfig::y_dtype): fp32 (Y = float), or fp16 of y * 2^-8
// (Y = F16): 11 significant bits, magnitudes up to 65504 * 2^8 (~1.7e7; past that inf, which the
// combine turns into an inf output), and below 2^-6, where fp16 is subnormal, an absolute step
// of 2^-16. (bf16, 8 bits, costs up to half an ulp of the largest slot, 0.0078 for a slot in
// [2, 4): past the 1e-2 accuracy rule's atol where the slots cancel.) The down GEMMs multiply
// by scaled(weight) (pair_weight) and the combine by kUnscale, both exact (powers of two). Pair:
// two consecutive elements (an even column and the next), Elem: one.
template <typename Y>
struct YOps;

template <>
struct YOps<float> {
  using Pair = float2;
  using Elem = float;
  static constexpr int kBytes = 4;
  static constexpr float kUnscale = 1.f;
  static __device__ __forceinline__ float scaled(float weight) { return weight; }
  static __device__ __forceinline__ Pair pack(float a, float b) { return make_float2(a, b); }
  static __device__ __forceinline__ Elem pack1(float a) { return a; }
};

template <>
struct YOps<F16> {
  using Pair = unsigned;
  using Elem = unsigned short;
  static constexpr int kBytes = 2;
  static constexpr float kUnscale = 256.f;
  static __device__ __forceinline__ float scaled(float weight) { return weight * (1.f / 256.f); }
  static __device__ __forceinline__ Pair pack(float a, float b) {
    return DTypeOps<F16>::pack2(a, b);
  }
  static __device__ __forceinline__ Elem pack1(float a) { return DTypeOps<F16>::from_float(a); }
};

// A 16-byte vector of 8 elements, as loaded and stored by every kernel.
struct alignas(16) Vec8 {
  unsigned w[4];
};

// A 16-byte read-only load that does not allocate in L1: for bytes a block reads once (expert
// weights, the router), so that L1 keeps what the block's threads share (x rows).
__device__ __forceinline__ Vec8 load_streaming_16(const void* p) {
  Vec8 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
}

template <typename D>
__device__ __forceinline__ void unpack8(const Vec8& v, float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = DTypeOps<D>::to_float(static_cast<unsigned short>(v.w[i] & 0xffffu));
    f[2 * i + 1] = DTypeOps<D>::to_float(static_cast<unsigned short>(v.w[i] >> 16));
  }
}

template <typename D>
__device__ __forceinline__ Vec8 pack8(const float (&f)[8]) {
  Vec8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.w[i] = DTypeOps<D>::pack2(f[2 * i], f[2 * i + 1]);
  return v;
}

template <typename D>
__device__ __forceinline__ float round_to(float f) {
  return DTypeOps<D>::to_float(DTypeOps<D>::from_float(f));
}

// h = SiLU(g) * u = g * sigmoid(g) * u, the gate/up epilogue of every grouped GEMM (the CPU
// reference uses the same formula), from the special-function unit's approximate exp2 and
// reciprocal, flushing denormals: six instructions an element where `g / (1 + __expf(-g))` took
// ~17 (the IEEE division's check and slow-path branch, __expf's denormal fix-up; docs/PERF.md 70).
// Each approximation is within ~2 ulp of fp32, far below the rounding of h to bf16 or fp16. For g
// below ~-88, exp(-g) is +inf and its reciprocal 0, so h = -0 (SiLU's limit); above ~87 exp(-g)
// flushes to 0 and h = g u.
__device__ __forceinline__ float silu_mul(float g, float u) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.f + e));
  return g * r * u;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Programmatic dependent launch (sm_90 on; PTX griddepcontrol). A kernel launched with the
// programmatic stream serialization attribute may start while its predecessor on the stream still
// runs. grid_dependency_wait() blocks the calling thread until every prerequisite grid has
// completed and its memory operations are visible; the "memory" clobber keeps the compiler from
// moving loads or stores above it. A kernel launched that way calls it in every thread, on every
// path, before its first access to memory another kernel of the forward reads or writes: then it
// completes only after its predecessor did, so a kernel two launches later may read what this
// one's predecessor wrote. grid_dependency_trigger() lets the next kernel launch once every block
// of this one has called it or exited; it orders no memory (the next kernel's wait does). Every
// kernel of the forward calls it first, before its wait: the next kernel's launch and block
// placement then overlap this kernel's wait as well as its work (a kernel triggers only once all
// of its blocks are resident, so the next one's waiting blocks never take a slot this one still
// needs). Both compile to nothing below sm_90, where the runtime launches without the attribute.
// One exception: the swapped down GEMM (grouped_gemm_sm90_swap.cuh) reads what gate/up and the
// routing wrote after acquire loads of gate/up's counts instead (gate/up's own wait made the
// routing's outputs visible to it before it released them), and waits only before it exits.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// A count that another grid's threads wait for: `fence.acq_rel.gpu` orders what this thread wrote,
// and what it saw others write before it (a __syncwarp or a barrier), before the add, as CUTLASS's
// semaphores do; the waiting thread loads it with load_acquire_gpu.
__device__ __forceinline__ void red_add_release_gpu(int* p, int v) {
  asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v)
               : "memory");
}

__device__ __forceinline__ int load_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(p));
  return address;
}

// 16-byte asynchronous copy global -> shared; with `valid` false the destination is zero-filled
// and the source is not read.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
// The same copy with an L2 eviction policy from l2_evict_first_policy() (or createpolicy).
__device__ __forceinline__ void cp_async_16_hint(unsigned dst, const void* src, bool valid,
                                                 unsigned long long policy) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst),
               "l"(src), "r"(src_bytes), "l"(policy));
}
// An L2 policy for data read once: its lines are the first to go when L2 needs room, so a stream
// of them does not evict what other blocks will still read.
__device__ __forceinline__ unsigned long long l2_evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// Asks L2 to fetch the 128-byte line holding `p` (no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// Four 8 x 8 matrices of 16-bit elements to shared memory, transposed: r[i] holds matrix i's
// row lane / 4, columns 2 (lane % 4) and + 1 (ldmatrix's layout); lane l gives the address of
// row l % 8 of matrix l / 8 (16 bytes), where that row receives column l % 8 of the matrix.
__device__ __forceinline__ void stmatrix_x4_trans(unsigned address, const unsigned (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}
// A 16-byte load from shared memory.
__device__ __forceinline__ uint4 ld_shared_v4(unsigned address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

}  // namespace rt_moe
