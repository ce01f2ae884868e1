// Can a read stream go faster than the HBM read ceiling if every SM reads only lines homed in its
// own L2 partition (docs/PERF.md version 18)? 14b found a plain stream sending half its sectors
// across the fabric between the two partitions, ~96% busy at the ceiling. l2_partition.cu found
// the home of a line within a 2 MiB page to be an XOR of offset bits (MASK, an argument); the
// page's own contribution (its physical frame) is measured here, one line a page.
//
//   1. Block 0 times an atomic on the first line of every 2 MiB page: the page's phase (near or
//      far for block 0's SM, XOR the mask's parity of that line's offset: 0).
//   2. One block an SM (the dynamic shared memory allows one) times 64 lines of page 0 and sorts
//      itself into block 0's partition (its near and far agree with block 0's) or the other.
//   3. Streams: every line read once (plain), each SM reading only lines of its own partition
//      (local), and each only lines of the other (remote), timed by events, best of 5, 4 GiB.
//
// Not run yet: it needs the mask that l2_partition.cu is to find (PERF.md 18c, 38d). Since 38d
// both probes time atomics (timed_atomic: done at the line's home slice), not a read right after
// a write, which a copy in the reader's partition may serve.
// Usage: l2_local_stream MASK_HEX   (e.g. 0x2a00: bits of the offset inside a 2 MiB page)
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o l2_local_stream l2_local_stream.cu
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "l2_probe.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr long long kPage = 2ll << 20;
constexpr int kThreads = 512;

__device__ __forceinline__ int parity(unsigned long long x) { return __popcll(x) & 1; }

__global__ void page_phases(unsigned* buf, int pages, unsigned* lat) {
  if (threadIdx.x != 0) return;
  for (int i = 0; i < pages; ++i) {
    lat[i] = timed_atomic(reinterpret_cast<unsigned*>(reinterpret_cast<char*>(buf) + i * kPage));
  }
}

// Block b on its SM times 64 lines of page 1 (lines 1024 b.. of it: no two blocks share one).
__global__ void sm_probe(unsigned* buf, unsigned* lat, unsigned* sm) {
  extern __shared__ unsigned char fill[];  // one block an SM
  if (threadIdx.x != 0) return;
  fill[0] = 0;
  sm[blockIdx.x] = smid();
  for (int i = 0; i < 64; ++i) {
    const long long off = kPage + (blockIdx.x * 64ll + i) * 128;
    lat[blockIdx.x * 64 + i] =
        timed_atomic(reinterpret_cast<unsigned*>(reinterpret_cast<char*>(buf) + off));
  }
}

// mode 0: every line, 1: lines of the block's partition only, 2: of the other only. A line's
// partition, in block 0's terms: parity(offset & mask) ^ phase[page]. part[smid]: the SM's.
// The blocks of one partition walk all tiles between them (rank[smid] among them, count[p] of
// them), so each mode reads every line of the buffer once in all.
template <int UNROLL>
__global__ void stream(const int4* buf, long long lines, unsigned long long mask,
                       const unsigned char* phase, const unsigned char* part, const int* rank,
                       const int* count, int mode, int4* out) {
  extern __shared__ unsigned char fill[];
  const unsigned s = smid();
  const int p = part[s];
  int4 acc{0, 0, 0, 0};
  // Tiles of 64 lines (8 KiB, 512 chunks of 16 bytes): thread t reads chunk t of the tile when
  // its line belongs to the partition this mode reads. UNROLL tiles' loads are issued before
  // any is used.
  const long long tiles = lines / 64;
  const int my_rank = mode == 0 ? int(blockIdx.x) : rank[s];
  const int stride = mode == 0 ? gridDim.x : count[p];
  for (long long tile = my_rank; tile < tiles; tile += UNROLL * (long long)stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long t = tile + u * (long long)stride;
      const long long off = (t * 64 + threadIdx.x / 8) * 128;
      const int home = parity(off & mask) ^ phase[off / kPage];
      const bool take = t < tiles && (mode == 0 || (mode == 1 ? home == p : home != p));
      v[u] = take ? __ldcs(buf + t * 512 + threadIdx.x) : int4{0, 0, 0, 0};
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      acc.x ^= v[u].x;
      acc.y ^= v[u].y;
      acc.z ^= v[u].z;
      acc.w ^= v[u].w;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) out[threadIdx.x] = acc;
  if (threadIdx.x == 0 && fill[0] == 1) out[0] = acc;
}

