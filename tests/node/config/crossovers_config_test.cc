// [exchange.crossovers]: the provider's measured defaults overridden size by
// size, and the TOML that bench allreduce --fit-crossovers prints read back.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "gossip/collectives/allreduce_auto.h"
#include "node/bench/bench_allreduce.h"
#include "node/config/config_parse.h"
#include "node/exchange/allreduce_exchange.h"

namespace chorus::node {
namespace {

std::string CrossoverErrorOf(const Result<Config>& result) {
  return result ? std::string("(no error)") : result.error().message();
}

// [exchange.crossovers] overrides the provider's measured defaults size by
// size, in KiB; -1 (the default) keeps each.
TEST(ConfigParseTest, CrossoversOverrideTheProvidersDefaults) {
  Result<Config> plain = ParseConfigString("[fabric]\nprovider = \"net\"\n", "x.toml");
  ASSERT_TRUE(plain) << CrossoverErrorOf(plain);
  const gossip::AllreduceCrossovers net = gossip::CrossoversForProvider(gossip::FabricProvider::kNet);
  const gossip::AllreduceCrossovers kept = CrossoversFromConfig(gossip::FabricProvider::kNet, plain->exchange.crossovers);
  EXPECT_EQ(kept.small_tree_max_bytes, net.small_tree_max_bytes);
  EXPECT_EQ(kept.recursive_doubling_max_bytes, net.recursive_doubling_max_bytes);
  EXPECT_EQ(kept.halving_doubling_max_bytes, net.halving_doubling_max_bytes);
  EXPECT_EQ(kept.large_tree_min_bytes, net.large_tree_min_bytes);
  EXPECT_LT(kept.large_tree_min_bytes, SIZE_MAX);  // net's own: the tree for large buffers

  Result<Config> set = ParseConfigString(
      "[fabric]\nprovider = \"net\"\n[exchange.crossovers]\nrecursive_doubling_max_kib = 8\n"
      "halving_doubling_max_kib = 4096\nlarge_tree_min_kib = 0\ntree_max_kib = 0\nsmall_tree_max_kib = 0\n",
      "x.toml");
  ASSERT_TRUE(set) << CrossoverErrorOf(set);
  const gossip::AllreduceCrossovers x = CrossoversFromConfig(set->fabric.provider, set->exchange.crossovers);
  EXPECT_EQ(x.recursive_doubling_max_bytes, 8u * 1024);
  EXPECT_EQ(x.halving_doubling_max_bytes, 4096u * 1024);
  EXPECT_EQ(x.large_tree_min_bytes, 0u);
  EXPECT_EQ(x.tree_max_bytes, 0u);
  EXPECT_EQ(x.small_tree_max_bytes, 0u);
  EXPECT_EQ(x.halving_doubling_min_bytes, net.halving_doubling_min_bytes);
  EXPECT_EQ(x.hierarchical_min_bytes, net.hierarchical_min_bytes);
  // What auto then runs at 4 ranks on one host, over the fabric: 16 KiB is
  // past recursive doubling, 2 MiB still halving-doubling, 8 MiB the tree.
  using gossip::AllreduceAlgorithm;
  EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(16 * 1024, 4, 1, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(2 << 20, 4, 1, x), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(8 << 20, 4, 1, x), AllreduceAlgorithm::kTree);
  // With the small tree off, 4 ranks on 2 cores run recursive doubling at 4 KiB
  // as net's default would not.
  EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(4096, 4, 1, x, false, 2), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(4096, 4, 1, net, false, 2), AllreduceAlgorithm::kTree);
}

// The TOML that bench allreduce --fit-crossovers prints reads back as the
// same crossovers: never as 0 (upper bounds) or INT32_MAX KiB (lower ones),
// byte sizes rounded to whole KiB on the side that keeps every measured pick.
TEST(ConfigParseTest, FittedCrossoversTomlReadsBack) {
  gossip::AllreduceCrossovers c;
  c.small_tree_max_bytes = 3000;  // rounds up to 3 KiB
  c.recursive_doubling_max_bytes = 4096;
  c.tree_max_bytes = 0;
  c.halving_doubling_min_bytes = 16 * 1024;
  c.halving_doubling_max_bytes = 1000;  // below a KiB: rounds up, still includes 1000 B
  c.large_tree_min_bytes = SIZE_MAX;
  const std::string toml = CrossoversToml(c);
  EXPECT_NE(toml.find("large_tree_min_kib = 2147483647  # never"), std::string::npos) << toml;
  Result<Config> parsed = ParseConfigString(toml, "fitted.toml");
  ASSERT_TRUE(parsed) << CrossoverErrorOf(parsed) << "\n" << toml;
  const gossip::AllreduceCrossovers back = CrossoversFromConfig(gossip::FabricProvider::kNet, parsed->exchange.crossovers);
  EXPECT_EQ(back.small_tree_max_bytes, 3072u);
  EXPECT_EQ(back.recursive_doubling_max_bytes, 4096u);
  EXPECT_EQ(back.tree_max_bytes, 0u);
  EXPECT_EQ(back.halving_doubling_min_bytes, 16u * 1024);
  EXPECT_EQ(back.halving_doubling_max_bytes, 1024u);
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20, size_t{1} << 40}) {
    EXPECT_EQ(gossip::ChooseAllreduceAlgorithm(bytes, 4, 1, back), gossip::AllreduceAlgorithm::kRing) << bytes;
  }
  // hierarchical_min_kib is not the fit's to say: the provider's stays.
  EXPECT_EQ(back.hierarchical_min_bytes, gossip::CrossoversForProvider(gossip::FabricProvider::kNet).hierarchical_min_bytes);
}

}  // namespace
}  // namespace chorus::node
