// Opening a shared library on first use (see shared_library.h).
#include "common/shared_library.h"

#include <dlfcn.h>

namespace chorus {

void* OpenSharedLibrary(const char* soname, const std::string& fallback_dir, int flags, std::string* why) {
  void* handle = dlopen(soname, flags);
  if (handle != nullptr) return handle;
  std::string error = dlerror();
  if (!fallback_dir.empty()) {
    const std::string path = fallback_dir + "/" + soname;
    handle = dlopen(path.c_str(), flags);
    if (handle != nullptr) return handle;
    error += "; " + std::string(dlerror());
  }
  *why = std::string("cannot open ") + soname + ": " + error;
  return nullptr;
}

void* FindSymbol(void* library, const char* symbol) { return dlsym(library, symbol); }

}  // namespace chorus
