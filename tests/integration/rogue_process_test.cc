// A rogue endpoint against a cluster it does not belong to: three `chorus
// node` processes train with pairwise gossip (whose requests any peer may
// send), and the test process, with a libfabric endpoint of its own, sends
// node1 forged pairwise requests and answers at the protocol's tags, and
// messages at the live-state tags a joiner would take, while they train.
// node1's data plane drops every one (counted in summary.json), and the
// three end with one model that trained. Under D-PSGD the forged
// parameters change nothing: the three end with a clean run's model. And a
// member that replays a message of an earlier epoch in a later one has it
// dropped.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gossip/protocols/gossip_tags.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "node/cluster/live_state.h"
#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::PortPicker;
using testing::ReadJson;
using testing::Summaries;
using testing::ExpectOneTrainedModel;

// The fi_getname blob of a tcp;ofi_rxm endpoint at 127.0.0.1:port (a
// struct sockaddr_in), as the rogue would read it off the wire.
std::vector<uint8_t> LoopbackAddress(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<uint8_t> blob(sizeof(a));
  std::memcpy(blob.data(), &a, sizeof(a));
  return blob;
}

// A tcp;ofi_rxm endpoint of the test's own whose view names the node whose
// data plane listens on `victim_port` as rank 1, itself rank 0.
Result<std::unique_ptr<gossip::Transport>> RogueTo(uint16_t victim_port) {
  gossip::FabricOptions options;
  options.provider = gossip::FabricProvider::kTcpRxm;
  options.node_name = "rogue";
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<gossip::Transport> rogue, gossip::MakeFabricTransport(options));
  const std::vector<gossip::PeerInfo> view = {{0, rogue->LocalAddress(), "rogue"},
                                              {1, LoopbackAddress(victim_port), "node1"}};
  CHORUS_RETURN_IF_ERROR(rogue->SetPeers(0, view));
  return rogue;
}

TEST(RogueProcessTest, ANodeDropsEveryMessageOfAnEndpointThatIsNotAMember) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  if (!gossip::FabricProviderVersion(gossip::FabricProvider::kTcpRxm)) GTEST_SKIP() << "no tcp;ofi_rxm";
  const std::string name = "rogue";
  const fs::path out = fs::temp_directory_path() / ("chorus-rogue-test-" + std::to_string(getpid()));
  PortPicker ports(static_cast<uint32_t>(getpid()) + 11);
  const int port0 = ports.Next();
  const uint16_t victim_port = ports.Next();
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string> args = testing::HandNodeArgs(
        "gossip-pairwise.toml", i, port0, out.string(), name,
        {"cluster.min_nodes=3", "fabric.port=" + std::to_string(i == 1 ? victim_port : 0), "train.threads=1",
         "train.epochs=3", "train.batch_size=32", "train.slowdown=2.0", "train.eval_every_epochs=0",
         "data.train_limit=6000", "data.test_limit=1000"});
    nodes.push_back(std::make_unique<ChorusProcess>(args));
  }
  auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  };
  ASSERT_TRUE(nodes[1]->WaitFor("cluster formed", 60)) << outputs();

  auto rogue = RogueTo(victim_port);
  ASSERT_TRUE(rogue) << rogue.error().ToString();
  // Forged values: 1e6 in every float, under the tags pairwise gossip and the
  // live-state transfer use at the first epochs, in a small and an eager size.
  std::vector<float> forged(1000, 1e6f);
  std::vector<gossip::RequestPtr> sends;
  int sent = 0;
  for (uint32_t epoch = 0; epoch < 2; ++epoch) {
    for (int round : {0, 1, 2}) {
      const gossip::Tag tag = gossip::GossipTag(gossip::GossipMessageKind::kPairwise, 0, epoch, round);
      for (size_t floats : {size_t{16}, forged.size()}) {
        auto send = (*rogue)->Isend(1, tag, std::as_bytes(std::span<const float>(forged.data(), floats)));
        ASSERT_TRUE(send) << send.error().ToString();
        sends.push_back(std::move(*send));
        ++sent;
      }
    }
    auto state = (*rogue)->Isend(1, LiveStateTagBase(epoch) + (gossip::Tag{1} << 20),
                                 std::as_bytes(std::span<const float>(forged.data(), 8)));
    ASSERT_TRUE(state) << state.error().ToString();
    sends.push_back(std::move(*state));
    ++sent;
  }

  const std::vector<nlohmann::json> summaries = Summaries(nodes, out / name, outputs);
  ExpectOneTrainedModel(summaries, outputs());
  const nlohmann::json& summary = summaries[1];
  ASSERT_TRUE(summary.is_object());
  // The any-source request receive took some of them; every one it took was
  // dropped (the rest wait unmatched: no member's receive takes them).
  EXPECT_GE(summary["data_plane_rejected"].get<int>(), 1) << "of " << sent << " forged messages\n" << outputs();
  EXPECT_LE(summary["data_plane_rejected"].get<int>(), sent);
  std::printf("forged messages sent %d: taken by an any-source receive and dropped %d, the rest matched no "
              "receive (those name members); one model, test accuracy %.4f\n", sent,
              summary["data_plane_rejected"].get<int>(), summary["test_accuracy"].get<double>());
  for (auto& s : sends) s->Cancel();
  fs::remove_all(out);
}

