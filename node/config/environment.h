// Settings a job scheduler gives through the environment: the rank and the
// number of nodes from SLURM (SLURM_PROCID, SLURM_NTASKS) or Open MPI's
// launcher (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE).
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "node/config/config.h"

namespace chorus::node {

// Fills cluster.rank_hint (when -1) from SLURM_PROCID or OMPI_COMM_WORLD_RANK,
// and cluster.min_nodes (when not set explicitly) from SLURM_NTASKS or
// OMPI_COMM_WORLD_SIZE. A malformed variable is an error naming it.
using EnvLookup = std::function<const char*(const char*)>;
[[nodiscard]] Status ApplyEnvironmentHints(Config* config);
[[nodiscard]] Status ApplyEnvironmentHints(Config* config, const EnvLookup& getenv_fn);

// The integer in environment variable `name` (its value `text`), at least `min`
// and at most INT_MAX; the error names the variable and the value.
[[nodiscard]] Result<int64_t> ParseEnvInteger(const char* name, const char* text, int64_t min);

}  // namespace chorus::node
