// A member that poisons the all-reduce (NaN gradients, or 1000 times its
// own, also while it reports its norm as if it had not), DiLoCo's outer
// step (its pseudo-gradient) or gossip (its parameters as sent, under D-PSGD
// and pairwise), started by hand with the others as
// `chorus node` processes: the others name it in their logs and
// summary.json, do not use what it sent, expel it after three in a row,
// refuse it when it asks to join again under its name, and end with one
// model that trained. And a member that lies about another removes nobody:
// neither its accusation alone nor its report that the other is dead.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::PortPicker;
using testing::ReadJson;

struct PoisonVariant {
  std::string name;
  std::string fault;   // CHORUS_FAULT_POISON of node3
  std::string config;  // under configs/
  std::vector<std::string> sets = {};        // --set for every node
  std::vector<std::string> node3_sets = {};  // and for node3, after those
  bool credentials = false;                  // per-node credentials (cluster.issuer)
};

class PoisonProcessTest : public ::testing::TestWithParam<PoisonVariant> {};

std::vector<std::string> PoisonNodeArgs(const std::string& config, int i, int port0, const fs::path& out,
                                        const std::string& name, int nodes) {
  return testing::HandNodeArgs(
      config, i, port0, out.string(), name,
      {"cluster.min_nodes=" + std::to_string(nodes), "cluster.heartbeat_interval_s=0.2",
       "cluster.suspect_timeout_s=1.5",
       "cluster.dead_timeout_s=3", "fabric.op_timeout_s=60", "train.threads=1", "train.epochs=3",
       "train.batch_size=32", "train.eval_every_epochs=0", "data.train_limit=6000", "data.test_limit=1000"});
}

// `nodes` (four) hand-started nodes of `config` (PoisonNodeArgs), each with `sets`
// (--set) and its own credential when `credentials`; node `faulty` also with
// the environment `env` and `faulty_sets`.
struct PoisonCluster {
  std::string config;
  std::vector<std::string> sets = {};
  int faulty = 3;
  std::vector<std::string> env = {};
  std::vector<std::string> faulty_sets = {};
  bool credentials = false;
  int nodes = 4;
};
std::vector<std::unique_ptr<ChorusProcess>> StartNodes(const PoisonCluster& f, int port0, const fs::path& out,
                                                      const std::string& name) {
  const std::vector<std::vector<std::string>> credentials =
      f.credentials ? testing::IssueNodeCredentials(out / "credentials", f.nodes)
                    : std::vector<std::vector<std::string>>(static_cast<size_t>(f.nodes));
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < f.nodes; ++i) {
    std::vector<std::string> args = PoisonNodeArgs(f.config, i, port0, out, name, f.nodes);
    for (const std::string& set : f.sets) args.insert(args.end(), {"--set", set});
    for (const std::string& set : credentials[i]) args.insert(args.end(), {"--set", set});
    for (const std::string& set : i == f.faulty ? f.faulty_sets : std::vector<std::string>{}) {
      args.insert(args.end(), {"--set", set});
    }
    nodes.push_back(std::make_unique<ChorusProcess>(args, i == f.faulty ? f.env : std::vector<std::string>{}));
  }
  return nodes;
}

// The poisoner is not admitted again. One that knows it was expelled (it
// saw the checks that named it) does not ask; one that does not know asks
// again under its name (cluster.rejoin), and whoever coordinates refuses
// it, though only some members may have expelled it (unless the run ended
// first). ControlExpulsionTest covers the refusal without the race. Then
// the poisoner is stopped.
void ExpectThePoisonerStaysOut(ChorusProcess& poisoner, const std::string& outputs) {
  EXPECT_FALSE(std::regex_search(outputs, std::regex("epoch [1-9][0-9]*: members [^\n]*node3")))
      << "node3 was admitted again\n" << outputs;
  (void)poisoner.Wait(1);
  const std::string out3 = poisoner.Output();
  if (out3.find("the cluster expelled this node") != std::string::npos) {
    EXPECT_EQ(out3.find("rejoining the cluster"), std::string::npos) << outputs;
  }
  if (out3.find("refused by") != std::string::npos) {
    EXPECT_NE(out3.find("node name 'node3' was expelled from this cluster"), std::string::npos) << outputs;
  }
  poisoner.Signal(SIGKILL);
  (void)poisoner.Wait(10);
}

