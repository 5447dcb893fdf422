// Opens cuBLAS and cuBLASLt with dlopen on first use (see cublas_api.h).
#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "common/shared_library.h"

namespace chorus::kernels::cuda {
namespace {

#define CHORUS_SYMBOL_TEXT2(name) #name
#define CHORUS_SYMBOL_TEXT(name) CHORUS_SYMBOL_TEXT2(name)

// The CUDA library folder CMake found: where the libraries are looked for
// after the loader's path.
#ifdef CHORUS_CUDA_LIBRARY_DIR
constexpr const char* kFallbackDir = CHORUS_CUDA_LIBRARY_DIR;
#else
constexpr const char* kFallbackDir = "";
#endif

void* Open(const char* soname, std::string* why) {
  return OpenSharedLibrary(soname, kFallbackDir, RTLD_NOW | RTLD_LOCAL, why);
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
  ok = ok && FindSymbol(blas, blas_name.c_str(), CHORUS_SYMBOL_TEXT(name), &api->name, &why);
#define CHORUS_CUBLASLT_FIND(name) \
  ok = ok && FindSymbol(lt, lt_name.c_str(), CHORUS_SYMBOL_TEXT(name), &api->name, &why);
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