// Three `chorus node` processes of `config` under `out`/`name`, node1's data
// plane on `victim_port`; `sets` as --set for all.
std::vector<std::unique_ptr<ChorusProcess>> StartThree(const std::string& config, const fs::path& out,
                                                       const std::string& name, int port0, uint16_t victim_port,
                                                       const std::vector<std::string>& sets) {
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> all = {"cluster.min_nodes=3", "fabric.port=" + std::to_string(i == 1 ? victim_port : 0)};
    all.insert(all.end(), sets.begin(), sets.end());
    nodes.push_back(std::make_unique<ChorusProcess>(testing::HandNodeArgs(config, i, port0, out.string(), name, all)));
  }
  return nodes;
}

// The three nodes' final checksums, once all exited 0 ("" for a node that did not).
std::vector<std::string> Checksums(std::vector<std::unique_ptr<ChorusProcess>>& nodes, const fs::path& run) {
  std::vector<std::string> sums;
  const auto outputs = [&] {
    std::string all;
    for (auto& node : nodes) all += node->Output();
    return all;
  };
  for (const nlohmann::json& summary : Summaries(nodes, run, outputs)) {
    sums.push_back(summary.is_object() ? summary["parameter_checksum"].get<std::string>() : "");
  }
  return sums;
}

// D-PSGD on a ring, whose receives name their member: a rogue endpoint sends
// forged parameters (1e6 in every float, small and model-sized) at the tags
// of its first rounds while the three train. None is taken, and the three
// end with exactly the model of the same run without the rogue (lock-step
// D-PSGD on one thread is deterministic).
TEST(RogueProcessTest, DpsgdNodesEndWithTheModelOfARunWithoutTheRogue) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  if (!gossip::FabricProviderVersion(gossip::FabricProvider::kTcpRxm)) GTEST_SKIP() << "no tcp;ofi_rxm";
  const fs::path out = fs::temp_directory_path() / ("chorus-rogue-dpsgd-test-" + std::to_string(getpid()));
  PortPicker ports(static_cast<uint32_t>(getpid()) + 13);
  const int port0 = ports.Next();
  const uint16_t victim_port = ports.Next();
  const std::vector<std::string> sets = {"train.threads=1", "train.epochs=2", "train.batch_size=32",
                                         "train.slowdown=2.0", "train.eval_every_epochs=0",
                                         "data.train_limit=6000", "data.test_limit=1000"};
  auto clean = StartThree("gossip-dpsgd-ring.toml", out, "clean", port0, victim_port, sets);
  const std::vector<std::string> expected = Checksums(clean, out / "clean");
  ASSERT_FALSE(expected[0].empty());

  auto nodes = StartThree("gossip-dpsgd-ring.toml", out, "attacked", port0, victim_port, sets);
  ASSERT_TRUE(nodes[1]->WaitFor("cluster formed", 60)) << nodes[1]->Output();
  auto rogue = RogueTo(victim_port);
  ASSERT_TRUE(rogue) << rogue.error().ToString();
  std::vector<float> forged(235146, 1e6f);  // the MLP's parameter count
  std::vector<gossip::RequestPtr> sends;
  for (int round = 0; round < 8; ++round) {
    const gossip::Tag tag = gossip::GossipTag(gossip::GossipMessageKind::kDpsgd, 0, 0, round);
    for (size_t floats : {size_t{16}, forged.size()}) {
      auto send = (*rogue)->Isend(1, tag, std::as_bytes(std::span<const float>(forged.data(), floats)));
      ASSERT_TRUE(send) << send.error().ToString();
      sends.push_back(std::move(*send));
    }
  }
  const std::vector<std::string> got = Checksums(nodes, out / "attacked");
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], expected[0]) << "node" << i << " ended with another model than the run without the rogue";
  }
  std::printf("forged D-PSGD messages sent: %zu; all three nodes ended with the clean run's model %s\n",
              sends.size(), expected[0].c_str());
  for (auto& s : sends) s->Cancel();
  fs::remove_all(out);
}

