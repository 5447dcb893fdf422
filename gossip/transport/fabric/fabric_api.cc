// Opens libfabric with dlopen on first use (see fabric_api.h).
#include "gossip/transport/fabric/fabric_api.h"

#include <dlfcn.h>

#include <string>

#include "common/shared_library.h"

namespace chorus::gossip::fabric {
namespace {

constexpr const char* kSoname = "libfabric.so.1";

#ifdef CHORUS_LIBFABRIC_LIBRARY_DIR
constexpr const char* kFallbackDir = CHORUS_LIBFABRIC_LIBRARY_DIR;  // where pkg-config found it
#else
constexpr const char* kFallbackDir = "";
#endif

// Global: libfabric's own provider plugins resolve its symbols against it.
void* Open(std::string* why) { return OpenSharedLibrary(kSoname, kFallbackDir, RTLD_NOW | RTLD_GLOBAL, why); }

template <typename F>
bool Find(void* library, const char* symbol, F* out, std::string* why) {
  return FindSymbol(library, kSoname, symbol, out, why);
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
