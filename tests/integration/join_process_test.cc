// Nodes that arrive while a cluster trains, started by hand as a user would
// (`chorus node` processes, no launcher): a fourth node joins three that
// train and takes the live state; the sender dies mid-transfer and the joiner
// takes the state from the next member; a killed node restarted with the same
// name rejoins; the hand-started example configs form in either order. Every
// run ends with one model (equal parameter checksums in summary.json).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::PortPicker;
using testing::ReadJson;
using testing::TrainedRecords;

using testing::kDataDir;
using testing::kConfigsDir;

// One hand-started training cluster: node0 listens on a free port that every
// node bootstraps from, the others on any port; a slice of Fashion-MNIST and
// slowed steps (train.slowdown), so that a node started a second or two late
// is admitted with most of the run still ahead on 2 busy cores.
class JoinHandCluster {
 public:
  JoinHandCluster(std::string name, std::vector<std::string> sets) : name_(std::move(name)), sets_(std::move(sets)) {
    out_ = fs::temp_directory_path() / ("chorus-join-test-" + std::to_string(getpid()));
    port0_ = PortPicker(static_cast<uint32_t>(getpid())).Next();
  }
  ~JoinHandCluster() { fs::remove_all(out_); }

  std::vector<std::string> Args(int i) const {
    std::vector<std::string> args = {"node", std::string(kConfigsDir) + "/allreduce-ring.toml"};
    const std::string listen = i == 0 ? "127.0.0.1:" + std::to_string(port0_) : "127.0.0.1:0";
    std::vector<std::string> sets = {"run.node_name=\"node" + std::to_string(i) + "\"",
                                     "run.output_dir=\"" + out_.string() + "\"",
                                     "run.name=\"" + name_ + "\"",
                                     "run.progress=\"off\"",
                                     "cluster.listen=\"" + listen + "\"",
                                     "cluster.bootstrap=[\"127.0.0.1:" + std::to_string(port0_) + "\"]",
                                     "cluster.token=\"" + name_ + "\"",
                                     "cluster.min_nodes=3",
                                     "cluster.heartbeat_interval_s=0.2",
                                     "cluster.suspect_timeout_s=1.5",
                                     "cluster.dead_timeout_s=3",
                                     "cluster.join_timeout_s=30",
                                     "cluster.admit_every_steps=5",
                                     "cluster.admit_every_s=0",
                                     "fabric.provider=\"tcp;ofi_rxm\"",
                                     "fabric.op_timeout_s=60",
                                     "train.threads=1",
                                     "train.epochs=5",
                                     "train.batch_size=32",
                                     "train.slowdown=3.0",
                                     "train.log_every_steps=5",
                                     "train.eval_every_epochs=0",
                                     "data.train_limit=6000",
                                     "data.test_limit=500"};
    sets.insert(sets.end(), sets_.begin(), sets_.end());
    for (const std::string& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    return args;
  }

  ChorusProcess& Start(int i, const std::vector<std::string>& env = {}, const std::vector<std::string>& flags = {}) {
    nodes_.resize(std::max<size_t>(nodes_.size(), static_cast<size_t>(i) + 1));
    std::vector<std::string> args = Args(i);
    args.insert(args.end(), flags.begin(), flags.end());
    nodes_[static_cast<size_t>(i)] = std::make_unique<ChorusProcess>(args, env);
    return *nodes_[static_cast<size_t>(i)];
  }
  ChorusProcess& node(int i) { return *nodes_[static_cast<size_t>(i)]; }

  // kill -9 of node i once it has written a checkpoint (within 60 s);
  // false when it wrote none or did not die.
  bool KillOnceCheckpointed(int i) {
    const fs::path checkpoint = dir(i) / "checkpoint.safetensors";
    for (int t = 0; t < 1200 && !fs::exists(checkpoint); ++t) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(checkpoint)) return false;
    node(i).Signal(SIGKILL);
    return node(i).Wait(10).has_value();
  }
  // Nodes 0-3 started, node3 killed once it has a checkpoint and the other
  // three re-formed without it (node0 says so within 30 s); false otherwise.
  bool StartFourAndLoseNode3() {
    for (int i = 0; i < 4; ++i) Start(i);
    return KillOnceCheckpointed(3) && node(0).WaitFor("members node0 node1 node2 \\(departed", 30).has_value();
  }
  fs::path dir(int i) const { return out_ / name_ / ("node" + std::to_string(i)); }
  std::string address0() const { return "127.0.0.1:" + std::to_string(port0_); }

