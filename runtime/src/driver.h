// The CUDA Driver API, loaded with dlopen on first use (the stub is never linked), so the library,
// its tools and the CPU tests run on machines with no GPU or driver. GPU entry points then throw
// Error(kNoDriver) saying what is missing.
//
// Every handle lives in a move-only RAII type whose destructor never throws.
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>

#include <cstddef>
#include <string>
#include <utility>

#include "rt_moe/error.h"

namespace rt_moe::driver {

// X-macro of every driver function rt_moe calls. The member types come from cuda.h's declarations
// (decltype of the versioned symbol the header maps each name to), and cuGetProcAddress is asked
// for the same API version (CUDA_VERSION), so signature and symbol can never drift apart.
// clang-format off
#define RT_MOE_DRIVER_FUNCTIONS(X)                                                                \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)            \
  X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice)            \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSynchronize) X(cuModuleLoadData)                  \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncSetAttribute)             \
  X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)              \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                       \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuStreamCreate)                   \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamGetCtx) X(cuStreamGetCaptureInfo)           \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)   \
  X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)     \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuPointerGetAttribute)                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuLaunchKernelEx) X(cuTensorMapEncodeTiled)    \
  X(cuCtxCreate) X(cuCtxDestroy) X(cuOccupancyMaxActiveClusters) X(cuProfilerStart)              \
  X(cuProfilerStop) X(cuDeviceGetPCIBusId) X(cuMemGetAddressRange) X(cuMemAddressReserve)        \
  X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)  \
  X(cuMemGetAllocationGranularity)
// clang-format on

struct Api {
#define RT_MOE_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  RT_MOE_DRIVER_FUNCTIONS(RT_MOE_DECLARE_MEMBER)
#undef RT_MOE_DECLARE_MEMBER
};

// Loads libcuda and cuInit()s once; throws Error(kNoDriver) when that fails (every later call
// throws the same error again, without retrying the load).
const Api& api();

// True when a driver is loadable and at least one device is visible; never throws.
bool available(std::string* why_not = nullptr);

// Throws Error(kCuda) naming the call, file:line and the CUDA error when `result` is not success.
void check(CUresult result, const char* expr, const char* file, int line);
std::string error_text(CUresult result);  // "CUDA_ERROR_X: text"

#define RT_MOE_CU(expr) ::rt_moe::driver::check((expr), #expr, __FILE__, __LINE__)
// Calls api().fn(args...) and checks it: RT_MOE_CALL(cuMemAlloc, &ptr, bytes).
#define RT_MOE_CALL(fn, ...) \
  ::rt_moe::driver::check(::rt_moe::driver::api().fn(__VA_ARGS__), #fn, __FILE__, __LINE__)

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int max_smem_optin = 0;    // bytes of shared memory a block may opt in to
  int driver_version = 0;    // e.g. 13000
  std::string pci_bus_id;    // "0000:3b:00.0": how NVML names the same device (tools/power.h)
  std::string arch() const;  // exact arch: "sm_90a" on Hopper (wgmma needs the 'a' target)
};
DeviceInfo device_info(int ordinal);

// The primary context of a device, retained for this object's life: the same context the CUDA
// runtime uses, so pointers from cudaMalloc work with rt_moe and the other way round.
class PrimaryContext {
 public:
  PrimaryContext() = default;
  explicit PrimaryContext(int ordinal);
  ~PrimaryContext();
  PrimaryContext(PrimaryContext&& other) noexcept { swap(other); }
  PrimaryContext& operator=(PrimaryContext&& other) noexcept {
    PrimaryContext(std::move(other)).swap(*this);
    return *this;
  }
  CUcontext get() const { return context_; }
  CUdevice device() const { return device_; }
  void swap(PrimaryContext& other) noexcept {
    std::swap(context_, other.context_);
    std::swap(device_, other.device_);
  }

 private:
  CUcontext context_ = nullptr;
  CUdevice device_ = 0;
};

// Makes a context current for a scope, restoring the previous one after.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  bool pushed_ = false;
};

// Throws Error(kInvalidArgument) when `stream` was created in a context other than `expected`
// (the device's primary context the caller launches in), naming both contexts and their devices;
// `what` names the caller ("forward"). Returns whether the stream is being captured into a CUDA
// graph. The null stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD stand for the current
// context's stream and are accepted as they are (the legacy stream is never captured), and so is
// a stream being captured (driver.cpp says why). Throws Error(kCuda) when the stream's context
// or capture status cannot be read.
bool check_stream_context(CUstream stream, CUcontext expected, const char* what);

// Generic move-only owner of a driver handle with a non-throwing destroy function.
template <typename Handle, void (*Destroy)(Handle)>
class Unique {
 public:
  Unique() = default;
  explicit Unique(Handle handle) : handle_(handle) {}
  ~Unique() { reset(); }
  Unique(Unique&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  Unique& operator=(Unique&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  Unique(const Unique&) = delete;
  Unique& operator=(const Unique&) = delete;
  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }
  void reset() noexcept {
    if (handle_ != Handle{}) Destroy(handle_);
    handle_ = Handle{};
  }

 private:
  Handle handle_{};
};

void destroy_module(CUmodule) noexcept;
void destroy_stream(CUstream) noexcept;
void destroy_event(CUevent) noexcept;
void free_device(CUdeviceptr) noexcept;
void destroy_graph(CUgraph) noexcept;
void destroy_graph_exec(CUgraphExec) noexcept;

using Module = Unique<CUmodule, destroy_module>;
using Event = Unique<CUevent, destroy_event>;
using Graph = Unique<CUgraph, destroy_graph>;
using GraphExec = Unique<CUgraphExec, destroy_graph_exec>;

class Stream : public Unique<CUstream, destroy_stream> {
 public:
  using Unique::Unique;
  static Stream create();  // non-blocking with respect to the legacy default stream
  void synchronize() const;
};

Event create_event(bool timing = true);
float elapsed_ms(CUevent start, CUevent stop);

// Device memory, move-only. Never copyable: a copy of a device buffer is always an explicit call.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);  // throws Error(kCuda) with the size on failure
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  void reset() noexcept;

  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace rt_moe::driver
