// How reads load the fabric between the H200's two L2 partitions (docs/PERF.md version 14).
// Three read patterns, each profiled by ncu for DRAM bytes, L2 sectors and the fabric's activity:
//   stream:  every byte of a 4 GiB buffer read once (the HBM read ceiling's pattern);
//   shared:  every block reads the same 16 MiB (L2-resident) buffer, from its own start;
//   private: every block reads its own 128 KiB slice (17 MiB in all, L2-resident), again and again.
// If an L2 partition keeps copies of lines homed in the other one, the shared pattern stops
// crossing the fabric once warm; if not, about half its reads cross it.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o l2_fabric l2_fabric.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include "cuda_check.h"
#include "read_sink.h"

__global__ void stream_read(const int4* p, size_t n, int4* out) {
  int4 acc{0, 0, 0, 0};
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    fold(acc, __ldcg(p + i));
  sink(acc, out);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const size_t big = 4ull << 30, shared_bytes = 16ull << 20, slice = 128ull << 10;
  int4 *buf, *out;
  CHECK(cudaMalloc(&buf, big));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  CHECK(cudaMemset(buf, 0x5a, big));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto timed = [&](const char* name, double bytes, auto launch) {
    launch();  // warm
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    std::printf("%-8s %9.3f ms %8.1f GB/s (bytes the SMs read)\n", name, ms, bytes / ms / 1e6);
  };
  const int reps = 16;
  timed("stream", double(big), [&] { stream_read<<<sms * 4, 512>>>(buf, big / 16, out); });
  timed("shared", double(shared_bytes) * sms * reps,
        [&] { shared_read<<<sms, 1024>>>(buf, shared_bytes / 16, reps, out); });
  timed("private", double(slice) * sms * reps * 8,
        [&] { private_read<<<sms, 1024>>>(buf, slice / 16, reps * 8, out); });
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}
