// The program Nsight Compute profiles for a plain-CUDA target (harness/native/native_driver.py): it
// loads the target's shared library, fills device buffers from the worker's input file, calls
// the extern "C" launcher once, waits for the GPU and exits. Nothing else runs in it, so ncu
// starts it in about 2.5 s, where a Python + torch process (run_once) costs about 7 s under
// ncu: torch and its CUDA context start again, and ncu intercepts every CUDA call torch makes.
//
// harness/native/native_driver.py appends, per launcher signature, the three functions declared below
// ("generated per signature"): the launcher's C function type is only known at run time, and a
// C call needs it at compile time.
//
// Usage: driver SPEC, where SPEC holds one directive per line, "key value":
//   library PATH        the shared library nvcc built from the .cu
//   symbol NAME         the launcher
//   gpu INDEX           the CUDA device
//   data PATH           the file the input buffers are read from
//   signature TEXT      the launcher's signature; must be the one this driver was built for
// then one line per launcher parameter, in order:
//   input BYTES OFFSET  a device buffer of BYTES bytes, filled from data at OFFSET
//   output BYTES        a device buffer of BYTES bytes, every byte 0xFF: NaN in every floating
//                       type, as verification poisons outputs
//   scalar VALUE        a number, converted to the parameter's C type
//   stream              the default stream (PyTorch's current stream in run_once)
//
// Exit status: 0 done; 2 the driver could not set up the call (unreadable spec or data, library
// or symbol not found, a spec for another signature): its caller profiles through run_once
// instead; 3 a CUDA error (no GPU or driver, allocation, the launch or the kernel failed);
// 4 the launcher returned a non-zero status. Every failure prints one line saying what failed.

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

constexpr int kSetupFailed = 2;
constexpr int kCudaFailed = 3;
constexpr int kLauncherFailed = 4;

struct Argument {
  std::string kind;  // "input", "output", "scalar" or "stream"
  size_t bytes = 0;
  size_t offset = 0;
  std::string value;  // a scalar's number, as the spec writes it
  void* device = nullptr;
};

// Generated per signature (at the end of this file).
const char* launcher_signature();
std::vector<std::string> parameter_kinds();  // "pointer", "scalar" or "stream", in order
int call_launcher(void* symbol, const std::vector<Argument>& arguments);

[[noreturn]] void setup_failed(const std::string& why) {
  std::fprintf(stderr, "kernelblaster-driver: setup failed: %s\n", why.c_str());
  std::exit(kSetupFailed);
}

void check_cuda(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  const char* meaning = "";
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
    meaning = status == cudaErrorNoDevice
                  ? " (no CUDA-capable device: check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                  : " (no NVIDIA driver, or one too old for this CUDA runtime: check nvidia-smi)";
  }
  std::fprintf(stderr, "kernelblaster-driver: %s failed: %s: %s%s\n", what.c_str(),
               cudaGetErrorName(status), cudaGetErrorString(status), meaning);
  std::exit(kCudaFailed);
}

// A scalar parameter's value as its C type T (the spec writes what ctypes would pass).
template <typename T>
T scalar(const Argument& argument) {
  const char* text = argument.value.c_str();
  char* end = nullptr;
  errno = 0;
  T value;
  if constexpr (std::is_floating_point_v<T>) {
    value = static_cast<T>(std::strtod(text, &end));
    errno = 0;  // a subnormal float is a value, not an error
  } else if constexpr (std::is_signed_v<T>) {
    value = static_cast<T>(std::strtoll(text, &end, 10));
  } else {
    value = static_cast<T>(std::strtoull(text, &end, 10));
  }
  if (end == text || *end != '\0' || errno == ERANGE) {
    setup_failed("scalar value '" + argument.value + "' is not a number of its parameter's type");
  }
  return value;
}

struct Spec {
  std::string library, symbol, data, signature;
  int gpu = 0;
  std::vector<Argument> arguments;
};