// A member replays: node1 keeps the first message it sealed in epoch 0 and,
// once node3 has joined (epoch 1), sends it again, unchanged, under the tag
// of its first send of the new epoch, just before that send
// (CHORUS_FAULT_REPLAY), so that the receive meant for that send takes it.
// The sender is a member, so only the seal stands between the replay and
// the ring's sum: its receiver drops it (counted), the step re-forms, and
// the four train on to one model.
TEST(RogueProcessTest, AMemberThatReplaysAMessageOfAnEarlierEpochHasItDropped) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  if (!gossip::FabricProviderVersion(gossip::FabricProvider::kTcpRxm)) GTEST_SKIP() << "no tcp;ofi_rxm";
  const std::string name = "replay";
  const fs::path out = fs::temp_directory_path() / ("chorus-replay-test-" + std::to_string(getpid()));
  const int port0 = PortPicker(static_cast<uint32_t>(getpid()) + 17).Next();
  auto start = [&](int i) {
    return std::make_unique<ChorusProcess>(
        testing::HandNodeArgs("allreduce-ring.toml", i, port0, out.string(), name,
                              {"cluster.min_nodes=3", "train.threads=1", "train.epochs=3", "train.batch_size=32",
                               "train.slowdown=6.0", "train.eval_every_epochs=0", "data.train_limit=6000",
                               "data.test_limit=1000"}),
        i == 1 ? std::vector<std::string>{"CHORUS_FAULT_REPLAY=1"} : std::vector<std::string>{});
  };
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(start(i));
  auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < nodes.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + nodes[i]->Output();
    return all;
  };
  ASSERT_TRUE(nodes[0]->WaitFor("cluster formed", 60)) << outputs();
  nodes.push_back(start(3));
  ASSERT_TRUE(nodes[1]->WaitFor("replays its first message of epoch 0", 120)) << outputs();
  const std::vector<nlohmann::json> summaries = Summaries(nodes, out / name, outputs);
  ExpectOneTrainedModel(summaries, outputs());
  int64_t rejected = 0;
  for (const nlohmann::json& summary : summaries) {
    if (summary.is_object()) rejected += summary.value("data_plane_rejected", int64_t{0});
  }
  EXPECT_GE(rejected, 1) << "no member dropped the replayed message\n" << outputs();
  std::printf("a member replayed 1 message of epoch 0 in epoch 1: dropped by its receiver (%lld rejected in all); "
              "four nodes, one model\n", static_cast<long long>(rejected));
  fs::remove_all(out);
}

}  // namespace
}  // namespace chorus::node
