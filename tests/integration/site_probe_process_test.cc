// Sites found by measurement, as a user meets them: eight `chorus node`
// processes started by hand, each in its own network namespace, in two
// emulated sites (10 Gbit/s links inside, one 100 Mbit/s uplink per site),
// with ranks alternating between the sites. With exchange.site_probe the
// nodes time a probe between every pair at formation and group themselves:
// the nodes that said cluster.site = "auto" land in their real site, and a
// node that named the wrong site is reported. Needs root (namespaces and
// tc); skipped otherwise, with the reason. A node that joins later is
// measured in at its admission.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/cluster/site_probe.h"
#include "node/launch/emulated_link.h"
#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::kDataDir;

// The groups of a site_probe report, as sets of node names.
std::set<std::set<std::string>> GroupsOf(const nlohmann::json& report) {
  std::set<std::set<std::string>> groups;
  for (const nlohmann::json& g : report["groups"]) {
    std::set<std::string> names;
    for (const nlohmann::json& name : g) names.insert(name.get<std::string>());
    groups.insert(std::move(names));
  }
  return groups;
}

// `chorus node` i of a hand-started cluster in `link`'s namespace i, node 0
// listening on `port0`, with exchange.site_probe, cluster.site `site`, a
// host group of its own and `more` settings.
std::unique_ptr<ChorusProcess> StartProbingNode(EmulatedLink& link, int i, int port0, const fs::path& out,
                                                const std::string& name, const std::string& site,
                                                const std::vector<std::string>& more) {
  const std::string listen = link.host(i) + ":" + (i == 0 ? std::to_string(port0) : "0");
  const std::string bootstrap = link.host(0) + ":" + std::to_string(port0);
  std::vector<std::string> sets = {
      "run.node_name=\"node" + std::to_string(i) + "\"", "run.output_dir=\"" + out.string() + "\"",
      "run.name=\"" + name + "\"", "run.progress=\"off\"", "cluster.listen=\"" + listen + "\"",
      "cluster.bootstrap=[\"" + bootstrap + "\"]", "cluster.token=\"" + name + "\"", "cluster.join_timeout_s=60",
      "cluster.site=\"" + site + "\"", "cluster.host_group=\"host" + std::to_string(i) + "\"",
      "fabric.provider=\"tcp;ofi_rxm\"", "exchange.kind=\"allreduce\"", "exchange.algorithm=\"ring\"",
      "exchange.site_probe=true", "train.threads=1", "train.batch_size=32", "train.eval_every_epochs=0",
      "data.dir=\"" + std::string(kDataDir) + "\"", "data.test_limit=500"};
  sets.insert(sets.end(), more.begin(), more.end());
  std::vector<std::string> args = {"node", std::string(testing::kConfigsDir) + "/single-mlp.toml"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return std::make_unique<ChorusProcess>(args, std::vector<std::string>{}, link.ns(i));
}

TEST(SiteProbeProcessTest, EightNodesInTwoEmulatedSitesFindTheirSitesAndAWrongSiteIsReported) {
  Status available = EmulatedLink::Available();
  if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  constexpr int kNodes = 8;
  std::vector<int> site_of_node;
  for (int i = 0; i < kNodes; ++i) site_of_node.push_back(i % 2);
  SiteLinks sites{site_of_node, LinkShape{100e6 / 8, 0.0}};
  Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(kNodes, LinkShape{10e9 / 8, 0.0}, &sites);
  ASSERT_TRUE(made) << made.error().message();
  EmulatedLink& link = **made;

  const fs::path out = fs::temp_directory_path() / ("chorus-site-probe-" + std::to_string(getpid()));
  const std::string name = "site-probe";
  const int port0 = 29500 + static_cast<int>(getpid() % 1000);
  // Nodes 0, 2, 4 and 6 in site 0 ("lab"), the others in site 1 ("home").
  // Node 3 claims "lab"; nodes 5 and 6 leave it to the measurement.
  auto site_setting = [](int i) -> std::string {
    if (i == 5 || i == 6) return "auto";
    if (i == 3) return "lab";
    return i % 2 == 0 ? "lab" : "home";
  };
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(StartProbingNode(link, i, port0, out, name, site_setting(i),
                                     {"cluster.min_nodes=" + std::to_string(kNodes), "train.epochs=1",
                                      "data.train_limit=1024"}));
  }
  std::string outputs;
  for (int i = 0; i < kNodes; ++i) {
    const std::optional<int> status = nodes[i]->Wait(240);
    outputs += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i;
  }
  const std::set<std::set<std::string>> expected = {{"node0", "node2", "node4", "node6"},
                                                    {"node1", "node3", "node5", "node7"}};
  for (int i = 0; i < kNodes; ++i) {
    const nlohmann::json summary = testing::ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object() && summary.contains("site_probe")) << "node" << i << "\n" << outputs;
    const nlohmann::json& report = summary["site_probe"];
    EXPECT_EQ(GroupsOf(report), expected) << "node" << i << ": " << report.dump();
    EXPECT_GE(report["gap"].get<double>(), SiteProbeOptions{}.min_gap) << report.dump();
    // Node 3's "lab" is contradicted; every node reports it.
    const std::string contradictions = report["contradictions"].dump();
    EXPECT_NE(contradictions.find("site \\\"lab\\\" is measured as 2 sites"), std::string::npos) << contradictions;
    EXPECT_NE(contradictions.find("node3"), std::string::npos) << contradictions;
    if (i == 0) std::printf("node0's probe: %s\n", report.dump().c_str());
  }
  // The nodes that asked took the site most of their measured group named.
  EXPECT_NE(nodes[6]->Output().find("this node's site is \"lab\""), std::string::npos) << outputs;
  EXPECT_NE(nodes[5]->Output().find("this node's site is \"home\""), std::string::npos) << outputs;
  std::error_code ignored;
  fs::remove_all(out, ignored);
}

