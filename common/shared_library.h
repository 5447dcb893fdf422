// A shared library opened on first use (dlopen) instead of linked, for the
// libraries whose load-time work every process would otherwise pay
// (cuBLAS, libfabric: docs/testing.md). Internal: the callers keep their
// function tables.
#pragma once

#include <string>

namespace chorus {

// Opens `soname`, then the same file in `fallback_dir` (the folder the build
// found it in, for a binary run without that folder on the loader's path;
// empty: none). Null with `*why` naming what failed.
void* OpenSharedLibrary(const char* soname, const std::string& fallback_dir, int flags, std::string* why);

// The address of `symbol` in `library` (its default version: the one a link
// against the same library binds) into `*out`; false with `*why` naming the
// library (`library_name`) and the symbol.
void* FindSymbol(void* library, const char* symbol);
template <typename F>
bool FindSymbol(void* library, const char* library_name, const char* symbol, F* out, std::string* why) {
  *out = reinterpret_cast<F>(FindSymbol(library, symbol));
  if (*out != nullptr) return true;
  *why = std::string(library_name) + " has no symbol " + symbol;
  return false;
}

}  // namespace chorus
