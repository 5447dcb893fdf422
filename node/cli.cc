// Placeholder until the node CLI lands.
#include "node/cli.h"

namespace chorus::node {
int RunCli(int, char**) { return 0; }
}  // namespace chorus::node