// A node joins mid-run with cluster.site = "auto": the members measure
// again at the admission, the joiner's pairs only, and it lands in its real
// site (named after what the others there said).
TEST(SiteProbeProcessTest, ANodeThatJoinsMidRunIsMeasuredIntoItsSite) {
  Status available = EmulatedLink::Available();
  if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  constexpr int kNodes = 4;
  SiteLinks sites{{0, 1, 0, 1}, LinkShape{100e6 / 8, 0.0}};
  Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(kNodes, LinkShape{10e9 / 8, 0.0}, &sites);
  ASSERT_TRUE(made) << made.error().message();
  EmulatedLink& link = **made;
  const fs::path out = fs::temp_directory_path() / ("chorus-site-probe-join-" + std::to_string(getpid()));
  const std::string name = "site-probe-join";
  const int port0 = 29500 + static_cast<int>((getpid() + 500) % 1000);
  const std::vector<std::string> more = {"cluster.min_nodes=3", "cluster.admit_every_steps=10",
                                         "train.epochs=3", "data.train_limit=6000"};
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(StartProbingNode(link, i, port0, out, name, i % 2 == 0 ? "lab" : "home", more));
  }
  ASSERT_TRUE(nodes[0]->WaitFor("links measured in .* this node's site is \"lab\"", 120)) << nodes[0]->Output();
  nodes.push_back(StartProbingNode(link, 3, port0, out, name, "auto", more));
  EXPECT_TRUE(nodes[3]->WaitFor("links measured in .* this node's site is \"home\"", 120)) << nodes[3]->Output();
  std::string outputs;
  for (int i = 0; i < kNodes; ++i) {
    const std::optional<int> status = nodes[i]->Wait(240);
    outputs += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i;
  }
  const std::set<std::set<std::string>> expected = {{"node0", "node2"}, {"node1", "node3"}};
  for (int i = 0; i < kNodes; ++i) {
    const nlohmann::json summary = testing::ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object() && summary.contains("site_probe")) << "node" << i << "\n" << outputs;
    EXPECT_EQ(GroupsOf(summary["site_probe"]), expected) << "node" << i << ": " << summary["site_probe"].dump();
    EXPECT_EQ(summary["world_size"], kNodes) << "node" << i;
    // The three members' pairs are known from their first probe: only the
    // joiner's are measured, with the first member of each site ({node0,
    // node2} and {node1}); its pair with node2 takes its cost with node0.
    EXPECT_EQ(summary["site_probe"]["measured_pairs"], 2) << "node" << i << "\n" << outputs;
    EXPECT_EQ(summary["site_probe"]["inferred_pairs"], 1) << "node" << i << "\n" << outputs;
    EXPECT_EQ(summary["site_probe"]["known_pairs"], (kNodes - 1) * (kNodes - 2) / 2) << "node" << i;
    if (i < 2) std::printf("node%d's probe: %s\n", i, summary["site_probe"].dump().c_str());
  }
  std::error_code ignored;
  fs::remove_all(out, ignored);
}

}  // namespace
}  // namespace chorus::node