  // Everyone's output, for failure messages.
  std::string Outputs() {
    std::string all;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]) all += "---- node" + std::to_string(i) + "\n" + nodes_[i]->Output();
    }
    return all;
  }

  // Nodes `which` exit 0 within `timeout_s` and end with one model; returns it.
  std::string ExpectOneModel(const std::vector<int>& which, double timeout_s) {
    std::string checksum;
    int64_t steps = -1;
    for (int i : which) {
      std::optional<int> status = node(i).Wait(timeout_s);
      EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "node" << i << "\n" << Outputs();
      const nlohmann::json summary = ReadJson(dir(i) / "summary.json");
      if (!summary.is_object()) {
        ADD_FAILURE() << "node" << i << " wrote no summary\n" << Outputs();
        continue;
      }
      const std::string c = summary["parameter_checksum"].get<std::string>();
      if (checksum.empty()) checksum = c;
      EXPECT_EQ(c, checksum) << "node" << i;
      if (steps < 0) steps = summary["steps"].get<int64_t>();
      EXPECT_EQ(summary["steps"].get<int64_t>(), steps) << "node" << i;
    }
    return checksum;
  }

 private:
  std::string name_;
  std::vector<std::string> sets_;
  fs::path out_;
  int port0_ = -1;
  std::vector<std::unique_ptr<ChorusProcess>> nodes_;
};

struct JoinVariant {
  std::string name;
  std::vector<std::string> sets;
};

class JoinProcessTest : public ::testing::TestWithParam<JoinVariant> {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  }
};

// Three nodes train; a fourth started by hand once they do is admitted at an
// admission point, takes the live state, trains the rest of the run with
// them, and all four end with one model (under all-reduce the same model after
// every step; under gossip after the consensus phase).
TEST_P(JoinProcessTest, AFourthNodeJoinsMidRunAndAllEndWithOneModel) {
  JoinHandCluster cluster("join-" + GetParam().name, GetParam().sets);
  for (int i = 0; i < 3; ++i) cluster.Start(i);
  ASSERT_TRUE(cluster.node(0).WaitFor("cluster formed", 60)) << cluster.Outputs();
  ChorusProcess& joiner = cluster.Start(3);
  ASSERT_TRUE(joiner.WaitFor("received the live state from node[0-2] .*CRC-32 verified", 60)) << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2, 3}, 240);
  EXPECT_GT(TrainedRecords(cluster.dir(3) / "metrics.jsonl"), 2) << cluster.Outputs();
  const nlohmann::json joined = ReadJson(cluster.dir(3) / "summary.json");
  ASSERT_TRUE(joined.is_object());
  EXPECT_EQ(joined["world_size"].get<int>(), 4);
  EXPECT_GT(joined["samples_per_s"].get<double>(), 0.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(cluster.node(i).Output().find("admitted node3"), std::string::npos) << "node" << i;
  }
}

// node2 is frozen (SIGSTOP) past the dead timeout, so the others remove it
// and train on as two; continued, it learns it was removed, starts itself
// again as a new process under its name (cluster.rejoin; no supervisor),
// is admitted, takes the live state, and the three end with one model.
TEST_P(JoinProcessTest, AFrozenNodeRemovedByTheOthersRejoinsByItself) {
  if (GetParam().name == "choco") GTEST_SKIP() << "the all-reduce and D-PSGD cases cover the rejoin";
  // Slower steps and more epochs than the join test: about 10 s of training,
  // with room for the 3 s of silence, the restart and the admission.
  std::vector<std::string> sets = GetParam().sets;
  sets.insert(sets.end(), {"train.slowdown=20.0", "train.epochs=12"});
  JoinHandCluster cluster("rejoin-" + GetParam().name, sets);
  for (int i = 0; i < 3; ++i) cluster.Start(i);
  ASSERT_TRUE(cluster.node(2).WaitFor("cluster formed", 60)) << cluster.Outputs();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  cluster.node(2).Signal(SIGSTOP);
  // dead_timeout_s is 3: the others re-form without it.
  const bool removed = cluster.node(0).WaitFor("members node0 node1 \\(departed", 20).has_value();
  cluster.node(2).Signal(SIGCONT);
  ASSERT_TRUE(removed) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(2).WaitFor("rejoining the cluster as a new process", 30)) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(2).WaitFor("received the live state from node[01] .*CRC-32 verified", 60))
      << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2}, 240);
}

