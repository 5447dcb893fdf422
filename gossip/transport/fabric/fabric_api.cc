// Opens libfabric with dlopen on first use (see fabric_api.h).
#include "gossip/transport/fabric/fabric_api.h"

#include <dlfcn.h>

#include <string>

namespace chorus::gossip::fabric {
namespace {

constexpr const char* kSoname = "libfabric.so.1";

// The soname, then the same file in the folder pkg-config named at build
// time (for a binary run without that folder on the loader's path). Global:
// libfabric's own provider plugins resolve its symbols against it.
void* Open(std::string* why) {
  void* handle = dlopen(kSoname, RTLD_NOW | RTLD_GLOBAL);
  if (handle != nullptr) return handle;
  std::string error = dlerror();
#ifdef CHORUS_LIBFABRIC_LIBRARY_DIR
  const std::string path = std::string(CHORUS_LIBFABRIC_LIBRARY_DIR) + "/" + kSoname;
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle != nullptr) return handle;
  error += "; " + std::string(dlerror());
#endif
  *why = std::string("cannot open ") + kSoname + ": " + error;
  return nullptr;
}

// dlsym gives each symbol's default version: the one a link against the
// same library binds.
template <typename F>
bool Find(void* library, const char* symbol, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(library, symbol));
  if (*out != nullptr) return true;
  *why = std::string(kSoname) + " has no symbol " + symbol;
  return false;
}

std::string Load(FabricApi* api) {
  std::string why;
  void* library = Open(&why);
  if (library == nullptr) return why;
  const bool ok = Find(library, "fi_getinfo", &api->getinfo, &why) &&
                  Find(library, "fi_freeinfo", &api->freeinfo, &why) &&
                  Find(library, "fi_dupinfo", &api->dupinfo, &why) &&
                  Find(library, "fi_fabric", &api->fabric, &why) &&
                  Find(library, "fi_strerror", &api->strerror, &why) &&
                  Find(library, "fi_version", &api->version, &why);
  return ok ? std::string() : why;
}

const std::string& LoadOnce(FabricApi* api) {
  // The library stays open for the process's life: its objects may outlive
  // any one transport.
  static const std::string error = Load(api);
  return error;
}

FabricApi g_api;

}  // namespace

Result<const FabricApi*> Libfabric() {
  const std::string& error = LoadOnce(&g_api);
  if (!error.empty()) return Err(Unavailable("the fabric transport: " + error));
  return &g_api;
}

void FreeInfo(fi_info* info) { g_api.freeinfo(info); }

std::string FabricErrorText(int err) {
  Result<const FabricApi*> api = Libfabric();
  if (api) return (*api)->strerror(err);
  return "libfabric error " + std::to_string(err);
}

}  // namespace chorus::gossip::fabric
