#include "driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string_view>
#include <type_traits>

#include "base/log.h"

namespace rt_moe::driver {
namespace {

// The API version to ask cuGetProcAddress for, so that the function returned has the ABI of
// cuda.h's declaration, which the table's member types are. For most functions that is
// CUDA_VERSION: the header maps the name to the newest ABI. A few names keep their original
// declaration while the driver, asked at CUDA_VERSION, returns a newer ABI with more parameters
// (cudaTypedefs.h: PFN_cuCtxSynchronize_v13000 takes a context, PFN_cuStreamGetCtx_v12050 a green
// context); calling that through the old declaration passes garbage (a crash in cuStreamGetCtx
// was how this showed).
constexpr int abi_version(std::string_view name) {
  if (name == "cuStreamGetCtx") return 9020;
  if (name == "cuCtxSynchronize" || name == "cuCtxGetDevice") return 2000;
  return CUDA_VERSION;
}
static_assert(std::is_same_v<decltype(&::cuStreamGetCtx), PFN_cuStreamGetCtx_v9020>,
              "cuStreamGetCtx is declared with its 9.2 ABI: abi_version must say so");
static_assert(std::is_same_v<decltype(&::cuCtxSynchronize), PFN_cuCtxSynchronize_v2000>,
              "cuCtxSynchronize is declared with its 2.0 ABI: abi_version must say so");
static_assert(std::is_same_v<decltype(&::cuCtxGetDevice), PFN_cuCtxGetDevice_v2000>,
              "cuCtxGetDevice is declared with its 2.0 ABI: abi_version must say so");

struct Loaded {
  Api api;
  std::string error;  // non-empty: loading failed, and why
};

Loaded load() {
  Loaded loaded;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.error = fmt::format(
        "the CUDA driver (libcuda.so.1) could not be loaded ({}); a GPU and its driver are needed "
        "to run kernels",
        why != nullptr ? why : "unknown reason");
    return loaded;
  }
  using GetProcAddress = decltype(&::cuGetProcAddress_v2);
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    loaded.error = "libcuda.so.1 has no cuGetProcAddress_v2: the driver is older than CUDA 12";
    return loaded;
  }
  std::string missing;
#define RT_MOE_LOAD_FUNCTION(name)                                                        \
  {                                                                                       \
    void* fn = nullptr;                                                                   \
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;         \
    if (get_proc(#name, &fn, abi_version(#name), CU_GET_PROC_ADDRESS_DEFAULT, &status) != \
            CUDA_SUCCESS ||                                                               \
        fn == nullptr) {                                                                  \
      missing += std::string(missing.empty() ? "" : ", ") + #name;                        \
    }                                                                                     \
    loaded.api.name = reinterpret_cast<decltype(loaded.api.name)>(fn);                    \
  }
  RT_MOE_DRIVER_FUNCTIONS(RT_MOE_LOAD_FUNCTION)
#undef RT_MOE_LOAD_FUNCTION
  if (!missing.empty()) {
    loaded.error = fmt::format(
        "the CUDA driver lacks {} at API version {}: rt_moe needs a driver for CUDA {}.{} or newer",
        missing, CUDA_VERSION, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return loaded;
  }
  if (CUresult r = loaded.api.cuInit(0); r != CUDA_SUCCESS) {
    const char* name = nullptr;
    loaded.api.cuGetErrorName(r, &name);
    loaded.error = fmt::format("cuInit failed ({}): no usable GPU", name != nullptr ? name : "?");
    return loaded;
  }
  int version = 0;
  loaded.api.cuDriverGetVersion(&version);
  log().debug("CUDA driver loaded, version {}", version);
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::kNoDriver, l.error);
  return l.api;
}

bool available(std::string* why_not) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why_not != nullptr) *why_not = l.error;
    return false;
  }
  int count = 0;
  if (l.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    if (why_not != nullptr) *why_not = "the CUDA driver sees no device";
    return false;
  }
  return true;
}