TEST_P(PoisonProcessTest, TheOthersNameThePoisonerExpelItAndTrainOn) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-" + GetParam().name;
  const fs::path out = fs::temp_directory_path() / ("chorus-poison-test-" + std::to_string(getpid()));
  const int port0 = PortPicker(static_cast<uint32_t>(getpid()) + 7).Next();
  // node3 poisons, and asks to join again when expelled.
  const PoisonVariant& v = GetParam();
  std::vector<std::string> node3_sets = v.node3_sets;
  node3_sets.push_back("cluster.rejoin=true");
  std::vector<std::unique_ptr<ChorusProcess>> nodes =
      StartNodes({v.config, v.sets, 3, {"CHORUS_FAULT_POISON=" + v.fault}, node3_sets, v.credentials}, port0, out,
                 name);
  auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  };
  // Every member expels it at once: whichever declares it dead first, the
  // others see it go.
  ASSERT_TRUE(nodes[0]->WaitFor("members node0 node1 node2 \\(departed ranks 3\\)", 120)) << outputs();
  EXPECT_NE(outputs().find("member node3 (rank 3) is dead: expelled"), std::string::npos) << outputs();
  // With credentials every conviction a view carries is proven (the accusers' signed words).
  EXPECT_FALSE(std::regex_search(outputs(), std::regex("refusing \\S+('s word that|'s accusation of)")))
      << outputs();
  std::string checksum;
  int expelled_by = 0, named_at_once = 0;
  for (int i = 0; i < 3; ++i) {
    std::optional<int> status = nodes[i]->Wait(300);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i << "\n" << outputs();
    const nlohmann::json summary = ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << outputs();
    EXPECT_EQ(summary["world_size"], 3) << outputs();
    // What a member mixes inside its site has its own check and ledger.
    const bool inside_site = GetParam().fault.find("+site") != std::string::npos;
    const nlohmann::json& poison = summary[inside_site ? "site_poison" : "poison"];
    const bool lies = GetParam().fault.ends_with("+lie");
    const bool equivocates = GetParam().fault.find("+equivocate") != std::string::npos;
    // All-reduce and DiLoCo name it at every check; a member whose third
    // check failed because the others had expelled node3 already counts two.
    // Under gossip only its neighbours see it. A liar is named by the first
    // audited check and accused at once (poison_check.h, PoisonVerdict::liars),
    // so a member whose audited check the expulsion cut short names it in none.
    // An equivocator is named by its first check, alike by every member that
    // judged it (exchange.poison_agreement_up_to), and accused at once: likewise.
    if (poison.contains("named") && !lies && !equivocates) {
      EXPECT_GE(poison["named"].value("node3", 0), 2) << poison.dump();
    }
    if (lies) EXPECT_GE(poison.value("unattributed_steps", 0), 1) << poison.dump();
    // (A member whose check the expulsion cut short judged nothing in agreement.)
    const bool agreed = !equivocates || poison.value("agreed_steps", 0) >= 1;
    if ((lies || equivocates) && agreed && poison["named"].value("node3", 0) >= 1) ++named_at_once;
    if (poison["expelled"] == nlohmann::json::array({"node3"})) {
      ++expelled_by;
      // Under gossip the expeller rejected node3's values three times in a
      // row; its counts survive the re-form that removed node3.
      if (poison.contains("rejected_outliers")) {
        EXPECT_GE(poison["rejected_outliers"].get<int64_t>() + summary.value("rejected_nonfinite", int64_t{0}), 3)
            << "node" << i << ": " << summary.dump();
      }
    }
    EXPECT_GT(summary["test_accuracy"].get<double>(), 0.70) << "node" << i << ": " << poison.dump();
    const std::string c = summary["parameter_checksum"].get<std::string>();
    if (checksum.empty()) checksum = c;
    EXPECT_EQ(c, checksum) << "node" << i << " ended with another model";
  }
  EXPECT_GE(expelled_by, 1) << "no survivor's summary.json says it expelled node3 (once)\n" << outputs();
  if (GetParam().fault.ends_with("+lie") || GetParam().fault.find("+equivocate") != std::string::npos) {
    EXPECT_GE(named_at_once, 2) << "fewer than the quorum of survivors named the liar at its first check\n"
                                << outputs();
  }
  ExpectThePoisonerStaysOut(*nodes[3], outputs());
  fs::remove_all(out);
}