// node2 freezes while the three attach the host's shared memory for the
// all-reduce, before any step (it stops itself there:
// CHORUS_FAULT_STOP_BEFORE_ATTACH). node0 and node1 re-form without it and
// train, where they used to exit with the attach's error; continued, node2
// learns it was removed, starts again as a new process, takes the live state,
// and the three end with one model.
TEST(JoinFaultTest, ANodeFrozenWhileTheMembersAttachSharedMemoryRejoins) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("attach-freeze", {"exchange.shared_memory=true", "train.epochs=12", "train.slowdown=20.0"});
  cluster.Start(0);
  cluster.Start(1);
  cluster.Start(2, {"CHORUS_FAULT_STOP_BEFORE_ATTACH=1"});
  const bool removed = cluster.node(0).WaitFor("members node0 node1 \\(departed", 60).has_value();
  cluster.node(2).Signal(SIGCONT);
  ASSERT_TRUE(removed) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(0).WaitFor("re-formed the all-reduce over 2 survivors", 30)) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(2).WaitFor("rejoining the cluster as a new process", 30)) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(2).WaitFor("received the live state from node[01] .*CRC-32 verified", 60))
      << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2}, 240);
}

INSTANTIATE_TEST_SUITE_P(
    Exchanges, JoinProcessTest,
    ::testing::Values(JoinVariant{"allreduce", {}},
                      JoinVariant{"dpsgd", {"exchange.kind=\"gossip\"", "exchange.protocol=\"dpsgd\"",
                                            "topology.kind=\"ring\""}},
                      JoinVariant{"choco", {"exchange.kind=\"gossip\"", "exchange.protocol=\"choco\"",
                                            "topology.kind=\"ring\"", "exchange.compression.codec=\"sign\""}}),
    [](const ::testing::TestParamInfo<JoinVariant>& info) { return info.param.name; });

// The member sending the live state (node0, rank 0) is killed between the
// header and the chunks (a fault-injection stall): the joiner's receive fails
// with it, the three others re-form without it, and the joiner takes the state
// from node1, the next member in rank order. All three end with one model.
TEST(JoinFaultTest, TheJoinerTakesTheStateFromAnotherMemberWhenTheSenderDies) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("join-sender-dies", {});
  ChorusProcess& sender = cluster.Start(0, {"CHORUS_FAULT_STALL_LIVE_STATE_S=60"});
  cluster.Start(1);
  cluster.Start(2);
  ASSERT_TRUE(sender.WaitFor("cluster formed", 60)) << cluster.Outputs();
  ChorusProcess& joiner = cluster.Start(3);
  ASSERT_TRUE(sender.WaitFor("fault injection: stalling", 60)) << cluster.Outputs();
  sender.Signal(SIGKILL);
  ASSERT_TRUE(joiner.WaitFor("received the live state from node1 .*CRC-32 verified", 60)) << cluster.Outputs();
  cluster.ExpectOneModel({1, 2, 3}, 240);
  EXPECT_NE(joiner.Output().find("receiving the live state from node0"), std::string::npos) << joiner.Output();
}

// A joiner cut off from the only member that holds the state, in the middle
// of taking it (node0 frozen between the header and the chunks): its part of
// the cluster is itself, with no state to train from. It joins again as a new
// process (cluster.rejoin, join only) instead of ending; once node0 is
// continued, it is admitted again, takes the state and both end with one model.
TEST(JoinFaultTest, AJoinerCutOffWhileTakingTheStateJoinsAgain) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  // Enough epochs that node0, training alone once it is continued, is still
  // at it when the joiner's new process (seconds to start on a busy host)
  // applies again.
  JoinHandCluster cluster("joiner-cut-off", {"cluster.min_nodes=1", "train.epochs=24"});
  ChorusProcess& holder = cluster.Start(0, {"CHORUS_FAULT_STALL_LIVE_STATE_S=2"});
  ASSERT_TRUE(holder.WaitFor("cluster formed", 60)) << cluster.Outputs();
  ChorusProcess& joiner = cluster.Start(1);
  ASSERT_TRUE(holder.WaitFor("fault injection: stalling", 60)) << cluster.Outputs();
  holder.Signal(SIGSTOP);
  const bool rejoins = joiner.WaitFor("rejoining the cluster as a new process", 30).has_value();
  holder.Signal(SIGCONT);
  ASSERT_TRUE(rejoins) << cluster.Outputs();
  ASSERT_TRUE(joiner.WaitFor("received the live state from node0 .*CRC-32 verified", 90)) << cluster.Outputs();
  cluster.ExpectOneModel({0, 1}, 240);
}

