// In-process hardware counters for the quick classification (harness/profile/counters.py): CUPTI's Range
// Profiler collects the metrics of every kernel launched between `kbc_start_pass` and
// `kbc_stop_pass` in the calling process's current CUDA context (auto range: one range per
// launch), and CUPTI's callback API records each launch's kernel, grid, block and dynamic shared
// memory, so that ncu need not start a new process. Host code only; harness/check/cupti.py builds it
// with nvcc through the build cache (linked to libcupti by soname, with a run path to the
// toolkit's; CUPTI opens its libnvperf_* itself) and calls it with ctypes.
//
// Every exported function returns a JSON document (free it with kbc_free):
//   {"ok": true, ...}                      what the call produced, or
//   {"ok": false, "error": {"api": "cupti" | "cuda" | "library",
//    "call": "cuptiRangeProfilerEnable", "code": 35, "name": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
//    "message": "..."}}
// naming the call that failed and the result string CUPTI (or the driver) gives for its code.
//
// A profile, on the thread whose current context runs the kernels:
//   kbc_prepare(metrics)     once per metric list: CUPTI's profiler, the chip, which requested
//                            metrics it supports (the others are left out, each with the reason),
//                            the config image that schedules them into passes; kept for the next
//   kbc_begin(replay, n)     range profiler enabled with the config, room for n ranges; launch
//                            records on
//   kbc_start_pass()         \ around the launches. Kernel replay: CUPTI replays each kernel in
//   kbc_stop_pass()          / place, one pass is all. User replay: the caller repeats the same
//                            launches until stop says every pass was submitted.
//   kbc_end()                the counters decoded and evaluated per range, the launch records,
//                            everything disabled again; kbc_abort() only disables, after a failure.
// A kernel watch (verification's, harness/check/kernel_watch.py), on any thread:
//   kbc_watch_begin()        launch records on, for every context, nothing profiled
//   kbc_watch_end()          the launched kernels' names, and how many CUDA graph launches
//                            (whose kernels the launch callbacks do not see)
// kbc_check_metrics(chip, metrics) answers which metrics a chip supports without a GPU (CUPTI's
// host API knows the chips of its release by name): tests run it on machines without a GPU.
//
// The driver API (libcuda.so.1) is opened at run time, not linked, so the library loads where
// no driver is installed and the host-only calls work there.

#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#if CUPTI_API_VERSION < 24
#error "the CUPTI Range Profiler API (cupti_range_profiler.h) needs CUDA 12.6 or newer"
#endif

namespace {

// ---- JSON output --------------------------------------------------------------------------

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string number(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN: a metric without a value
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string strings(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + quote(items[i]);
  return out + "]";
}

char* reply(const std::string& json) {
  char* out = static_cast<char*>(std::malloc(json.size() + 1));
  if (out != nullptr) std::memcpy(out, json.c_str(), json.size() + 1);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- errors: the failing call, with CUPTI's or the driver's words for its result -----------

struct CallFailed : std::exception {
  std::string api, call, name, message;
  long code = 0;
  const char* what() const noexcept override { return message.c_str(); }
  std::string json() const {
    return "{\"ok\":false,\"error\":{\"api\":" + quote(api) + ",\"call\":" + quote(call) +
           ",\"code\":" + std::to_string(code) + ",\"name\":" + quote(name) +
           ",\"message\":" + quote(message) + "}}";
  }
};

[[noreturn]] void fail(const std::string& api, const std::string& call, long code,
                       const std::string& name, const std::string& message) {
  CallFailed failure;
  failure.api = api;
  failure.call = call;
  failure.code = code;
  failure.name = name;
  failure.message = message;
  throw failure;
}

// The loaded libcupti's handle and path: for diagnostics, and for its optional functions.
Dl_info cupti_library() {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info);
  return info;
}

// cuptiGetErrorMessage (a sentence, where cuptiGetResultString gives the enum's name) is not in
// every CUPTI of the Range Profiler's era: looked up, not linked.
std::string cupti_message(CUptiResult result) {
  using ErrorMessage = CUptiResult (*)(CUptiResult, const char**);
  static ErrorMessage error_message = [] {
    void* library = dlopen(cupti_library().dli_fname, RTLD_NOW | RTLD_NOLOAD);
    return library ? reinterpret_cast<ErrorMessage>(dlsym(library, "cuptiGetErrorMessage"))
                   : nullptr;
  }();
  const char* text = nullptr;
  if (error_message != nullptr && error_message(result, &text) == CUPTI_SUCCESS && text) {
    return text;
  }
  return "";
}

void check(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* name = nullptr;
  if (cuptiGetResultString(result, &name) != CUPTI_SUCCESS || name == nullptr) {
    name = "unknown CUPTI result";
  }
  std::string message = cupti_message(result);
  fail("cupti", call, result, name, message.empty() ? name : message);
}

// ---- the driver API, opened at run time ----------------------------------------------------

struct Driver {
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxGetDevice) ctx_get_device = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuFuncGetAttribute) func_get_attribute = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  // optional: a launch may pass a CUkernel (context-independent loading) where a CUfunction is
  // expected; these give its function and its name
  decltype(&::cuKernelGetFunction) kernel_get_function = nullptr;
  decltype(&::cuFuncGetName) func_get_name = nullptr;
  std::string path;
};

