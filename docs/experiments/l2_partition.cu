// Which of the H200's two L2 partitions homes a line, as seen from one SM (docs/PERF.md version
// 18). 14b found that a stream of reads sends half its sectors across the fabric between the
// partitions, and that at the HBM read ceiling the fabric is ~96% busy; if the home of a line
// follows a simple function of its address, a reader could take only lines of its own partition.
//
// One thread on one SM writes a line (the write goes to the line's home partition), then times
// a read of it that bypasses L1 (ld.volatile.global): a line homed in the reader's partition is a
// near L2 hit, one homed in the other crosses the fabric. A second read right after shows whether
// the reader's partition kept a copy (14b's "shared" pattern: read again, not crossed again).
//   fine:   the first 65536 lines of the buffer (8 MiB), one after another;
//   coarse: 16384 lines 64 KiB apart (1 GiB);
//   sms:    every SM (one block each, one thread) times 256 lines of `fine` of its own, so that
//           SMs can be sorted by partition (one of the other partition sees `fine`'s near and
//           far swapped).
// Since version 38 (PERF.md 38d) each line is also timed by an atomic (timed_atomic: done at the
// line's home slice, whatever copy a partition holds), and the `sms` rows time atomics only.
// Writes text: "fine OFFSET LAT1 LAT2 ATOM smID" (offset in bytes from the buffer's start),
// "coarse ...", "sm ID FIRST_LINE ATOM[0..255]", and the buffer's device address.
// Outcome (PERF.md 18c): inconclusive. The run of 18c read with ld.global.cg, and the second
// read timed 4 cycles: ptxas may merge two non-volatile loads of one address, or the clock did not
// wait. The reads are ld.volatile.global since. The SASS, read here with nvdisasm (session 45):
// CS2R (clock), LDG.E.STRONG.SYS, STS of the loaded value, CS2R; and S2UR (clock),
// ATOMG.E.ADD.STRONG.GPU, STS of its result, CS2R: the second clock of each waits for its data.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o l2_partition l2_partition.cu
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "l2_probe.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

// Times a write-then-read, a second read and an atomic of each line at offsets[b * n + i]
// (bytes) by thread 0 of block b, which writes its results at lat[(b * n + i) * 3 + {0, 1, 2}]
// and its SM at sm[b]. With atomics_only, only the atomic (the other two read 0).
__global__ void probe(unsigned* buf, const long long* offsets, int n, unsigned* lat, unsigned* sm,
                      bool atomics_only) {
  if (threadIdx.x != 0) return;
  sm[blockIdx.x] = smid();
  for (int i = 0; i < n; ++i) {
    const long long at = blockIdx.x * (long long)n + i;
    unsigned* p = reinterpret_cast<unsigned*>(reinterpret_cast<char*>(buf) + offsets[at]);
    lat[at * 3 + 0] = atomics_only ? 0 : write_then_read(p, i + 1);
    lat[at * 3 + 1] = atomics_only ? 0 : timed_read(p);
    lat[at * 3 + 2] = timed_atomic(p);
  }
}

// offsets: `blocks` runs of n lines each.
static void run(unsigned* buf, const std::vector<long long>& offsets, int blocks,
                std::vector<unsigned>& lat, std::vector<unsigned>& sm, bool atomics_only) {
  long long* d_off;
  unsigned *d_lat, *d_sm;
  const int n = int(offsets.size() / blocks);
  CHECK(cudaMalloc(&d_off, sizeof(long long) * n * blocks));
  CHECK(cudaMalloc(&d_lat, sizeof(unsigned) * 3 * n * blocks));
  CHECK(cudaMalloc(&d_sm, sizeof(unsigned) * blocks));
  CHECK(cudaMemcpy(d_off, offsets.data(), sizeof(long long) * n * blocks, cudaMemcpyHostToDevice));
  probe<<<blocks, 32>>>(buf, d_off, n, d_lat, d_sm, atomics_only);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  lat.resize(size_t(3) * n * blocks);
  sm.resize(blocks);
  CHECK(cudaMemcpy(lat.data(), d_lat, sizeof(unsigned) * lat.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sm.data(), d_sm, sizeof(unsigned) * blocks, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d_off));
  CHECK(cudaFree(d_lat));
  CHECK(cudaFree(d_sm));
}

int main() {
  const size_t bytes = size_t(1) << 30;
  unsigned* buf;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMemset(buf, 0, bytes));
  std::printf("buffer 0x%llx\n", (unsigned long long)buf);
  std::vector<unsigned> lat, sm;

  std::vector<long long> fine(65536);
  for (size_t i = 0; i < fine.size(); ++i) fine[i] = (long long)i * 128;
  run(buf, fine, 1, lat, sm, false);
  for (size_t i = 0; i < fine.size(); ++i) {
    std::printf("fine %lld %u %u %u sm%u\n", fine[i], lat[3 * i], lat[3 * i + 1], lat[3 * i + 2],
                sm[0]);
  }

  std::vector<long long> coarse(16384);
  for (size_t i = 0; i < coarse.size(); ++i) coarse[i] = (long long)i * 65536;
  run(buf, coarse, 1, lat, sm, false);
  for (size_t i = 0; i < coarse.size(); ++i) {
    std::printf("coarse %lld %u %u %u sm%u\n", coarse[i], lat[3 * i], lat[3 * i + 1],
                lat[3 * i + 2], sm[0]);
  }

  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  // Block b takes lines [256 b, 256 b + 256) of `fine`: no two blocks touch a line (a copy one
  // SM's read left in its partition would serve another's). As many blocks as SMs: the SM ids
  // are printed, so a doubled SM shows.
  const int sms = prop.multiProcessorCount;
  std::vector<long long> few(fine.begin(), fine.begin() + 256 * sms);
  run(buf, few, sms, lat, sm, true);
  for (int b = 0; b < sms; ++b) {
    std::printf("sm %u %d", sm[b], 256 * b);
    for (int i = 0; i < 256; ++i) std::printf(" %u", lat[(size_t(b) * 256 + i) * 3 + 2]);
    std::printf("\n");
  }
  CHECK(cudaFree(buf));
  return 0;
}