std::string error_text(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  const Loaded& l = loaded();
  if (l.error.empty()) {
    l.api.cuGetErrorName(result, &name);
    l.api.cuGetErrorString(result, &text);
  }
  return fmt::format("{}: {}", name != nullptr ? name : fmt::format("CUresult {}", int(result)),
                     text != nullptr ? text : "no description");
}

void check(CUresult result, const char* expr, const char* file, int line) {
  if (result == CUDA_SUCCESS) return;
  throw Error(ErrorCode::kCuda,
              fmt::format("{} failed at {}:{}: {}", expr, file, line, error_text(result)));
}

std::string DeviceInfo::arch() const {
  // The 'a' targets (sm_90a, sm_100a) unlock wgmma / tcgen05 and run only on that exact chip.
  bool arch_specific = cc_major >= 9;
  return fmt::format("sm_{}{}{}", cc_major, cc_minor, arch_specific ? "a" : "");
}

DeviceInfo device_info(int ordinal) {
  const Api& a = api();
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice device = 0;
  RT_MOE_CALL(cuDeviceGet, &device, ordinal);
  char name[256] = {};
  RT_MOE_CALL(cuDeviceGetName, name, sizeof(name), device);
  info.name = name;
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    RT_MOE_CU(a.cuDeviceGetAttribute(&value, which, device));
    return value;
  };
  info.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.max_smem_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  RT_MOE_CALL(cuDriverGetVersion, &info.driver_version);
  char bus_id[32] = {};
  RT_MOE_CALL(cuDeviceGetPCIBusId, bus_id, int(sizeof(bus_id)), device);
  info.pci_bus_id = bus_id;
  return info;
}

PrimaryContext::PrimaryContext(int ordinal) {
  RT_MOE_CALL(cuDeviceGet, &device_, ordinal);
  RT_MOE_CALL(cuDevicePrimaryCtxRetain, &context_, device_);
}

PrimaryContext::~PrimaryContext() {
  if (context_ != nullptr) api().cuDevicePrimaryCtxRelease(device_);
}