template <typename F>
void resolve(void* library, const char* symbol, F& into, bool required) {
  into = reinterpret_cast<F>(dlsym(library, symbol));
  if (into == nullptr && required) {
    fail("library", std::string("dlsym(libcuda.so.1, ") + symbol + ")", 0, "missing symbol",
         std::string("the NVIDIA driver's libcuda.so.1 exports no ") + symbol +
             ": the driver is older than this CUDA toolkit");
  }
}

const Driver& driver() {
  static std::unique_ptr<Driver> loaded;
  if (loaded) return *loaded;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) library = dlopen("libcuda.so.1", RTLD_NOW);
  if (library == nullptr) {
    const char* why = dlerror();
    fail("library", "dlopen(libcuda.so.1)", 0, "no driver", why ? why : "libcuda.so.1 not found");
  }
  auto api = std::make_unique<Driver>();
  resolve(library, "cuCtxGetCurrent", api->ctx_get_current, true);
  resolve(library, "cuCtxGetDevice", api->ctx_get_device, true);
  resolve(library, "cuCtxSynchronize", api->ctx_synchronize, true);
  resolve(library, "cuDeviceGetAttribute", api->device_get_attribute, true);
  resolve(library, "cuFuncGetAttribute", api->func_get_attribute, true);
  resolve(library, "cuGetErrorName", api->get_error_name, true);
  resolve(library, "cuGetErrorString", api->get_error_string, true);
  resolve(library, "cuKernelGetFunction", api->kernel_get_function, false);
  resolve(library, "cuFuncGetName", api->func_get_name, false);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(api->ctx_get_current), &info) && info.dli_fname) {
    api->path = info.dli_fname;
  }
  loaded = std::move(api);
  return *loaded;
}

std::string cuda_words(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  driver().get_error_name(result, &name);
  driver().get_error_string(result, &text);
  return std::string(name ? name : "unknown CUDA result") + ": " + (text ? text : "");
}

void check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  driver().get_error_name(result, &name);
  fail("cuda", call, result, name ? name : "unknown CUDA result", cuda_words(result));
}

// ---- CUPTI host objects: the chip's metrics and the config image ---------------------------