// kill -9 of node2 once it has written a checkpoint, and node2 started again
// at once with the same config and --resume: the coordinator takes the join
// of the new process for the end of the old one (its connection closed), the
// survivors re-form, admit node2 at an admission point, and node2 takes the
// live state instead of its stale checkpoint. All three end with one model.
TEST(JoinFaultTest, AKilledNodeStartedAgainWithTheSameNameRejoins) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("rejoin", {"train.checkpoint_every_epochs=1"});
  for (int i = 0; i < 3; ++i) cluster.Start(i);
  ASSERT_TRUE(cluster.KillOnceCheckpointed(2)) << cluster.Outputs();
  ChorusProcess& again = cluster.Start(2, {}, {"--resume"});
  ASSERT_TRUE(again.WaitFor("received the live state from node[01] .*CRC-32 verified", 90)) << cluster.Outputs();
  EXPECT_NE(again.Output().find("its live state replaces the checkpoint"), std::string::npos) << again.Output();
  cluster.ExpectOneModel({0, 1, 2}, 240);
}

// The resume tests' runs: checkpoints at each epoch's end, and long enough
// (on an idle host the three finished 5 epochs before they were stopped).
const std::vector<std::string> kResumeSettings = {"cluster.min_nodes=4", "train.checkpoint_every_epochs=1",
                                                  "train.epochs=12"};

// Four nodes train; node3 is killed once it has a checkpoint, the other three
// re-form and train on, and are stopped (SIGINT: each writes a checkpoint of
// where the cluster stood). Then all four are started again with --resume:
// node3's checkpoint is older and cut for four members, the others' for
// three. node3 learns it is behind and takes a member's live state instead
// of skipping steps with its old model, every node cuts its shard of what is
// left from that one position, and the four end with one model.
TEST(JoinFaultTest, FourNodesResumeTogetherAfterThreeReformedWithoutOne) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("resume-after-reform", kResumeSettings);
  ASSERT_TRUE(cluster.StartFourAndLoseNode3()) << cluster.Outputs();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a few steps as three
  for (int i = 0; i < 3; ++i) cluster.node(i).Signal(SIGINT);
  for (int i = 0; i < 3; ++i) {
    std::optional<int> status = cluster.node(i).Wait(60);
    ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 130) << "node" << i << "\n" << cluster.Outputs();
  }
  for (int i = 0; i < 4; ++i) cluster.Start(i, {}, {"--resume"});
  ASSERT_TRUE(cluster.node(3).WaitFor("step\\(s\\) behind the others", 90)) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(3).WaitFor("received the live state from node0 .*CRC-32 verified", 30)) << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2, 3}, 240);
  EXPECT_EQ(cluster.node(3).Output().find("skipping"), std::string::npos) << cluster.node(3).Output();
}

// The same with the three killed rather than stopped: each resumes from its
// last epoch's end (no stop wrote a checkpoint), where it keeps its shard,
// while node3 takes the live state. All four must agree on the first
// admission point after the resume step: the resumed three once met at the
// resume step itself and node3 did not come (each waited until a timeout).
TEST(JoinFaultTest, FourNodesResumeTogetherFromEpochEndsAfterThreeReformedWithoutOne) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("resume-from-epoch-ends", kResumeSettings);
  ASSERT_TRUE(cluster.StartFourAndLoseNode3()) << cluster.Outputs();
  // An epoch's end as three: node0's checkpoint is written again.
  const fs::path checkpoint = cluster.dir(0) / "checkpoint.safetensors";
  const auto before = fs::last_write_time(checkpoint);
  for (int t = 0; t < 1200 && fs::last_write_time(checkpoint) == before; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(fs::last_write_time(checkpoint), before) << cluster.Outputs();
  for (int i = 0; i < 3; ++i) cluster.node(i).Signal(SIGKILL);
  for (int i = 0; i < 3; ++i) {
    std::optional<int> status = cluster.node(i).Wait(60);
    ASSERT_TRUE(status && WIFSIGNALED(*status)) << "node" << i << "\n" << cluster.Outputs();
  }
  for (int i = 0; i < 4; ++i) cluster.Start(i, {}, {"--resume"});
  ASSERT_TRUE(cluster.node(0).WaitFor("resumed from .* after epoch", 60)) << cluster.Outputs();
  ASSERT_TRUE(cluster.node(3).WaitFor("received the live state from node[0-2] .*CRC-32 verified", 90))
      << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2, 3}, 240);
}