static unsigned split(std::vector<unsigned> v) {
  std::vector<unsigned> s(v);
  std::sort(s.begin(), s.end());
  const unsigned lo = s[s.size() / 20], hi = s[s.size() * 19 / 20];
  unsigned best = lo, gap = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] >= lo && s[i + 1] <= hi && s[i + 1] - s[i] > gap) {
      gap = s[i + 1] - s[i];
      best = s[i] + gap / 2;
    }
  }
  return best;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MASK_HEX\n", argv[0]);
    return 2;
  }
  const unsigned long long mask = std::strtoull(argv[1], nullptr, 16);
  const long long bytes = 4ll << 30, lines = bytes / 128;
  const int pages = int(bytes / kPage);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const int smem = int(prop.sharedMemPerMultiprocessor / 2 + 1024);  // > half: one block an SM
  CHECK(cudaFuncSetAttribute(sm_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(stream<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(stream<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned* buf;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMemset(buf, 1, bytes));

  unsigned* d_lat;
  unsigned* d_sm;
  CHECK(cudaMalloc(&d_lat, sizeof(unsigned) * 64 * 1024));
  CHECK(cudaMalloc(&d_sm, sizeof(unsigned) * 1024));
  page_phases<<<1, 32>>>(buf, pages, d_lat);
  CHECK(cudaGetLastError());
  std::vector<unsigned> lat(pages);
  CHECK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * pages, cudaMemcpyDeviceToHost));
  const unsigned t = split(lat);
  std::vector<unsigned char> phase(pages);
  int far_pages = 0;
  for (int i = 0; i < pages; ++i) far_pages += phase[i] = lat[i] > t;
  std::printf("pages: %d, threshold %u cycles, %d far for block 0's SM\n", pages, t, far_pages);

  sm_probe<<<sms, 32, smem>>>(buf, d_lat, d_sm);
  CHECK(cudaGetLastError());
  std::vector<unsigned> sl(sms * 64), sm(sms);
  CHECK(cudaMemcpy(sl.data(), d_lat, sizeof(unsigned) * sl.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sm.data(), d_sm, sizeof(unsigned) * sms, cudaMemcpyDeviceToHost));
  std::vector<unsigned char> part(1024, 0);
  int counts[2] = {0, 0};
  std::vector<int> seen(1024, 0);
  for (int b = 0; b < sms; ++b) {
    std::vector<unsigned> mine(sl.begin() + b * 64, sl.begin() + b * 64 + 64);
    const unsigned tb = split(mine);
    int agree = 0;
    for (int i = 0; i < 64; ++i) {
      const long long off = kPage + (b * 64ll + i) * 128;
      const int expect = __builtin_parityll(off & mask) ^ phase[1];
      agree += (mine[i] > tb) == expect;
    }
    part[sm[b]] = agree < 32;  // 0: block 0's partition
    ++counts[part[sm[b]]];
    ++seen[sm[b]];
    std::printf("sm %u agree %d/64 partition %d\n", sm[b], agree, part[sm[b]]);
  }
  for (int s = 0; s < 1024; ++s) {
    if (seen[s] > 1) std::printf("warning: SM %d ran %d probe blocks\n", s, seen[s]);
  }
  std::printf("partitions: %d and %d SMs\n", counts[0], counts[1]);

  // Ranks among each partition's SMs, by SM id (blocks land on SMs as they please).
  std::vector<int> rank_of_sm(1024, 0), count(2, 0);
  for (int s = 0; s < 1024; ++s) {
    if (seen[s]) rank_of_sm[s] = count[part[s]]++;
  }
  unsigned char *d_phase, *d_part;
  int *d_rank, *d_count;
  int4* d_out;
  CHECK(cudaMalloc(&d_phase, pages));
  CHECK(cudaMalloc(&d_part, 1024));
  CHECK(cudaMalloc(&d_rank, sizeof(int) * 1024));
  CHECK(cudaMalloc(&d_count, sizeof(int) * 2));
  CHECK(cudaMalloc(&d_out, sizeof(int4) * kThreads));
  CHECK(cudaMemcpy(d_phase, phase.data(), pages, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_part, part.data(), 1024, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_count, count.data(), sizeof(int) * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_rank, rank_of_sm.data(), sizeof(int) * 1024, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  // (mode, unroll): local and remote leave half the threads of a tile idle, so they get twice
  // the tiles in flight to keep as many bytes in flight as the plain stream.
  const int runs[4][2] = {{0, 4}, {0, 8}, {1, 8}, {2, 8}};
  const char* names[3] = {"plain (every line)", "local (own partition's lines)",
                          "remote (the other's lines)"};
  for (const auto& r : runs) {
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(e0));
      if (r[1] == 4) {
        stream<4><<<sms, kThreads, smem>>>(reinterpret_cast<const int4*>(buf), lines, mask, d_phase,
                                           d_part, d_rank, d_count, r[0], d_out);
      } else {
        stream<8><<<sms, kThreads, smem>>>(reinterpret_cast<const int4*>(buf), lines, mask, d_phase,
                                           d_part, d_rank, d_count, r[0], d_out);
      }
      CHECK(cudaEventRecord(e1));
      CHECK(cudaGetLastError());
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    std::printf("%-32s unroll %d: %.3f ms, %.0f GB/s (%.2f GB)\n", names[r[0]], r[1], best,
                double(bytes) / best / 1e6, double(bytes) / 1e9);
  }
  return 0;
}