// StartNodes, then waits for each node to end (300 s at most).
struct LiarRun {
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  std::vector<std::optional<int>> statuses;
  std::string Outputs() const {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  }
};
LiarRun RunNodes(const PoisonCluster& f, const fs::path& out, const std::string& name, uint32_t port_salt) {
  LiarRun run;
  run.nodes = StartNodes(f, PortPicker(static_cast<uint32_t>(getpid()) + port_salt).Next(), out, name);
  for (auto& node : run.nodes) run.statuses.push_back(node->Wait(300));
  return run;
}

// Nodes [0, n) exited with status 0 and wrote one model in a world of `world`.
void ExpectOneModel(const LiarRun& run, int n, int world, const fs::path& out, const std::string& name) {
  std::string checksum;
  for (int i = 0; i < n; ++i) {
    const std::optional<int>& status = run.statuses[static_cast<size_t>(i)];
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i << "\n" << run.Outputs();
    const nlohmann::json summary = ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << run.Outputs();
    EXPECT_EQ(summary["world_size"], world) << run.Outputs();
    const std::string c = summary["parameter_checksum"].get<std::string>();
    if (checksum.empty()) checksum = c;
    EXPECT_EQ(c, checksum) << "node" << i << " ended with another model";
  }
}

// A member that asks the cluster to expel an honest one (it lies, or its
// check is wrong): one member's word expels nobody (cluster.expel_quorum is
// 2), so all four train on and end with one model.
TEST(PoisonProcessTest, ALyingMemberAloneExpelsNobody) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-liar";
  const fs::path out = fs::temp_directory_path() / ("chorus-liar-test-" + std::to_string(getpid()));
  const LiarRun run = RunNodes({"gossip-dpsgd-ring.toml", {}, 3, {"CHORUS_FAULT_ACCUSE=node1@5"}}, out, name, 11);
  ExpectOneModel(run, 4, 4, out, name);
  // Every member heard the accusation and counted it as one of two.
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(run.nodes[i]->Output().find("node3 asks to expel node1: fault injection"), std::string::npos)
        << "node" << i << "\n" << run.Outputs();
  }
  EXPECT_NE(run.Outputs().find("(1 of the 2 members needed)"), std::string::npos) << run.Outputs();
  EXPECT_EQ(run.Outputs().find("is dead: expelled"), std::string::npos) << run.Outputs();
  fs::remove_all(out);
}

// A member whose heartbeats say an honest member is dead, though the
// coordinator hears that member: its word removes nobody but itself (the
// epoch cannot go on with both), and the other three end with one model.
TEST(PoisonProcessTest, AMemberThatCallsAnotherDeadAloneRemovesOnlyItself) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-dead-claim";
  const fs::path out = fs::temp_directory_path() / ("chorus-dead-claim-test-" + std::to_string(getpid()));
  // Long enough for the coordinator's grace (dead_timeout_s, 3 s) from step 5 on.
  const LiarRun run = RunNodes({"allreduce-ring.toml", {"train.epochs=24"}, 3, {"CHORUS_FAULT_CLAIM_DEAD=node1@5"},
                               {"cluster.rejoin=false"}},
                              out, name, 13);
  ExpectOneModel(run, 3, 3, out, name);
  EXPECT_TRUE(run.statuses[3].has_value()) << "the liar did not end\n" << run.Outputs();
  EXPECT_NE(run.nodes[0]->Output().find("node3 declared node1 dead (1 member(s) so far)"), std::string::npos)
      << run.Outputs();
  EXPECT_NE(run.nodes[0]->Output().find("member node3 (rank 3) is dead: it alone declared node1 dead"),
            std::string::npos)
      << run.Outputs();
  EXPECT_EQ(run.Outputs().find("member node1 (rank 1) is dead"), std::string::npos) << run.Outputs();
  fs::remove_all(out);
}

