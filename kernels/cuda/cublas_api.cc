// Opens cuBLAS and cuBLASLt with dlopen on first use (see cublas_api.h).
#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

namespace chorus::kernels::cuda {
namespace {

#define CHORUS_SYMBOL_TEXT2(name) #name
#define CHORUS_SYMBOL_TEXT(name) CHORUS_SYMBOL_TEXT2(name)

// The soname the backend was built against, then the same file in the CUDA
// library folder CMake found (for a binary run without that folder on the
// loader's path).
void* Open(const char* soname, std::string* why) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  std::string error = dlerror();
#ifdef CHORUS_CUDA_LIBRARY_DIR
  const std::string path = std::string(CHORUS_CUDA_LIBRARY_DIR) + "/" + soname;
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  error += "; " + std::string(dlerror());
#endif
  *why = std::string("cannot open ") + soname + ": " + error;
  return nullptr;
}

template <typename F>
bool Find(void* library, const char* library_name, const char* symbol, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(library, symbol));
  if (*out != nullptr) return true;
  *why = std::string(library_name) + " has no symbol " + symbol;
  return false;
}

std::string Load(CublasApi* api) {
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  const std::string lt_name = "libcublasLt.so." + major;
  const std::string blas_name = "libcublas.so." + major;
  std::string why;
  void* lt = Open(lt_name.c_str(), &why);
  if (lt == nullptr) return why;
  void* blas = Open(blas_name.c_str(), &why);
  if (blas == nullptr) return why;
  bool ok = true;
#define CHORUS_CUBLAS_FIND(name) \
  ok = ok && Find(blas, blas_name.c_str(), CHORUS_SYMBOL_TEXT(name), &api->name, &why);
#define CHORUS_CUBLASLT_FIND(name) \
  ok = ok && Find(lt, lt_name.c_str(), CHORUS_SYMBOL_TEXT(name), &api->name, &why);
  CHORUS_CUBLAS_FUNCTIONS(CHORUS_CUBLAS_FIND)
  CHORUS_CUBLASLT_FUNCTIONS(CHORUS_CUBLASLT_FIND)
  CHORUS_CUBLAS_FIND(cublasGemmEx)
#undef CHORUS_CUBLAS_FIND
#undef CHORUS_CUBLASLT_FIND
  return ok ? std::string() : why;
}

}  // namespace

Result<const CublasApi*> Cublas() {
  // The libraries stay open for the process's life: handles made from them
  // may outlive any one Device.
  static CublasApi api;
  static const std::string error = Load(&api);
  if (!error.empty()) return Err(Unavailable("the CUDA backend: " + error));
  return &api;
}

}  // namespace chorus::kernels::cuda