struct HostObject {
  CUpti_Profiler_Host_Object* object = nullptr;
  HostObject(const std::string& chip, const uint8_t* counter_availability) {
    CUpti_Profiler_Host_Initialize_Params params{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    params.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    params.pChipName = chip.c_str();
    params.pCounterAvailabilityImage = counter_availability;
    check(cuptiProfilerHostInitialize(&params), "cuptiProfilerHostInitialize");
    object = params.pHostObject;
  }
  ~HostObject() {
    CUpti_Profiler_Host_Deinitialize_Params params{
        CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    params.pHostObject = object;
    cuptiProfilerHostDeinitialize(&params);  // nothing to do about a failure while tearing down
  }
  HostObject(const HostObject&) = delete;
  HostObject& operator=(const HostObject&) = delete;
};

struct Unsupported {
  std::string metric, reason;
};

// Which requested metrics the chip has, and the config image that collects those.
struct MetricPlan {
  std::vector<std::string> supported;
  std::vector<Unsupported> unsupported;
  std::vector<uint8_t> config;
  size_t passes = 0;

  std::string json() const {
    std::string out = "\"supported\":" + strings(supported) + ",\"unsupported\":[";
    for (size_t i = 0; i < unsupported.size(); ++i) {
      out += std::string(i ? "," : "") + "{\"metric\":" + quote(unsupported[i].metric) +
             ",\"reason\":" + quote(unsupported[i].reason) + "}";
    }
    return out + "],\"passes\":" + std::to_string(passes) +
           ",\"config_bytes\":" + std::to_string(config.size());
  }
};

std::vector<const char*> pointers(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  for (const std::string& name : names) out.push_back(name.c_str());
  return out;
}

// ncu names some metrics per architecture: a metric the chip lacks is left out with CUPTI's
// reason instead of failing the whole configuration.
MetricPlan plan_metrics(CUpti_Profiler_Host_Object* host, const std::vector<std::string>& wanted) {
  MetricPlan plan;
  for (const std::string& metric : wanted) {
    CUpti_Profiler_Host_GetMetricProperties_Params params{
        CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
    params.pHostObject = host;
    params.pMetricName = metric.c_str();
    CUptiResult result = cuptiProfilerHostGetMetricProperties(&params);
    if (result == CUPTI_SUCCESS) {
      plan.supported.push_back(metric);
      continue;
    }
    const char* name = nullptr;
    cuptiGetResultString(result, &name);
    plan.unsupported.push_back({metric, std::string("cuptiProfilerHostGetMetricProperties: ") +
                                            (name ? name : "failed")});
  }
  if (plan.supported.empty()) {
    fail("library", "plan_metrics", 0, "no supported metric",
         "this chip supports none of the " + std::to_string(wanted.size()) + " requested metrics");
  }
  std::vector<const char*> names = pointers(plan.supported);
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = host;
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  check(cuptiProfilerHostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics");

  CUpti_Profiler_Host_GetConfigImageSize_Params size{
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = host;
  check(cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
  plan.config.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params image{
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  image.pHostObject = host;
  image.configImageSize = plan.config.size();
  image.pConfigImage = plan.config.data();
  check(cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");

  CUpti_Profiler_Host_GetNumOfPasses_Params passes{
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = plan.config.size();
  passes.pConfigImage = plan.config.data();
  check(cuptiProfilerHostGetNumOfPasses(&passes), "cuptiProfilerHostGetNumOfPasses");
  plan.passes = passes.numOfPasses;
  return plan;
}

std::vector<std::string> names_of(const char* const* metrics, size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) out.emplace_back(metrics[i] ? metrics[i] : "");
  return out;
}

// ---- the profiling state of this process ---------------------------------------------------

// One launch as the driver API received it (recorded in the callback; the function's
// attributes are read after the session, outside CUPTI's callback).
struct Launch {
  std::string name;  // mangled, as the launch's symbol
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, cluster[3] = {0, 0, 0};
  unsigned shared_dynamic = 0;
  int status = 0;  // the launch call's CUresult
  int pass = 0;
  bool graph = false;  // a CUDA graph's launch (a watch's only): its kernels go unnamed
};

const CUpti_CallbackId kLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};
const CUpti_CallbackId kGraphLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

// The launch calls' parameters as CUPTI passes them (CUpti_CallbackData::functionParams), laid out
// as generated_cuda_meta.h declares them; that header needs cuda.h's internal declarations, so
// the three layouts read here are restated. The _ptsz variants share their layouts, and a
// cooperative launch's is cuLaunchKernel's without its last member.
struct LaunchKernelParams {
  CUfunction f;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void** kernelParams;
};
struct LaunchKernelExParams {
  const CUlaunchConfig* config;
  CUfunction f;
  void** kernelParams;
  void** extra;
};

// What kbc_prepare found, kept while the context and the metric list stay the same.
struct Prepared {
  CUcontext context = nullptr;
  std::string device_support;  // what cuptiProfilerDeviceSupported said
  CUdevice device = 0;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  std::string chip;
  std::vector<std::string> requested;
  std::vector<uint8_t> counter_availability;
  std::unique_ptr<HostObject> host;
  MetricPlan plan;
};

struct Session {
  CUcontext context = nullptr;  // launches in other contexts are not this profile's (null: any)
  CUpti_RangeProfiler_Object* range = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::vector<uint8_t> counter_data;
  bool started = false;
  int pass = -1;  // the pass being recorded, 0-based
  // Launches count only between a pass's start and its stop: the caller's own work around the
  // passes (an L2 flush before each) is neither profiled nor recorded.
  std::atomic<bool> recording{false};
  std::mutex launches_lock;
  std::vector<Launch> launches;
  std::string launch_records_error;  // why launches are not recorded, if they are not
};

std::mutex g_lock;  // one profile at a time: CUPTI's profiler is per process
bool g_profiler_initialized = false;
std::unique_ptr<Prepared> g_prepared;
std::unique_ptr<Session> g_session;
std::unique_ptr<Session> g_watch;  // kbc_watch_begin's: launches recorded, nothing profiled

void CUPTIAPI record_launch(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void* data) {
  auto* session = static_cast<Session*>(userdata);
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || call->callbackSite != CUPTI_API_EXIT) return;
  if (!session->recording.load()) return;
  if (session->context != nullptr && call->context != session->context) return;
  Launch launch;
  auto dims = [&launch](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared) {
    launch.grid[0] = gx, launch.grid[1] = gy, launch.grid[2] = gz;
    launch.block[0] = bx, launch.block[1] = by, launch.block[2] = bz;
    launch.shared_dynamic = shared;
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      const auto* p = static_cast<const LaunchKernelParams*>(call->functionParams);
      launch.function = p->f;
      dims(p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
           p->sharedMemBytes);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* p = static_cast<const LaunchKernelExParams*>(call->functionParams);
      const CUlaunchConfig* config = p->config;
      launch.function = p->f;
      if (config == nullptr) break;
      dims(config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
           config->blockDimY, config->blockDimZ, config->sharedMemBytes);
      for (unsigned i = 0; config->attrs != nullptr && i < config->numAttrs; ++i) {
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
          const auto& cluster = config->attrs[i].value.clusterDim;
          launch.cluster[0] = cluster.x, launch.cluster[1] = cluster.y;
          launch.cluster[2] = cluster.z;
        }
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      launch.graph = true;
      break;
    default:
      return;
  }
  launch.name = call->symbolName ? call->symbolName : "";
  launch.status = call->functionReturnValue ? *static_cast<CUresult*>(call->functionReturnValue)
                                            : CUDA_SUCCESS;
  std::lock_guard<std::mutex> guard(session->launches_lock);
  launch.pass = session->pass;
  session->launches.push_back(launch);
}

// The driver's kernel launches recorded into `session` (and its graph launches, for a watch).
void subscribe_launches(Session& session, bool graphs) {
  check(cuptiSubscribe(&session.subscriber, record_launch, &session), "cuptiSubscribe");
  auto enable = [&session](CUpti_CallbackId id) {
    check(cuptiEnableCallback(1, session.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id),
          "cuptiEnableCallback");
  };
  for (CUpti_CallbackId id : kLaunchCallbacks) enable(id);
  if (graphs) {
    for (CUpti_CallbackId id : kGraphLaunchCallbacks) enable(id);
  }
}

// CUPTI takes one callback subscriber per process: where another holds the place (kineto, once
// torch.profiler ran), the counters are still collected and the session says why launches are
// not recorded.
void start_launch_records(Session& session) {
  try {
    subscribe_launches(session, false);
  } catch (const CallFailed& failure) {
    session.launch_records_error = failure.call + ": " + failure.name + ": " + failure.message;
    if (session.subscriber != nullptr) cuptiUnsubscribe(session.subscriber);
    session.subscriber = nullptr;
  }
}

// Undo whatever part of kbc_begin happened; every step is attempted, the first failure kept.
void tear_down(Session& session) {
  std::unique_ptr<CallFailed> first;
  auto attempt = [&first](CUptiResult result, const char* call) {
    try {
      check(result, call);
    } catch (const CallFailed& failure) {
      if (!first) first = std::make_unique<CallFailed>(failure);
    }
  };
  if (session.started) {
    CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = session.range;
    attempt(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
    session.started = false;
  }
  if (session.range != nullptr) {
    CUpti_RangeProfiler_Disable_Params disable{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    disable.pRangeProfilerObject = session.range;
    attempt(cuptiRangeProfilerDisable(&disable), "cuptiRangeProfilerDisable");
    session.range = nullptr;
  }
  if (session.subscriber != nullptr) {
    attempt(cuptiUnsubscribe(session.subscriber), "cuptiUnsubscribe");
    session.subscriber = nullptr;
  }
  if (first) throw *first;
}

// tear_down after a failure: that failure is the one to report, not one of the tear-down's.
void tear_down_after_failure(Session& session) {
  try {
    tear_down(session);
  } catch (const CallFailed&) {
    // the failure that got here is reported
  }
}

CUcontext current_context() {
  CUcontext context = nullptr;
  check(driver().ctx_get_current(&context), "cuCtxGetCurrent");
  if (context == nullptr) {
    fail("library", "cuCtxGetCurrent", 0, "no current context",
         "no CUDA context is current on the calling thread: run a CUDA call (e.g. the "
         "candidate's warm-up launch) on this thread first");
  }
  return context;
}

std::string support_level(CUpti_Profiler_Support_Level level) {
  switch (level) {
    case CUPTI_PROFILER_CONFIGURATION_SUPPORTED:
      return "supported";
    case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED:
      return "unsupported";
    case CUPTI_PROFILER_CONFIGURATION_DISABLED:
      return "disabled";
    default:
      return "unknown";
  }
}

// Whether CUPTI can profile the device; a device it can't (vGPU without profiling, confidential
// computing, ...) fails here with each condition named. Returns what the query said, for the
// diagnostics: a CUPTI that can't answer it (the query is newer than the Range Profiler) is
// not refused for that, its later calls tell.
std::string check_device_supported(CUdevice device) {
  CUpti_Profiler_DeviceSupported_Params params{CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  params.cuDevice = device;
  params.api = CUPTI_PROFILER_RANGE_PROFILING;
  const CUptiResult result = cuptiProfilerDeviceSupported(&params);
  if (result != CUPTI_SUCCESS) {
    const char* name = nullptr;
    cuptiGetResultString(result, &name);
    return std::string("cuptiProfilerDeviceSupported failed: ") + (name ? name : "");
  }
  const std::string levels =
      "architecture " + support_level(params.architecture) + ", SLI " + support_level(params.sli) +
      ", vGPU " + support_level(params.vGpu) + ", confidential compute " +
      support_level(params.confidentialCompute) + ", CMP " + support_level(params.cmp) + ", WSL " +
      support_level(params.wsl);
  if (params.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    fail("library", "cuptiProfilerDeviceSupported", params.isSupported, "device not supported",
         "CUPTI cannot profile this device: " + levels);
  }
  return "supported: " + levels;
}

std::unique_ptr<Prepared> prepare(const std::vector<std::string>& requested, double& init_s,
                                  double& config_s) {
  auto started = std::chrono::steady_clock::now();
  auto prepared = std::make_unique<Prepared>();
  prepared->context = current_context();
  prepared->requested = requested;
  check(driver().ctx_get_device(&prepared->device), "cuCtxGetDevice");
  const CUdevice device = prepared->device;
  check(driver().device_get_attribute(&prepared->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      device),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  check(driver().device_get_attribute(&prepared->cc_major,
                                      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(driver().device_get_attribute(&prepared->cc_minor,
                                      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  if (!g_profiler_initialized) {
    CUpti_Profiler_Initialize_Params params{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    check(cuptiProfilerInitialize(&params), "cuptiProfilerInitialize");
    g_profiler_initialized = true;
  }
  prepared->device_support = check_device_supported(device);
  CUpti_Device_GetChipName_Params chip{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = static_cast<size_t>(device);
  check(cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName");
  prepared->chip = chip.pChipName ? chip.pChipName : "";

  CUpti_Profiler_GetCounterAvailability_Params availability{
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  availability.ctx = prepared->context;
  check(cuptiProfilerGetCounterAvailability(&availability),
        "cuptiProfilerGetCounterAvailability (size)");
  prepared->counter_availability.resize(availability.counterAvailabilityImageSize);
  availability.pCounterAvailabilityImage = prepared->counter_availability.data();
  check(cuptiProfilerGetCounterAvailability(&availability),
        "cuptiProfilerGetCounterAvailability (image)");
  prepared->host =
      std::make_unique<HostObject>(prepared->chip, prepared->counter_availability.data());
  init_s = seconds_since(started);
  started = std::chrono::steady_clock::now();
  prepared->plan = plan_metrics(prepared->host->object, requested);
  config_s = seconds_since(started);
  return prepared;
}

std::string prepared_json(const Prepared& prepared, bool cached, double init_s, double config_s) {
  return "{\"ok\":true,\"cached\":" + std::string(cached ? "true" : "false") +
         ",\"chip\":" + quote(prepared.chip) +
         ",\"device_support\":" + quote(prepared.device_support) +
         ",\"device\":" + std::to_string(prepared.device) +
         ",\"sm_count\":" + std::to_string(prepared.sm_count) + ",\"compute_capability\":[" +
         std::to_string(prepared.cc_major) + "," + std::to_string(prepared.cc_minor) + "]," +
         prepared.plan.json() + ",\"seconds\":{\"cupti_init\":" + number(init_s) +
         ",\"config_image\":" + number(config_s) + "}}";
}

// A function's registers, static shared and local memory per thread, max threads per block.
struct Attributes {
  int registers = -1, shared_static = -1, local_bytes = -1, max_threads = -1;
  std::string error;
};

CUresult read_attributes(CUfunction function, Attributes& out) {
  const std::pair<CUfunction_attribute, int*> wanted[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &out.registers},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &out.shared_static},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &out.local_bytes},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &out.max_threads},
  };
  for (const auto& [attribute, into] : wanted) {
    const CUresult result = driver().func_get_attribute(into, attribute, function);
    if (result != CUDA_SUCCESS) return result;
  }
  return CUDA_SUCCESS;
}

Attributes attributes_of(CUfunction function) {
  Attributes out;
  const CUresult result = read_attributes(function, out);
  if (result == CUDA_SUCCESS) return out;
  // Launched as a CUkernel (context-independent loading): read its function in this context.
  CUfunction in_context = nullptr;
  if (driver().kernel_get_function != nullptr &&
      driver().kernel_get_function(&in_context, reinterpret_cast<CUkernel>(function)) ==
          CUDA_SUCCESS &&
      in_context != nullptr && read_attributes(in_context, out) == CUDA_SUCCESS) {
    return out;
  }
  Attributes failed;
  failed.error = "cuFuncGetAttribute: " + cuda_words(result);
  return failed;
}

// The launch's symbol, or where CUPTI gave none, the driver's name for its function.
std::string name_of(const Launch& launch) {
  std::string name = launch.name;
  if (name.empty() && launch.function != nullptr && driver().func_get_name != nullptr) {
    const char* found = nullptr;
    if (driver().func_get_name(&found, launch.function) == CUDA_SUCCESS && found) name = found;
  }
  return name;
}

std::string launches_json(const std::vector<Launch>& launches) {
  std::map<CUfunction, Attributes> known;
  std::string out = "[";
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& launch = launches[i];
    if (known.find(launch.function) == known.end()) {
      known[launch.function] = attributes_of(launch.function);
    }
    const Attributes& attributes = known[launch.function];
    const std::string name = name_of(launch);
    auto triple = [](const unsigned (&v)[3]) {
      return "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," +
             std::to_string(v[2]) + "]";
    };
    out += std::string(i ? "," : "") + "{\"name\":" + quote(name) +
           ",\"grid\":" + triple(launch.grid) + ",\"block\":" + triple(launch.block) +
           ",\"cluster\":" + triple(launch.cluster) +
           ",\"shared_dynamic\":" + std::to_string(launch.shared_dynamic) +
           ",\"registers\":" + std::to_string(attributes.registers) +
           ",\"shared_static\":" + std::to_string(attributes.shared_static) +
           ",\"local_bytes\":" + std::to_string(attributes.local_bytes) +
           ",\"max_threads_per_block\":" + std::to_string(attributes.max_threads) +
           ",\"attribute_error\":" + quote(attributes.error) +
           ",\"status\":" + std::to_string(launch.status) +
           ",\"pass\":" + std::to_string(launch.pass) + "}";
  }
  return out + "]";
}

// Each range's name and its metric values, in the plan's metric order.
std::string ranges_json(const Prepared& prepared, std::vector<uint8_t>& counter_data,
                        size_t& count) {
  CUpti_RangeProfiler_GetCounterDataInfo_Params info{
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = counter_data.data();
  info.counterDataImageSize = counter_data.size();
  check(cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
  count = info.numTotalRanges;
  std::vector<const char*> names = pointers(prepared.plan.supported);
  std::vector<double> values(names.size());
  std::string out = "[";
  for (size_t index = 0; index < info.numTotalRanges; ++index) {
    CUpti_RangeProfiler_CounterData_GetRangeInfo_Params range{
        CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
    range.pCounterDataImage = counter_data.data();
    range.counterDataImageSize = counter_data.size();
    range.rangeIndex = index;
    range.rangeDelimiter = "/";
    check(cuptiRangeProfilerCounterDataGetRangeInfo(&range),
          "cuptiRangeProfilerCounterDataGetRangeInfo");
    CUpti_Profiler_Host_EvaluateToGpuValues_Params evaluate{
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    evaluate.pHostObject = prepared.host->object;
    evaluate.pCounterDataImage = counter_data.data();
    evaluate.counterDataImageSize = counter_data.size();
    evaluate.rangeIndex = index;
    evaluate.ppMetricNames = names.data();
    evaluate.numMetrics = names.size();
    evaluate.pMetricValues = values.data();
    check(cuptiProfilerHostEvaluateToGpuValues(&evaluate), "cuptiProfilerHostEvaluateToGpuValues");
    out += std::string(index ? "," : "") +
           "{\"name\":" + quote(range.rangeName ? range.rangeName : "") + ",\"values\":[";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + number(values[i]);
    out += "]}";
  }
  return out + "]";
}

template <typename Body>
char* guarded(Body body) {
  try {
    return reply(body());
  } catch (const CallFailed& failure) {
    return reply(failure.json());
  } catch (const std::exception& error) {
    CallFailed failure;
    failure.api = "library";
    failure.call = "C++";
    failure.name = "exception";
    failure.message = error.what();
    return reply(failure.json());
  }
}

void require_session(const char* call) {
  if (g_session == nullptr || g_prepared == nullptr) {
    fail("library", call, 0, "no session", std::string(call) + " without a kbc_begin before it");
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void kbc_free(char* json) { std::free(json); }

// The CUPTI this library runs on: the API version compiled against and the loaded one's (a
// process may already hold another libcupti of the same soname, e.g. torch's), and its path.
__attribute__((visibility("default"))) char* kbc_library_info() {
  return guarded([] {
    uint32_t runtime = 0;
    check(cuptiGetVersion(&runtime), "cuptiGetVersion");
    const char* path = cupti_library().dli_fname;
    return "{\"ok\":true,\"compiled_cupti_api\":" + std::to_string(CUPTI_API_VERSION) +
           ",\"runtime_cupti_api\":" + std::to_string(runtime) +
           ",\"libcupti\":" + quote(path ? path : "") + "}";
  });
}

// Host only, no GPU needed: which of `metrics` the chip named `chip` (e.g. "GH100") supports.
__attribute__((visibility("default"))) char* kbc_check_metrics(const char* chip,
                                                               const char* const* metrics,
                                                               size_t count) {
  return guarded([&] {
    std::lock_guard<std::mutex> guard(g_lock);
    HostObject host(chip ? chip : "", nullptr);
    MetricPlan plan = plan_metrics(host.object, names_of(metrics, count));
    return "{\"ok\":true,\"chip\":" + quote(chip ? chip : "") + "," + plan.json() + "}";
  });
}

__attribute__((visibility("default"))) char* kbc_prepare(const char* const* metrics,
                                                         size_t count) {
  return guarded([&] {
    std::lock_guard<std::mutex> guard(g_lock);
    if (g_session != nullptr) {
      fail("library", "kbc_prepare", 0, "session open", "a profile is running: kbc_end it first");
    }
    std::vector<std::string> requested = names_of(metrics, count);
    const CUcontext context = current_context();
    if (g_prepared && g_prepared->context == context && g_prepared->requested == requested) {
      return prepared_json(*g_prepared, true, 0.0, 0.0);
    }
    g_prepared.reset();
    double init_s = 0.0, config_s = 0.0;
    g_prepared = prepare(requested, init_s, config_s);
    return prepared_json(*g_prepared, false, init_s, config_s);
  });
}

// replay: 0 kernel replay (CUPTI replays each kernel in place), 1 user replay (the caller
// repeats the launches, one pass each). max_ranges: kernel launches the counter data holds.
__attribute__((visibility("default"))) char* kbc_begin(int replay, size_t max_ranges) {
  return guarded([&] {
    std::lock_guard<std::mutex> guard(g_lock);
    if (g_prepared == nullptr) {
      fail("library", "kbc_begin", 0, "not prepared", "kbc_begin before kbc_prepare");
    }
    if (g_session != nullptr) {
      fail("library", "kbc_begin", 0, "session open", "a profile is running: kbc_end it first");
    }
    const auto started = std::chrono::steady_clock::now();
    auto session = std::make_unique<Session>();
    session->context = g_prepared->context;
    try {
      CUpti_RangeProfiler_Enable_Params enable{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
      enable.ctx = g_prepared->context;
      check(cuptiRangeProfilerEnable(&enable), "cuptiRangeProfilerEnable");
      session->range = enable.pRangeProfilerObject;
      start_launch_records(*session);

      std::vector<const char*> names = pointers(g_prepared->plan.supported);
      CUpti_RangeProfiler_GetCounterDataSize_Params size{
          CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
      size.pRangeProfilerObject = session->range;
      size.pMetricNames = names.data();
      size.numMetrics = names.size();
      size.maxNumOfRanges = max_ranges;
      size.maxNumRangeTreeNodes = static_cast<uint32_t>(max_ranges);
      check(cuptiRangeProfilerGetCounterDataSize(&size), "cuptiRangeProfilerGetCounterDataSize");
      session->counter_data.assign(size.counterDataSize, 0);
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params initialize{
          CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
      initialize.pRangeProfilerObject = session->range;
      initialize.counterDataSize = session->counter_data.size();
      initialize.pCounterData = session->counter_data.data();
      check(cuptiRangeProfilerCounterDataImageInitialize(&initialize),
            "cuptiRangeProfilerCounterDataImageInitialize");

      CUpti_RangeProfiler_SetConfig_Params config{
          CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
      config.pRangeProfilerObject = session->range;
      config.configSize = g_prepared->plan.config.size();
      config.pConfig = g_prepared->plan.config.data();
      config.counterDataImageSize = session->counter_data.size();
      config.pCounterDataImage = session->counter_data.data();
      config.range = CUPTI_AutoRange;
      config.replayMode = replay == 1 ? CUPTI_UserReplay : CUPTI_KernelReplay;
      config.maxRangesPerPass = max_ranges;
      config.numNestingLevels = 1;  // auto range: one level
      config.minNestingLevel = 1;
      config.passIndex = 0;
      config.targetNestingLevel = 1;
      check(cuptiRangeProfilerSetConfig(&config), "cuptiRangeProfilerSetConfig");
    } catch (const CallFailed&) {
      tear_down_after_failure(*session);
      throw;
    }
    const std::string launch_error = session->launch_records_error;
    g_session = std::move(session);
    return "{\"ok\":true,\"launch_records_error\":" + quote(launch_error) +
           ",\"seconds\":{\"enable\":" + number(seconds_since(started)) + "}}";
  });
}

__attribute__((visibility("default"))) char* kbc_start_pass() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    require_session("kbc_start_pass");
    {
      std::lock_guard<std::mutex> launches(g_session->launches_lock);
      g_session->pass += 1;
    }
    CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    start.pRangeProfilerObject = g_session->range;
    check(cuptiRangeProfilerStart(&start), "cuptiRangeProfilerStart");
    g_session->started = true;
    g_session->recording.store(true);
    return std::string("{\"ok\":true,\"pass\":") + std::to_string(g_session->pass) + "}";
  });
}

__attribute__((visibility("default"))) char* kbc_stop_pass() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    require_session("kbc_stop_pass");
    g_session->recording.store(false);  // the pass's launch calls have all returned
    check(driver().ctx_synchronize(), "cuCtxSynchronize (the pass's kernels)");
    CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = g_session->range;
    check(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
    g_session->started = false;
    return std::string("{\"ok\":true,\"all_passes_submitted\":") +
           (stop.isAllPassSubmitted ? "true" : "false") +
           ",\"next_pass_index\":" + std::to_string(stop.passIndex) + "}";
  });
}

__attribute__((visibility("default"))) char* kbc_end() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    require_session("kbc_end");
    std::unique_ptr<Session> session = std::move(g_session);
    auto started = std::chrono::steady_clock::now();
    size_t dropped = 0;
    try {
      CUpti_RangeProfiler_DecodeData_Params decode{
          CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
      decode.pRangeProfilerObject = session->range;
      check(cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
      dropped = decode.numOfRangeDropped;
    } catch (const CallFailed&) {
      tear_down_after_failure(*session);
      throw;
    }
    tear_down(*session);
    const double decode_s = seconds_since(started);
    started = std::chrono::steady_clock::now();
    size_t count = 0;
    const std::string ranges = ranges_json(*g_prepared, session->counter_data, count);
    const std::string launches = launches_json(session->launches);
    return "{\"ok\":true,\"metrics\":" + strings(g_prepared->plan.supported) +
           ",\"ranges\":" + ranges + ",\"dropped_ranges\":" + std::to_string(dropped) +
           ",\"launches\":" + launches +
           ",\"launch_records_error\":" + quote(session->launch_records_error) +
           ",\"seconds\":{\"decode\":" + number(decode_s) +
           ",\"evaluate\":" + number(seconds_since(started)) + "}}";
  });
}

// Verification's kernel watch (harness/check/kernel_watch.py): every kernel launch of every context
// recorded from kbc_watch_begin to kbc_watch_end, nothing profiled. Graph launches are counted:
// the kernels inside a graph are not launched one by one, so they go unnamed.
__attribute__((visibility("default"))) char* kbc_watch_begin() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    if (g_session != nullptr || g_watch != nullptr) {
      fail("library", "kbc_watch_begin", 0, "session open",
           "a profile or a watch is running: end it first");
    }
    auto watch = std::make_unique<Session>();
    watch->recording.store(true);
    try {
      subscribe_launches(*watch, true);
    } catch (const CallFailed&) {
      tear_down_after_failure(*watch);
      throw;
    }
    g_watch = std::move(watch);
    return std::string("{\"ok\":true}");
  });
}

__attribute__((visibility("default"))) char* kbc_watch_end() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    if (g_watch == nullptr) {
      fail("library", "kbc_watch_end", 0, "no watch", "kbc_watch_end without kbc_watch_begin");
    }
    std::unique_ptr<Session> watch = std::move(g_watch);
    watch->recording.store(false);  // the call's launch calls have all returned
    tear_down(*watch);
    std::set<std::string> names;
    size_t graphs = 0;
    for (const Launch& launch : watch->launches) {
      if (launch.graph) {
        ++graphs;
      } else {
        names.insert(name_of(launch));
      }
    }
    return "{\"ok\":true,\"kernels\":" +
           strings(std::vector<std::string>(names.begin(), names.end())) +
           ",\"graph_launches\":" + std::to_string(graphs) + "}";
  });
}

// After a failure between kbc_begin and kbc_end: stop, disable and unsubscribe, nothing decoded.
__attribute__((visibility("default"))) char* kbc_abort() {
  return guarded([] {
    std::lock_guard<std::mutex> guard(g_lock);
    std::unique_ptr<Session> session = std::move(g_session);
    if (session != nullptr) tear_down(*session);
    return std::string("{\"ok\":true}");
  });
}

}  // extern "C"