// A member of sparse DiLoCo's ring that sends its own pseudo-gradient as it
// is but a thousandth of each sum it forwards in the all-gather: the
// members after it would hold another mean than those before it, and no
// sum exceeds what the members reported. Their views of the sum disagree,
// so the sync is abandoned, and the rest of the epoch is audited, where
// nothing is forwarded: all four end with one model.
TEST(PoisonProcessTest, AMemberThatAltersWhatItForwardsSplitsNoReplica) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-forward";
  const fs::path out = fs::temp_directory_path() / ("chorus-forward-test-" + std::to_string(getpid()));
  const LiarRun run = RunNodes({"diloco.toml",
                               {"exchange.compression.codec=top-k", "exchange.compression.ratio=0.02",
                                "exchange.compression.value_bits=8"},
                               3,
                               {"CHORUS_FAULT_POISON=x0.001@5+forward"}},
                              out, name, 19);
  ExpectOneModel(run, 4, 4, out, name);
  for (int i = 0; i < 4; ++i) {
    const nlohmann::json summary = ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << run.Outputs();
    EXPECT_GT(summary["test_accuracy"].get<double>(), 0.70) << "node" << i;
    const nlohmann::json& poison = summary["poison"];
    EXPECT_GE(poison.value("unattributed_steps", 0), 1) << poison.dump();
    EXPECT_GE(poison.value("audited_steps", 0), 2) << poison.dump();
  }
  EXPECT_NE(run.Outputs().find("the members hold different sums"), std::string::npos) << run.Outputs();
  // The replicas stayed together until the final average (0.50 apart when
  // the altered sums landed; 0.003 here, the last inner steps' drift).
  std::smatch m;
  const std::string outputs = run.Outputs();
  ASSERT_TRUE(std::regex_search(outputs, m, std::regex("replicas averaged \\(relative distance ([0-9.e-]+)")))
      << outputs;
  EXPECT_LT(std::stod(m[1].str()), 0.05) << outputs;
  fs::remove_all(out);
}

// A proposer that lies in its views: node0, which founds the cluster, puts
// node2 among the expelled names of every view it proposes, with its own
// signed accusation and one it forged in node1's name. With per-node
// credentials every member checks a conviction's proofs: none takes node2
// for expelled, node2 does not leave, and all four end with one model.
TEST(PoisonProcessTest, AViewThatConvictsWithoutProofIsRefused) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-forged-view";
  const fs::path out = fs::temp_directory_path() / ("chorus-forged-view-test-" + std::to_string(getpid()));
  const LiarRun run = RunNodes(
      {"allreduce-ring.toml", {}, 0, {"CHORUS_FAULT_FORGE_EXPULSION=node2"}, {}, /*credentials=*/true}, out, name, 17);
  ExpectOneModel(run, 4, 4, out, name);
  for (int i = 1; i < 4; ++i) {
    EXPECT_NE(run.nodes[i]->Output().find("refusing node0's word that node2 was expelled: it carries the signed "
                                          "accusations of 1 of the 2 members needed"),
              std::string::npos)
        << "node" << i << "\n" << run.Outputs();
  }
  EXPECT_EQ(run.nodes[2]->Output().find("expelled this node"), std::string::npos) << run.Outputs();
  EXPECT_EQ(run.Outputs().find("node2 was expelled: fault injection"), std::string::npos) << run.Outputs();
  fs::remove_all(out);
}