ScopedContext::ScopedContext(CUcontext context) {
  CUcontext current = nullptr;
  RT_MOE_CALL(cuCtxGetCurrent, &current);
  if (current != context) {
    RT_MOE_CALL(cuCtxPushCurrent, context);
    pushed_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (pushed_) {
    CUcontext popped = nullptr;
    api().cuCtxPopCurrent(&popped);
  }
}

namespace {

// "device N" for a context, "device ?" when the driver cannot say; for error messages only.
std::string device_of(CUcontext context) {
  const Api& a = api();
  if (a.cuCtxPushCurrent(context) != CUDA_SUCCESS) return "device ?";
  CUdevice device = 0;
  const bool known = a.cuCtxGetDevice(&device) == CUDA_SUCCESS;
  CUcontext popped = nullptr;
  a.cuCtxPopCurrent(&popped);
  return known ? fmt::format("device {}", int(device)) : "device ?";
}

}  // namespace

bool check_stream_context(CUstream stream, CUcontext expected, const char* what) {
  // The special handles mean "the current context's stream": cuStreamGetCtx would only echo the
  // current context back. The legacy stream cannot be captured.
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return false;
  const Api& a = api();
  // NOTES: the driver documentation does not say that cuStreamGetCtx is legal on a capturing
  // stream, and its sibling query cuStreamGetDevice was reported to fail during stream capture
  // (NVIDIA/cccl#9119); an illegal call would invalidate the caller's capture. So a capturing
  // stream is only asked cuStreamGetCaptureInfo, the query made for capture, and is not checked:
  // a stream of another context is then left to the driver's errors.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult queried =
      a.cuStreamGetCaptureInfo(stream, &capture, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (queried == CUDA_SUCCESS && capture != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  if (stream != CU_STREAM_PER_THREAD) {
    CUcontext owner = nullptr;
    if (CUresult r = a.cuStreamGetCtx(stream, &owner); r != CUDA_SUCCESS) {
      throw Error(ErrorCode::kCuda, fmt::format("{}: cuStreamGetCtx(stream {}) failed: {}", what,
                                                fmt::ptr(stream), error_text(r)));
    }
    if (owner != expected) {
      const std::string device = device_of(expected);
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: stream {} belongs to context {} ({}), not to {}'s primary "
                              "context {} that this runtime uses; create the stream while that "
                              "context is current (with the CUDA runtime: cudaSetDevice on that "
                              "device)",
                              what, fmt::ptr(stream), fmt::ptr(owner), device_of(owner), device,
                              fmt::ptr(expected)));
    }
  }
  if (queried != CUDA_SUCCESS) {
    throw Error(ErrorCode::kCuda, fmt::format("{}: cuStreamGetCaptureInfo(stream {}) failed: {}",
                                              what, fmt::ptr(stream), error_text(queried)));
  }
  return false;
}

// Destroy functions run in destructors: they log instead of throwing.
void destroy_module(CUmodule m) noexcept {
  if (CUresult r = api().cuModuleUnload(m); r != CUDA_SUCCESS) {
    log().warn("cuModuleUnload failed: {}", error_text(r));
  }
}
void destroy_stream(CUstream s) noexcept {
  if (CUresult r = api().cuStreamDestroy(s); r != CUDA_SUCCESS) {
    log().warn("cuStreamDestroy failed: {}", error_text(r));
  }
}
void destroy_event(CUevent e) noexcept {
  if (CUresult r = api().cuEventDestroy(e); r != CUDA_SUCCESS) {
    log().warn("cuEventDestroy failed: {}", error_text(r));
  }
}
void free_device(CUdeviceptr p) noexcept {
  if (CUresult r = api().cuMemFree(p); r != CUDA_SUCCESS) {
    log().warn("cuMemFree failed: {}", error_text(r));
  }
}
void destroy_graph(CUgraph g) noexcept {
  if (CUresult r = api().cuGraphDestroy(g); r != CUDA_SUCCESS) {
    log().warn("cuGraphDestroy failed: {}", error_text(r));
  }
}
void destroy_graph_exec(CUgraphExec g) noexcept {
  if (CUresult r = api().cuGraphExecDestroy(g); r != CUDA_SUCCESS) {
    log().warn("cuGraphExecDestroy failed: {}", error_text(r));
  }
}

Stream Stream::create() {
  CUstream stream = nullptr;
  RT_MOE_CALL(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  return Stream(stream);
}

void Stream::synchronize() const { RT_MOE_CALL(cuStreamSynchronize, get()); }

Event create_event(bool timing) {
  CUevent event = nullptr;
  RT_MOE_CALL(cuEventCreate, &event, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  return Event(event);
}

float elapsed_ms(CUevent start, CUevent stop) {
  float ms = 0;
  RT_MOE_CALL(cuEventElapsedTime, &ms, start, stop);
  return ms;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  CUresult r = api().cuMemAlloc(&ptr_, bytes);
  if (r != CUDA_SUCCESS) {
    ptr_ = 0;
    throw Error(ErrorCode::kCuda, fmt::format("cuMemAlloc of {} bytes ({:.2f} GiB) failed: {}",
                                              bytes, bytes / double(1ull << 30), error_text(r)));
  }
}

void DeviceBuffer::reset() noexcept {
  if (ptr_ != 0) free_device(ptr_);
  ptr_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("upload of {} bytes at offset {} overruns a {}-byte buffer", bytes,
                            offset, bytes_));
  }
  if (bytes != 0) RT_MOE_CALL(cuMemcpyHtoD, ptr_ + offset, host, bytes);
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("download of {} bytes at offset {} overruns a {}-byte buffer", bytes,
                            offset, bytes_));
  }
  if (bytes != 0) RT_MOE_CALL(cuMemcpyDtoH, host, ptr_ + offset, bytes);
}

}  // namespace rt_moe::driver