// A node that asks to join a cluster too close to its end (here no admission
// point ever comes: admit_every_steps = 0) is told that the run ended when
// the members finish, and exits 0 without a model, rather than form a
// cluster of its own (cluster.min_nodes = 1 lets it) and train a replica from
// scratch that nobody asked for.
TEST(JoinFaultTest, ANodeNeverAdmittedExitsWithoutAModelWhenTheRunEnds) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("run-ended", {"cluster.min_nodes=2", "cluster.admit_every_steps=0", "train.epochs=20"});
  ChorusProcess& first = cluster.Start(0);
  cluster.Start(1);
  ASSERT_TRUE(first.WaitFor("cluster formed", 60)) << cluster.Outputs();
  ChorusProcess& late = cluster.Start(2, {}, {"--set", "cluster.min_nodes=1"});
  ASSERT_TRUE(first.WaitFor("node2 \\(.*\\) asks to join", 60)) << cluster.Outputs();
  cluster.ExpectOneModel({0, 1}, 240);
  const std::optional<int> status = late.Wait(60);
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << cluster.Outputs();
  EXPECT_NE(late.Output().find("the cluster ended its run first"), std::string::npos) << cluster.Outputs();
  EXPECT_EQ(late.Output().find("cluster formed"), std::string::npos) << late.Output();
  EXPECT_FALSE(fs::exists(cluster.dir(2) / "summary.json"));
}

// Nodes under cluster.join_only (what a node rejoining by itself runs as)
// never found a cluster, also when they reach only each other and
// cluster.min_nodes = 1 would let either found one alone: they wait, and join
// the cluster that a plain node forms later.
TEST(JoinFaultTest, JoinOnlyNodesFoundNoClusterAndJoinTheOneThatForms) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("join-only", {"cluster.min_nodes=1", "train.epochs=3"});
  const std::string port1 = std::to_string(PortPicker(static_cast<uint32_t>(getpid()) + 1).Next());
  const std::string join_only = "cluster.join_only=true";
  const std::vector<std::string> flags1 = {"--set", join_only, "--set", "cluster.listen=\"127.0.0.1:" + port1 + "\""};
  const std::vector<std::string> flags2 = {
      "--set", join_only, "--set", "cluster.bootstrap=[\"127.0.0.1:" + port1 + "\", \"" + cluster.address0() + "\"]"};
  ChorusProcess& first = cluster.Start(1, {}, flags1);
  ChorusProcess& second = cluster.Start(2, {}, flags2);
  ASSERT_TRUE(first.WaitFor("looks for its cluster", 30)) << cluster.Outputs();
  ASSERT_TRUE(second.WaitFor("looks for its cluster", 30)) << cluster.Outputs();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  for (ChorusProcess* node : {&first, &second}) {
    EXPECT_EQ(node->Output().find("founder candidate"), std::string::npos) << cluster.Outputs();
    EXPECT_EQ(node->Output().find("cluster formed"), std::string::npos) << cluster.Outputs();
  }
  cluster.Start(0);
  ASSERT_TRUE(second.WaitFor("received the live state from node[01]", 90)) << cluster.Outputs();
  cluster.ExpectOneModel({0, 1, 2}, 240);
}

// One node's record (CHORUS_RECORD_SAMPLES_DIR, see
// node/outputs/sample_record.h): the steps it sent, the steps it applied
// (its rewinds applied), and the epoch sizes it recorded.
struct SampleRecordLines {
  using Key = std::pair<uint64_t, int64_t>;  // membership epoch, step
  std::map<Key, std::pair<int, std::vector<int32_t>>> sent;  // -> epoch, indices
  std::vector<Key> applied;
  std::map<int, int64_t> epoch_samples;
};

SampleRecordLines ReadSampleRecord(const fs::path& path) {
  SampleRecordLines out;
  std::ifstream in(path);
  for (std::string kind; in >> kind;) {
    SampleRecordLines::Key key;
    if (kind == "sent") {
      int epoch = 0;
      std::string list;
      in >> epoch >> key.first >> key.second >> list;
      std::vector<int32_t> indices;
      std::stringstream items(list);
      for (std::string item; std::getline(items, item, ',');) indices.push_back(std::stoi(item));
      out.sent[key] = {epoch, std::move(indices)};
    } else if (kind == "applied") {
      in >> key.first >> key.second;
      out.applied.push_back(key);
    } else if (kind == "rewind") {
      int64_t from = 0;
      in >> from;
      std::erase_if(out.applied, [&](const SampleRecordLines::Key& k) { return k.second >= from; });
    } else if (kind == "epoch") {
      int epoch = 0;
      int64_t n = 0;
      in >> epoch >> n;
      out.epoch_samples[epoch] = n;
    }
  }
  return out;
}