// Three members with per-node credentials: node2 equivocates (from step 5,
// at every other check, the norms it sends member k are 1 + 999 k times its
// own). Unsigned, three members cannot agree on who lied (a relayer may lie
// too), so the check's figures were gathered in one round and node0 and
// node1 judged node2 differently, one of them alone each time: never a
// quorum of two. Signed, a relayed copy is node2's or refused, both hold
// both of node2's signed figures after the echoes, name it alike at its
// first equivocated check, and expel it; the two end with one model.
TEST(PoisonProcessTest, ThreeMembersWithCredentialsNameAnEquivocatorAlike) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "poison-signed-three";
  const fs::path out = fs::temp_directory_path() / ("chorus-signed-three-test-" + std::to_string(getpid()));
  PoisonCluster f{"allreduce-ring.toml", {}, 2, {"CHORUS_FAULT_POISON=x1@5+equivocate"}, {}, /*credentials=*/true};
  f.nodes = 3;
  std::vector<std::unique_ptr<ChorusProcess>> nodes =
      StartNodes(f, PortPicker(static_cast<uint32_t>(getpid()) + 19).Next(), out, name);
  auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  };
  ASSERT_TRUE(nodes[0]->WaitFor("members node0 node1 \\(departed ranks 2\\)", 120)) << outputs();
  std::string checksum;
  for (int i = 0; i < 2; ++i) {
    std::optional<int> status = nodes[i]->Wait(300);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i << "\n" << outputs();
    const nlohmann::json summary = ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << outputs();
    const nlohmann::json& poison = summary["poison"];
    EXPECT_EQ(summary["world_size"], 2) << outputs();
    EXPECT_GE(poison.value("agreed_steps", 0), 1) << "node" << i << ": " << poison.dump();
    EXPECT_GE(poison["named"].value("node2", 0), 1) << "node" << i << ": " << poison.dump();
    EXPECT_GT(summary["test_accuracy"].get<double>(), 0.70) << "node" << i;
    const std::string c = summary["parameter_checksum"].get<std::string>();
    if (checksum.empty()) checksum = c;
    EXPECT_EQ(c, checksum) << "node" << i << " ended with another model";
  }
  EXPECT_NE(outputs().find("member node2 (rank 2) is dead: expelled"), std::string::npos) << outputs();
  nodes[2]->Signal(SIGKILL);
  (void)nodes[2]->Wait(10);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Faults, PoisonProcessTest,
                         ::testing::Values(PoisonVariant{"nan", "nan@5", "allreduce-ring.toml"},
                                           PoisonVariant{"scaled", "x1000@5", "allreduce-ring.toml"},
                                           // 1000x its gradient and 1000x its samples: the same norm
                                           // per sample as the others, a claim above the global batch.
                                           PoisonVariant{"scaled_claim", "x1000@5+claim", "allreduce-ring.toml"},
                                           // Twice its gradient and its samples: a claim under the global
                                           // batch, above its share.
                                           PoisonVariant{"share_claim", "x2@5+claim", "allreduce-ring.toml"},
                                           // 1000x its gradient, reporting the norm it would have had:
                                           // the sum betrays a lie, and the audited steps name it.
                                           PoisonVariant{"scaled_lie", "x1000@5+lie", "allreduce-ring.toml"},
                                           // NaN, reported as a finite zero contribution: the sum is not
                                           // finite while every report is, and the audited steps name it.
                                           PoisonVariant{"nan_lie", "nan@5+lie", "allreduce-ring.toml"},
                                           PoisonVariant{"equivocate", "x1@5+equivocate", "allreduce-ring.toml"},
                                           PoisonVariant{"diloco_nan", "nan@5", "diloco.toml"},
                                           PoisonVariant{"diloco_nan_lie", "nan@5+lie", "diloco.toml"},
                                           PoisonVariant{"diloco_scaled", "x1000@5", "diloco.toml"},
                                           PoisonVariant{"diloco_scaled_lie", "x1000@5+lie", "diloco.toml"},
                                           PoisonVariant{"diloco_equivocate", "x1@5+equivocate", "diloco.toml"},
                                           // The same with top-2% 8-bit pseudo-gradients: the sum is of
                                           // what each member's encodings kept, which it reports.
                                           PoisonVariant{"sparse_diloco_scaled_lie", "x1000@5+lie", "diloco.toml",
                                                         {"exchange.compression.codec=top-k",
                                                          "exchange.compression.ratio=0.02",
                                                          "exchange.compression.value_bits=8"}},
                                           PoisonVariant{"sparse_diloco_nan", "nan@5", "diloco.toml",
                                                         {"exchange.compression.codec=top-k",
                                                          "exchange.compression.ratio=0.02",
                                                          "exchange.compression.value_bits=8"}},
                                           // Two sites, node3 alone in its own and so its representative.
                                           PoisonVariant{"site_diloco_scaled_lie", "x1000@5+lie", "diloco.toml",
                                                         {"exchange.outer.inner=site", "cluster.site=a"},
                                                         {"cluster.site=b"}},
                                           // Four members of one site: node3 sends 1000x its displacement
                                           // into the site's average after every inner step.
                                           PoisonVariant{"site_inner_scaled", "x1000@5+site", "diloco.toml",
                                                         {"exchange.outer.inner=site", "cluster.site=a"}},
                                           PoisonVariant{"site_inner_scaled_lie", "x1000@5+site+lie", "diloco.toml",
                                                         {"exchange.outer.inner=site", "cluster.site=a"}},
                                           // The convictions travel in views with the accusers' proofs.
                                           PoisonVariant{"scaled_with_credentials", "x1000@5", "allreduce-ring.toml",
                                                         {}, {}, /*credentials=*/true},
                                           PoisonVariant{"dpsgd_nan", "nan@5", "gossip-dpsgd-ring.toml"},
                                           PoisonVariant{"dpsgd_scaled", "x1000@5", "gossip-dpsgd-ring.toml"},
                                           PoisonVariant{"pairwise_scaled", "x1000@5", "gossip-pairwise.toml"}),
                         [](const ::testing::TestParamInfo<PoisonVariant>& info) { return info.param.name; });

}  // namespace
}  // namespace chorus::node
