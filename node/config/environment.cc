// Environment hints (see environment.h).
#include "node/config/environment.h"

#include <charconv>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <utility>

namespace chorus::node {
namespace {

// The first of `names` that is set and non-empty.
std::optional<std::pair<const char*, const char*>> FirstSet(const EnvLookup& getenv_fn,
                                                            std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = getenv_fn(name);
    if (value != nullptr && *value != '\0') return std::make_pair(name, value);
  }
  return std::nullopt;
}

}  // namespace

Result<int64_t> ParseEnvInteger(const char* name, const char* text, int64_t min) {
  std::string_view s(text);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < min || value > INT_MAX) {
    return Err(InvalidArgument("environment variable " + std::string(name) + "=" + std::string(s) +
                               ": expected an integer >= " + std::to_string(min)));
  }
  return value;
}

Status ApplyEnvironmentHints(Config* config) {
  return ApplyEnvironmentHints(config, [](const char* name) -> const char* { return std::getenv(name); });
}

Status ApplyEnvironmentHints(Config* config, const EnvLookup& getenv_fn) {
  if (config->cluster.rank_hint == -1) {
    if (auto var = FirstSet(getenv_fn, {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})) {
      CHORUS_ASSIGN_OR_RETURN(int64_t rank, ParseEnvInteger(var->first, var->second, 0));
      config->cluster.rank_hint = static_cast<int>(rank);
      config->origins["cluster.rank_hint"] = std::string("env ") + var->first;
    }
  }
  if (!config->origins.contains("cluster.min_nodes")) {
    if (auto var = FirstSet(getenv_fn, {"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"})) {
      CHORUS_ASSIGN_OR_RETURN(int64_t size, ParseEnvInteger(var->first, var->second, 1));
      config->cluster.min_nodes = static_cast<int>(size);
      config->origins["cluster.min_nodes"] = std::string("env ") + var->first;
    }
  }
  return Status::Ok();
}

}  // namespace chorus::node