Spec read_spec(const char* path) {
  std::ifstream in(path);
  if (!in) setup_failed(std::string("cannot read the spec ") + path);
  Spec spec;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    std::istringstream fields(rest);
    Argument argument;
    argument.kind = key;
    bool parsed = true;
    if (key == "library") {
      spec.library = rest;
    } else if (key == "symbol") {
      spec.symbol = rest;
    } else if (key == "data") {
      spec.data = rest;
    } else if (key == "signature") {
      spec.signature = rest;
    } else if (key == "gpu") {
      parsed = static_cast<bool>(fields >> spec.gpu);
    } else if (key == "input") {
      parsed = static_cast<bool>(fields >> argument.bytes >> argument.offset);
      spec.arguments.push_back(argument);
    } else if (key == "output") {
      parsed = static_cast<bool>(fields >> argument.bytes);
      spec.arguments.push_back(argument);
    } else if (key == "scalar") {
      argument.value = rest;
      spec.arguments.push_back(argument);
    } else if (key == "stream") {
      spec.arguments.push_back(argument);
    } else {
      parsed = false;
    }
    if (!parsed) setup_failed(std::string("bad line in ") + path + ": " + line);
  }
  return spec;
}

// The spec must describe this driver's launcher: same signature, a buffer for every pointer.
void check_matches(const Spec& spec) {
  if (spec.signature != launcher_signature()) {
    setup_failed("this driver calls " + std::string(launcher_signature()) +
                 ", the spec describes " + spec.signature);
  }
  const std::vector<std::string> kinds = parameter_kinds();
  if (spec.arguments.size() != kinds.size()) {
    setup_failed("the spec gives " + std::to_string(spec.arguments.size()) +
                 " arguments for " + std::to_string(kinds.size()) + " parameters");
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string& given = spec.arguments[i].kind;
    const bool pointer = given == "input" || given == "output";
    if ((kinds[i] == "pointer") != pointer || (!pointer && kinds[i] != given)) {
      setup_failed("argument " + std::to_string(i) + " is " + given + " for a " + kinds[i] +
                   " parameter");
    }
  }
}

// Device buffers for the pointer arguments: inputs copied from the data file, outputs poisoned.
void fill_buffers(Spec& spec) {
  std::ifstream data;
  std::vector<char> host;
  for (Argument& argument : spec.arguments) {
    if (argument.kind != "input" && argument.kind != "output") continue;
    if (argument.bytes == 0) continue;  // an empty tensor: a null pointer, as torch passes
    check_cuda(cudaMalloc(&argument.device, argument.bytes), "cudaMalloc");
    if (argument.kind == "output") {
      check_cuda(cudaMemset(argument.device, 0xFF, argument.bytes), "cudaMemset");
      continue;
    }
    if (!data.is_open()) {
      data.open(spec.data, std::ios::binary);
      if (!data) setup_failed("cannot read the input data " + spec.data);
    }
    host.resize(argument.bytes);
    data.seekg(static_cast<std::streamoff>(argument.offset));
    data.read(host.data(), static_cast<std::streamsize>(argument.bytes));
    if (static_cast<size_t>(data.gcount()) != argument.bytes) {
      setup_failed(spec.data + " holds no " + std::to_string(argument.bytes) +
                   " bytes at offset " + std::to_string(argument.offset));
    }
    check_cuda(cudaMemcpy(argument.device, host.data(), argument.bytes, cudaMemcpyHostToDevice),
               "cudaMemcpy of an input");
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "kernelblaster-driver: setup failed: usage: %s SPEC\n", argv[0]);
    return kSetupFailed;
  }
  Spec spec = read_spec(argv[1]);
  check_matches(spec);
  void* library = dlopen(spec.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) setup_failed(std::string("cannot load the library: ") + dlerror());
  void* symbol = dlsym(library, spec.symbol.c_str());
  if (symbol == nullptr) setup_failed("the library exports no " + spec.symbol);
  check_cuda(cudaSetDevice(spec.gpu), "cudaSetDevice(" + std::to_string(spec.gpu) + ")");
  fill_buffers(spec);
  check_cuda(cudaDeviceSynchronize(), "preparing the buffers");
  const int status = call_launcher(symbol, spec.arguments);
  if (status != 0) {
    std::fprintf(stderr, "kernelblaster-driver: %s returned error code %d\n",
                 spec.symbol.c_str(), status);
    return kLauncherFailed;
  }
  // A launch the library's own CUDA runtime refused (nvcc links a static runtime into it, whose
  // error state this program's doesn't share) launched nothing: ncu then says it profiled no
  // kernel. A kernel that faulted shows here, in the context both runtimes share.
  check_cuda(cudaDeviceSynchronize(), spec.symbol + " (waiting for its kernels)");
  for (const Argument& argument : spec.arguments) {
    if (argument.device != nullptr) check_cuda(cudaFree(argument.device), "cudaFree");
  }
  return 0;
}

// ---- generated per signature ----