// Data coverage under all-reduce: a fourth node joins three that train, then
// one of the first three is killed. Every epoch's samples (as many as its
// partitions held) are trained once by the cluster, counted from the nodes'
// records of the batches whose gradients were summed into an update: the
// dead node's untrained rest and the batch of the step its death abandoned
// are trained by the survivors, none twice.
TEST(JoinFaultTest, AllreduceTrainsEverySampleOfAnEpochOnceThroughAJoinAndAKill) {
  if (!fs::exists(fs::path(kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  JoinHandCluster cluster("coverage", {"train.slowdown=10.0", "train.epochs=3"});
  const fs::path records_dir = cluster.dir(0).parent_path().parent_path() / "samples";
  fs::create_directories(records_dir);
  const std::vector<std::string> env = {"CHORUS_RECORD_SAMPLES_DIR=" + records_dir.string()};
  for (int i = 0; i < 3; ++i) cluster.Start(i, env);
  ASSERT_TRUE(cluster.node(0).WaitFor("cluster formed", 60)) << cluster.Outputs();
  cluster.Start(3, env);
  ASSERT_TRUE(cluster.node(3).WaitFor("received the live state from node[0-2]", 60)) << cluster.Outputs();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  cluster.node(1).Signal(SIGKILL);
  ASSERT_TRUE(cluster.node(1).Wait(10).has_value());
  cluster.ExpectOneModel({0, 2, 3}, 240);
  ASSERT_TRUE(cluster.node(0).Output().find("re-formed") != std::string::npos) << cluster.Outputs();

  // The survivors' applied steps are the final model's; the killed node's
  // gradient went into those of them it sent.
  std::vector<SampleRecordLines> records;
  std::set<SampleRecordLines::Key> lineage;
  std::map<int, int64_t> epoch_samples;
  for (int i = 0; i < 4; ++i) {
    records.push_back(ReadSampleRecord(records_dir / ("node" + std::to_string(i) + ".samples")));
    if (i == 1) continue;  // killed: it recorded no epoch's end
    lineage.insert(records.back().applied.begin(), records.back().applied.end());
    for (const auto& [epoch, n] : records.back().epoch_samples) {
      if (epoch_samples.count(epoch)) {
        EXPECT_EQ(epoch_samples[epoch], n) << "node" << i << ", epoch " << epoch;
      }
      epoch_samples[epoch] = n;
    }
  }
  std::map<int, std::vector<int32_t>> trained;
  for (int i = 0; i < 4; ++i) {
    const SampleRecordLines& r = records[static_cast<size_t>(i)];
    std::vector<SampleRecordLines::Key> steps;
    if (i == 1) {
      std::copy_if(lineage.begin(), lineage.end(), std::back_inserter(steps),
                   [&](const SampleRecordLines::Key& k) { return r.sent.count(k) > 0; });
    } else {
      steps = r.applied;
    }
    for (const SampleRecordLines::Key& k : steps) {
      auto sent = r.sent.find(k);
      ASSERT_NE(sent, r.sent.end()) << "node" << i << " applied a step it never sent: " << k.first << " " << k.second;
      std::vector<int32_t>& into = trained[sent->second.first];
      into.insert(into.end(), sent->second.second.begin(), sent->second.second.end());
    }
  }
  ASSERT_EQ(epoch_samples.size(), 3u);
  for (const auto& [epoch, n] : epoch_samples) {
    std::vector<int32_t>& indices = trained[epoch];
    std::sort(indices.begin(), indices.end());
    const auto twice = std::adjacent_find(indices.begin(), indices.end());
    EXPECT_EQ(twice, indices.end()) << "epoch " << epoch << ": sample " << (twice != indices.end() ? *twice : -1)
                                    << " trained twice";
    EXPECT_EQ(static_cast<int64_t>(indices.size()), n) << "epoch " << epoch << ": samples trained by the cluster\n"
                                                       << cluster.Outputs();
  }
}

}  // namespace
}  // namespace chorus::node
