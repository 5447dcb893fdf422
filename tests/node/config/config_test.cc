// Tests of node/config_parse: every file in configs/, defaults, error messages
// (file:line:col, key path, expectation, suggestion), overrides, printing back
// as TOML, environment hints and host:port syntax.
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/exchange/gossip_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gossip/collectives/allreduce_auto.h"
#include "node/exchange/allreduce_exchange.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const Result<Config>& result) {
  return result ? std::string("(no error)") : result.error().message();
}

std::string ErrorOf(const Status& status) { return status.ok() ? "(no error)" : status.message(); }

// Each (TOML text, expected message part) fails to parse with InvalidArgument
// naming its key's place: every case sets the key it is about on line 2.
void ExpectEachRejectedAtItsLine(const std::map<std::string, std::string>& cases) {
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    Result<Config> config = ParseConfigString(text, "x.toml");
    ASSERT_FALSE(config);
    EXPECT_THAT(config.error().message(), HasSubstr(expected));
    EXPECT_THAT(config.error().message(), HasSubstr("x.toml:2:"));
    EXPECT_EQ(config.error().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ConfigParseTest, EveryConfigFileParsesValidatesAndRoundTrips) {
  const std::filesystem::path root = std::filesystem::path(CHORUS_SOURCE_DIR) / "configs";
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".toml") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    Result<Config> config = ParseConfigFile(entry.path().string());
    ASSERT_TRUE(config) << ErrorOf(config);
    EXPECT_EQ(config->source, entry.path().string());
    Result<Config> again = ParseConfigString(DescribeConfig(*config), "described");
    ASSERT_TRUE(again) << ErrorOf(again);
    EXPECT_TRUE(again->SameSettings(*config));
  }
  EXPECT_GE(files, 2) << "configs/ should hold at least single-mlp.toml and single-cnn.toml";
}

TEST(ConfigParseTest, SingleMlpIsTheBuiltInDefault) {
  Result<Config> config = ParseConfigFile(std::string(CHORUS_SOURCE_DIR) + "/configs/single-mlp.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_TRUE(config->SameSettings(DefaultConfig())) << DescribeConfig(*config);
  EXPECT_EQ(config->train.model, trainer::ModelKind::kMlp);
  EXPECT_EQ(config->train.precision, trainer::Precision::kFp16);
  EXPECT_EQ(config->train.optimizer, trainer::OptimizerKind::kLars);
  EXPECT_EQ(config->train.epochs, 5);
  EXPECT_EQ(config->train.batch_size, 64);
}

TEST(ConfigParseTest, SingleCnnUsesBatchNormModel) {
  Result<Config> config = ParseConfigFile(std::string(CHORUS_SOURCE_DIR) + "/configs/single-cnn.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->train.model, trainer::ModelKind::kCnnBn);
  EXPECT_EQ(config->train.precision, trainer::Precision::kFp16);
  EXPECT_EQ(config->train.optimizer, trainer::OptimizerKind::kLars);
  EXPECT_EQ(config->train.epochs, 15);
  EXPECT_DOUBLE_EQ(config->train.weight_decay, 2e-3);
}

TEST(ConfigParseTest, EmptyTextGivesDefaults) {
  Result<Config> config = ParseConfigString("", "empty.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_TRUE(config->SameSettings(DefaultConfig()));
  EXPECT_TRUE(config->origins.empty());
  EXPECT_TRUE(ValidateConfig(DefaultConfig()).ok()) << ErrorOf(ValidateConfig(DefaultConfig()));
  EXPECT_EQ(DefaultConfig().source, "<built-in default>");
}

TEST(ConfigParseTest, ValuesAreReadAndOriginsRecorded) {
  Result<Config> config = ParseConfigString(
      "[run]\nname = \"trial\"\n[train]\nepochs = 7\nbase_lr = 0.05\nseed = 42\n"
      "[cluster]\nbootstrap = [\"a.example:7100\", \"10.0.0.2:7101\"]\n",
      "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->run.name, "trial");
  EXPECT_EQ(config->train.epochs, 7);
  EXPECT_EQ(config->train.base_lr, 0.05);
  EXPECT_EQ(config->train.seed, 42u);
  EXPECT_EQ(config->cluster.bootstrap, (std::vector<std::string>{"a.example:7100", "10.0.0.2:7101"}));
  EXPECT_EQ(config->origins.at("train.epochs"), "x.toml:4:1");
  EXPECT_EQ(config->origins.at("cluster.bootstrap[1]"), "x.toml:8:32");
}

TEST(ConfigParseTest, UnknownKeyNamesLineAndSuggestsClosest) {
  Result<Config> config = ParseConfigString("[train]\nepochs = 3\nbatchsize = 128\n", "configs/x.toml");
  EXPECT_EQ(ErrorOf(config), "configs/x.toml:3:1: train.batchsize: unknown key; did you mean train.batch_size?");
}

TEST(ConfigParseTest, UnknownKeyFarFromAnyGivesNoSuggestion) {
  Result<Config> config = ParseConfigString("[train]\nflux_capacitor = 1\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: train.flux_capacitor: unknown key");
}

TEST(ConfigParseTest, KeyInWrongTableSuggestsTheRightTable) {
  Result<Config> config = ParseConfigString("[run]\nlisten = \"127.0.0.1:1\"\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: run.listen: unknown key; did you mean cluster.listen?");
}

TEST(ConfigParseTest, UnknownTableSuggestsClosest) {
  Result<Config> config = ParseConfigString("# comment\n[trian]\nepochs = 1\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:2: trian: unknown table [trian]; did you mean [train]?");
}

TEST(ConfigParseTest, TopLevelKeySuggestsItsTable) {
  Result<Config> config = ParseConfigString("epochs = 3\n", "x.toml");
  EXPECT_THAT(ErrorOf(config), HasSubstr("x.toml:1:1: epochs: unknown top-level key"));
  EXPECT_THAT(ErrorOf(config), HasSubstr("did you mean train.epochs?"));
}

TEST(ConfigParseTest, TableGivenAsValueIsATypeError) {
  Result<Config> config = ParseConfigString("train = 5\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:1:1: train: expected a table [train], got an integer (5)");
}

TEST(ConfigParseTest, WrongTypeNamesExpectedAndActualType) {
  Result<Config> config = ParseConfigString("[train]\nbatch_size = \"64\"\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: train.batch_size: expected an integer, got a string (\"64\")");

  config = ParseConfigString("[train]\nepochs = 2.5\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: train.epochs: expected an integer, got a float (2.5)");

  config = ParseConfigString("[run]\nname = 3\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: run.name: expected a string, got an integer (3)");

  config = ParseConfigString("[cluster]\nbootstrap = \"a:1\"\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: cluster.bootstrap: expected an array of strings, got a string (\"a:1\")");

  config = ParseConfigString("[cluster]\nbootstrap = [\"a:1\", 2]\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:21: cluster.bootstrap[1]: expected a string, got an integer (2)");

  config = ParseConfigString("[train]\nseed = -1\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: train.seed: expected an integer >= 0, got an integer (-1)");

  config = ParseConfigString("[train]\nepochs = 10000000000\n", "x.toml");
  EXPECT_EQ(ErrorOf(config), "x.toml:2:1: train.epochs: expected a 32-bit integer, got 10000000000");
}

TEST(ConfigParseTest, IntegerIsAcceptedWhereANumberIsExpected) {
  Result<Config> config = ParseConfigString("[train]\nbase_lr = 1\n[loss_scale]\ninitial = 1024\n", "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->train.base_lr, 1.0);
  EXPECT_EQ(config->loss_scale.initial, 1024.0);
}

TEST(ConfigParseTest, OutOfRangeNamesFileLineKeyAndExpectation) {
  const char* text =
      "# a config\n"
      "[run]\n"
      "name = \"x\"\n"
      "\n"
      "[train]\n"
      "epochs = 2\n"
      "batch_size = 0\n";
  Result<Config> config = ParseConfigString(text, "configs/x.toml");
  EXPECT_EQ(ErrorOf(config), "configs/x.toml:7:1: train.batch_size: expected an integer >= 1, got 0");
}

TEST(ConfigParseTest, EachRangeCheckRejectsItsBadValue) {
  // One bad setting per case; the error must name that key.
  const std::map<std::string, std::string> cases = {
      {"[run]\nname = \"\"", "run.name: expected a non-empty name"},
      {"[run]\nname = \"a/b\"", "run.name: expected a name of letters"},
      {"[run]\nnode_name = \"..\"", "run.node_name: expected a name of letters"},
      {"[run]\noutput_dir = \"\"", "run.output_dir: expected a non-empty string"},
      {"[run]\nlog_level = \"verbose\"", "run.log_level: expected one of \"trace\""},
      {"[run]\nprogress = \"fancy\"", "run.progress: expected one of \"auto\", \"bar\", \"lines\", \"off\""},
      {"[train]\nmodel = \"resnet\"", "train.model: expected one of \"mlp\", \"cnn\", \"cnn-bn\", got \"resnet\""},
      {"[train]\nmodel = \"cnn_bn\"", "got \"cnn_bn\" (did you mean \"cnn-bn\"?)"},
      {"[train]\nprecision = \"bf16\"", "train.precision: expected one of \"fp16\", \"fp32\""},
      {"[train]\noptimizer = \"adam\"", "train.optimizer: expected one of \"lars\", \"sgd\""},
      {"[train]\nepochs = -1", "train.epochs: expected an integer >= 1, got -1"},
      {"[train]\nepochs = 0", "train.epochs: expected an integer >= 1, got 0"},
      {"[train]\nbatch_size = 100000000", "train.batch_size: expected at most 60000 (the shard of one node: "
                                          "60000 training images over 1 node), got 100000000"},
      {"[train]\nbatch_size = 64\n[data]\ntrain_limit = 100\n[cluster]\nmin_nodes = 2",
       "train.batch_size: expected at most 50 (the shard of one node: 100 training images over 2 nodes), got 64"},
      {"[train]\nthreads = 0", "train.threads: expected an integer in [1, 256], got 0"},
      {"[train]\nthreads = 257", "train.threads: expected an integer in [1, 256], got 257"},
      {"[train]\nbase_lr = 0", "train.base_lr: expected a number > 0.0, got 0.0"},
      {"[train]\nbase_lr = nan", "train.base_lr: expected a number > 0.0, got nan"},
      {"[train]\nbase_lr = inf", "train.base_lr: expected a number > 0.0, got inf"},
      {"[train]\nmomentum = 1.0", "train.momentum: expected a number in [0.0, 1.0), got 1.0"},
      {"[train]\nmomentum = -0.1", "train.momentum: expected a number in [0.0, 1.0), got -0.1"},
      {"[train]\nweight_decay = -1e-4", "train.weight_decay: expected a number >= 0.0"},
      {"[train]\nlars_eta = 0.0", "train.lars_eta: expected a number > 0.0"},
      {"[train]\nwarmup_epochs = -1", "train.warmup_epochs: expected a number >= 0.0"},
      {"[train]\nlr_decay_power = -2", "train.lr_decay_power: expected a number >= 0.0"},
      {"[train]\neval_every_epochs = -1", "train.eval_every_epochs: expected an integer >= 0"},
      {"[train]\nlog_every_steps = 0", "train.log_every_steps: expected an integer >= 1"},
      {"[train]\ncheckpoint_every_epochs = -1", "train.checkpoint_every_epochs: expected an integer >= 0"},
      {"[train]\nslowdown = -0.5", "train.slowdown: expected a number >= 0.0"},
      {"[loss_scale]\ninitial = 0", "loss_scale.initial: expected a number > 0.0"},
      {"[loss_scale]\ninitial = 0.5", "loss_scale.initial: expected a number >= loss_scale.min_scale (1.0), got 0.5"},
      {"[loss_scale]\ngrowth_interval = 0", "loss_scale.growth_interval: expected an integer >= 1"},
      {"[loss_scale]\ngrowth_factor = 1.0", "loss_scale.growth_factor: expected a number > 1.0"},
      {"[loss_scale]\nbackoff_factor = 1.0", "loss_scale.backoff_factor: expected a number in (0.0, 1.0), got 1.0"},
      {"[loss_scale]\nbackoff_factor = 0.0", "loss_scale.backoff_factor: expected a number in (0.0, 1.0), got 0.0"},
      {"[loss_scale]\nmin_scale = 0", "loss_scale.min_scale: expected a number > 0.0"},
      {"[data]\ndir = \"\"", "data.dir: expected a non-empty string"},
      {"[data]\ntrain_limit = -5", "data.train_limit: expected an integer >= 0"},
      {"[data]\ntest_limit = -5", "data.test_limit: expected an integer >= 0"},
      {"[data]\naugment_shift = 9", "data.augment_shift: expected an integer in [0, 8], got 9"},
      {"[cluster]\nmin_nodes = 0", "cluster.min_nodes: expected an integer >= 1, got 0"},
      {"[cluster]\njoin_timeout_s = 0", "cluster.join_timeout_s: expected a number > 0.0"},
      {"[cluster]\nheartbeat_interval_s = -1", "cluster.heartbeat_interval_s: expected a number > 0.0"},
      {"[cluster]\nsuspect_timeout_s = 0.2",
       "cluster.suspect_timeout_s: expected a number > cluster.heartbeat_interval_s (0.25), got 0.2"},
      {"[cluster]\ndead_timeout_s = 0.5",
       "cluster.dead_timeout_s: expected a number >= cluster.suspect_timeout_s (1.0), got 0.5"},
      {"[cluster]\nrank_hint = -2", "cluster.rank_hint: expected an integer >= -1, got -2"},
      {"[cluster]\nlisten = \"localhost\"", "cluster.listen: expected host:port, got \"localhost\" (missing ':port')"},
      {"[cluster]\nlisten = \"1.2.3:80\"", "cluster.listen: expected host:port, got \"1.2.3:80\""},
      {"[cluster]\nlisten = \"host:70000\"", "port 70000 is out of range"},
      {"[cluster]\nadvertise = \"host:0\"", "cluster.advertise: expected host:port with a port in [1, 65535]"},
      {"[cluster]\nbootstrap = [\"a:1\", \"bad_host:2\"]", "cluster.bootstrap[1]: expected host:port, got \"bad_host:2\""},
      {"[fabric]\nprovider = \"verbs\"", "fabric.provider: expected one of \"tcp;ofi_rxm\", \"net\", \"shm\", got \"verbs\""},
      {"[fabric]\nop_timeout_s = 0", "fabric.op_timeout_s: expected a number > 0.0"},
      {"[exchange]\nkind = \"ps\"", "exchange.kind: expected one of \"none\", \"allreduce\", \"gossip\", got \"ps\""},
      {"[exchange]\nalgorithm = \"rings\"", "exchange.algorithm: expected one of \"auto\", \"ring\", \"tree\", "
                                            "\"halving-doubling\", \"recursive-doubling\", \"hierarchical\", "
                                            "got \"rings\" (did you mean \"ring\"?)"},
      {"[exchange]\nbucket_kib = 0", "exchange.bucket_kib: expected an integer >= 1, got 0"},
      {"[exchange]\nfp16_wire = 1", "exchange.fp16_wire: expected a boolean (true or false), got an integer (1)"},
      {"[exchange]\non_failure = \"retry\"", "exchange.on_failure: expected one of \"continue\", \"stop\""},
      {"[exchange]\nprotocol = \"pushsum\"", "exchange.protocol: expected one of \"dpsgd\", \"pairwise-async\", "
                                            "\"push-sum\", \"choco\", got \"pushsum\" (did you mean \"push-sum\"?)"},
      {"[exchange]\nperiod = 0", "exchange.period: expected an integer >= 1, got 0"},
      {"[exchange.outer]\noptimizer = \"adam\"",
       "exchange.outer.optimizer: expected one of \"none\", \"average\", \"sgd\", \"nesterov\", got \"adam\""},
      {"[exchange.outer]\nlr = 0", "exchange.outer.lr: expected a number > 0.0"},
      {"[exchange.outer]\nmomentum = 1.0", "exchange.outer.momentum: expected a number in [0.0, 1.0), got 1.0"},
      {"[exchange.outer]\nperiod = 0", "exchange.outer.period: expected an integer >= 1, got 0"},
      {"[exchange.outer]\nfragments = 5\nperiod = 4", "exchange.outer.fragments: expected an integer in [1, 4], got 5"},
      {"[exchange.outer]\ndelay = 4\nperiod = 16\nfragments = 4",
       "exchange.outer.delay: expected an integer in [0, 3], got 4"},
      {"[exchange.outer]\nlocal_mix = 1", "exchange.outer.local_mix: expected a number in [0.0, 1.0), got 1"},
      {"[exchange.outer]\npeers = \"all\"", "exchange.outer.peers: expected one of \"neighbours\", \"random\""},
      {"[exchange.compression]\nvalue_bits = 4", "exchange.compression.value_bits: expected 32, 16 or 8, got 4"},
      {"[train]\nbalance = \"time\"\n[exchange]\nkind = \"gossip\"\n[exchange.outer]\noptimizer = \"nesterov\"",
       "train.balance: balance \"time\" splits an all-reduce step's global batch; exchange.kind is \"gossip\""},
      {"[topology]\nkind = \"one-peer-exponential\"\n[exchange]\nkind = \"gossip\"\n[exchange.outer]\n"
       "optimizer = \"average\"\n[cluster]\nmin_nodes = 4",
       "topology.kind: topology one-peer-exponential is directed; an outer step with the neighbours needs an "
       "undirected graph"},
      {"[exchange]\nmax_staleness = -2", "exchange.max_staleness: expected an integer >= -1, got -2"},
      {"[exchange]\ngamma = -0.5", "exchange.gamma: expected a number in (0, 1], got -0.5"},
      {"[exchange]\ngamma = 1.5", "exchange.gamma: expected a number in (0, 1], got 1.5"},
      {"[exchange]\nconsensus = \"exact\"", "exchange.consensus: expected one of \"allreduce\", \"rounds\", \"none\""},
      {"[exchange]\nconsensus_bound = 0", "exchange.consensus_bound: expected a number > 0.0, got 0.0"},
      {"[exchange]\nconsensus_max_rounds = 0", "exchange.consensus_max_rounds: expected an integer >= 1, got 0"},
      {"[exchange]\nconsensus_every_steps = 0", "exchange.consensus_every_steps: expected an integer >= 1, got 0"},
      {"[exchange.compression]\ncodec = \"topk\"", "exchange.compression.codec: expected one of \"none\", \"fp16\", "
                                                 "\"int8\", \"sign\", \"top-k\", \"random-k\", got \"topk\" "
                                                 "(did you mean \"top-k\"?)"},
      {"[exchange.compression]\nratio = 0", "exchange.compression.ratio: expected a number in (0, 1], got 0.0"},
      {"[exchange.compression]\nratio = 1.01", "exchange.compression.ratio: expected a number in (0, 1], got 1.01"},
      {"[exchange.compression]\nchunk = 0", "exchange.compression.chunk: expected an integer >= 1, got 0"},
      {"[exchange.compression]\nlevel = 3", "exchange.compression.level: unknown key"},
      {"[exchange.crossovers]\ntree_max_kib = -2",
       "exchange.crossovers.tree_max_kib: expected an integer >= -1, got -2"},
      {"[exchange.crossovers]\nring_min_kib = 64", "exchange.crossovers.ring_min_kib: unknown key"},
      {"[exchange]\ncompression = \"sign\"",
       "exchange.compression: expected a table [exchange.compression], got a string (\"sign\")"},
      {"[exchange]\ncompresion = { codec = \"sign\" }", "exchange.compresion: unknown key; did you mean "
                                                        "exchange.compression?"},
      {"[topology]\nkind = \"star\"", "topology.kind: expected one of \"ring\", \"bidirectional-ring\", \"torus\""},
      {"[topology]\ndims = [2, 0]", "x.toml:2:12: topology.dims[1]: expected an integer >= 1, got 0"},
      {"[topology]\ndims = [2, \"4\"]", "x.toml:2:12: topology.dims[1]: expected a 32-bit integer, got a string"},
      {"[topology]\ndims = 4", "topology.dims: expected an array of integers, got an integer (4)"},
      {"[topology]\ndegree = 0", "topology.degree: expected an integer >= 1, got 0"},
      {"[fabric]\nencrypt = true\nauthenticate = false", "fabric.encrypt: needs fabric.authenticate = true"},
  };
  ExpectEachRejectedAtItsLine(cases);
}

TEST(ConfigParseTest, SiteSettingsThatCannotWorkAreRejected) {
  const std::map<std::string, std::string> cases = {
      {"[exchange]\nsite_probe = true\nkind = \"gossip\"\nprotocol = \"pairwise-async\"",
       "exchange.site_probe: the members measure together at each membership change; pairwise-async nodes "
       "follow the changes at their own pace"},
      {"[cluster]\nsite = \"auto\"",
       "cluster.site: \"auto\" is found by measuring the links; exchange.site_probe is false"},
      {"[exchange.outer]\ninner = \"sites\"", "exchange.outer.inner: expected one of \"alone\", \"site\""},
      {"[exchange.outer]\ninner = \"site\"",
       "exchange.outer.inner: \"site\" runs between outer steps; exchange.outer.optimizer is \"none\""},
      {"[exchange.outer]\ninner = \"site\"\noptimizer = \"nesterov\"\n[exchange]\nkind = \"gossip\"",
       "exchange.outer.inner: \"site\" needs an outer all-reduce across sites; exchange.kind is \"gossip\""},
      {"[exchange.outer]\ninner = \"site\"\noptimizer = \"nesterov\"\n[exchange]\nkind = \"allreduce\"\n"
       "[exchange.compression]\ncodec = \"top-k\"",
       "exchange.outer.inner: \"site\" sends plain parameters across sites; a codec is set"},
      {"[exchange.outer]\ninner = \"site-gossip\"\noptimizer = \"nesterov\"\n[exchange]\nkind = \"gossip\"",
       "exchange.outer.inner: \"site-gossip\" needs an outer all-reduce across sites; exchange.kind is \"gossip\""},
  };
  ExpectEachRejectedAtItsLine(cases);
}

TEST(ConfigParseTest, ExchangeAndTopologyKeysAreRead) {
  const std::string text =
      "[exchange]\n"
      "kind = \"gossip\"\n"
      "protocol = \"choco\"\n"
      "gamma = 0.5\n"
      "fp16_wire = true\n"
      "consensus = \"rounds\"\n"
      "\n"
      "[exchange.compression]\n"
      "codec = \"int8\"\n"
      "chunk = 64\n"
      "\n"
      "[topology]\n"
      "kind = \"torus\"\n"
      "dims = [2, 4]\n"
      "degree = 3\n";
  Result<Config> config = ParseConfigString(text, "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->exchange.kind, ExchangeKind::kGossip);
  EXPECT_EQ(config->exchange.protocol, GossipProtocolKind::kChoco);
  EXPECT_EQ(config->exchange.gamma, 0.5);
  EXPECT_TRUE(config->exchange.fp16_wire);
  EXPECT_EQ(config->exchange.consensus, ConsensusSetting::kRounds);
  EXPECT_EQ(config->exchange.algorithm, gossip::AllreduceAlgorithm::kAuto);  // untouched keys keep their defaults
  EXPECT_EQ(config->exchange.compression.codec, gossip::CodecKind::kInt8);
  EXPECT_EQ(config->exchange.compression.chunk, 64);
  EXPECT_EQ(config->exchange.compression.ratio, CompressionConfig{}.ratio);
  EXPECT_EQ(config->topology.kind, topologies::GraphKind::kTorus);
  EXPECT_EQ(config->topology.dims, (std::vector<int>{2, 4}));
  EXPECT_EQ(config->topology.degree, 3);
  EXPECT_EQ(config->origins.at("exchange.compression.codec"), "x.toml:9:1");
  EXPECT_EQ(config->origins.at("topology.dims"), "x.toml:14:1");
  EXPECT_EQ(config->origins.at("topology.dims[1]"), "x.toml:14:12");
}

TEST(ConfigParseTest, CompressionMayBeAnInlineTableOrDottedKeys) {
  Result<Config> inline_table =
      ParseConfigString("[exchange]\nkind = \"gossip\"\ncompression = { codec = \"sign\", chunk = 32 }\n", "x.toml");
  ASSERT_TRUE(inline_table) << ErrorOf(inline_table);
  EXPECT_EQ(inline_table->exchange.compression.codec, gossip::CodecKind::kSign);
  EXPECT_EQ(inline_table->exchange.compression.chunk, 32);

  Result<Config> dotted = ParseConfigString("[exchange]\ncompression.codec = \"fp16\"\n", "x.toml");
  ASSERT_TRUE(dotted) << ErrorOf(dotted);
  EXPECT_EQ(dotted->exchange.compression.codec, gossip::CodecKind::kFp16);

  Result<Config> bad = ParseConfigString("[exchange]\ncompression = { codec = \"zip\" }\n", "x.toml");
  EXPECT_THAT(ErrorOf(bad), HasSubstr("x.toml:2:17: exchange.compression.codec: expected one of"));
}

// What a joiner's settings are compared by: [exchange] (subtables too),
// [topology], and the [train] / [data] keys that fix what a step computes, a
// line per key; not the per-node ones (batch size, device, threads, ...).
TEST(ConfigParseTest, SharedSettingsAreExchangeTopologyAndWhatAStepComputes) {
  Result<Config> a = ParseConfigString("[exchange]\nkind = \"gossip\"\n[train]\nbatch_size = 32\n", "a.toml");
  Result<Config> b = ParseConfigString("[exchange]\nkind = \"gossip\"\n[train]\nbatch_size = 128\n", "b.toml");
  Result<Config> c = ParseConfigString("[exchange.crossovers]\ntree_max_kib = 64\n", "c.toml");
  ASSERT_TRUE(a && b && c);
  const std::string text = SharedSettingsText(*a);
  EXPECT_EQ(text, SharedSettingsText(*b));  // batch sizes may differ between nodes
  EXPECT_NE(text.find("exchange.kind = \"gossip\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("exchange.compression.codec = "), std::string::npos) << text;
  EXPECT_NE(text.find("topology.kind = \"ring\"\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("train.batch_size"), std::string::npos) << text;
  EXPECT_NE(SharedSettingsText(*c).find("exchange.crossovers.tree_max_kib = 64\n"), std::string::npos);
  // A different model (or lr, seed, training-set size...) would train something else.
  Result<Config> cnn = ParseConfigString("[exchange]\nkind = \"gossip\"\n[train]\nmodel = \"cnn\"\n", "cnn.toml");
  ASSERT_TRUE(cnn);
  EXPECT_NE(SharedSettingsText(*cnn), text);
  EXPECT_NE(SharedSettingsText(*cnn).find("train.model = \"cnn\"\n"), std::string::npos);
  for (const char* shared : {"train.model", "train.precision", "train.optimizer", "train.epochs", "train.base_lr",
                             "train.momentum", "train.weight_decay", "train.lars_eta", "train.warmup_epochs",
                             "train.lr_decay_power", "train.seed", "data.train_limit",
                             "cluster.admit_every_steps", "fabric.authenticate", "fabric.encrypt"}) {
    EXPECT_NE(text.find(std::string(shared) + " = "), std::string::npos) << shared;
  }
  for (const char* own : {"train.device", "train.threads", "train.slowdown", "train.eval_", "train.log_every_steps",
                          "train.checkpoint_every_epochs", "data.dir", "data.test_limit", "cluster.listen",
                          "cluster.bootstrap", "cluster.min_nodes", "cluster.token", "run.", "fabric.provider",
                          "fabric.port", "fabric.wait_spin_us"}) {
    EXPECT_EQ(text.find(own), std::string::npos) << own;
  }
}

// The gossip step's settings and the LARS norm: bad values, and a setting
// that the chosen exchange cannot honour, named with the key that conflicts.
TEST(ConfigParseTest, GossipCorrectionAndLarsNormChecksNameTheKey) {
  const std::map<std::string, std::string> cases = {
      {"[exchange]\ncorrection = \"d2\"", "exchange.correction: corrects a gossip step; exchange.kind is \"none\""},
      {"[exchange]\ncorrection = \"d2\"\nkind = \"gossip\"\nprotocol = \"choco\"",
       "exchange.correction: d2 needs D-PSGD's symmetric mixing; exchange.protocol is \"choco\""},
      {"[exchange]\nglobal_average_every = 4\nkind = \"gossip\"\nprotocol = \"pairwise-async\"",
       "exchange.global_average_every: runs on every member at the same step; pairwise-async nodes step apart"},
      {"[exchange]\nconsensus_control = 0.1\nkind = \"gossip\"\nperiod = 2",
       "exchange.consensus_control: adds mixing rounds to every step; exchange.period is 2"},
      {"[exchange]\ngossip_momentum = \"global\"",
       "exchange.gossip_momentum: expected one of \"local\", \"quasi-global\""},
      {"[train]\nlars_norm = \"global\"",
       "train.lars_norm: expected one of \"auto\", \"local\", \"mixed\", \"global-batch\", \"peer\", \"mean-sketch\""},
      {"[train]\nlars_norm_nodes = -1", "train.lars_norm_nodes: expected an integer >= 0, got -1"},
      {"[train]\nlars_norm = \"peer\"\n[exchange]\nkind = \"gossip\"\nprotocol = \"pairwise-async\"",
       "every step, in lock step: exchange.protocol \"dpsgd\" or \"choco\", not \"pairwise-async\""},
      {"[train]\nlars_norm = \"mean-sketch\"\n[exchange]\nkind = \"gossip\"\n[topology]\nkind = \"ring\"",
       "sketches exactly along the graph: topology.kind \"one-peer-exponential\" or \"complete\", not \"ring\""},
  };
  ExpectEachRejectedAtItsLine(cases);
}

TEST(ConfigParseTest, LossyCodecWithoutChocoIsAllowed) {
  Result<Config> config = ParseConfigString(
      "[exchange]\nkind = \"gossip\"\nprotocol = \"dpsgd\"\n[exchange.compression]\ncodec = \"top-k\"\n", "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  EXPECT_EQ(config->exchange.compression.codec, gossip::CodecKind::kTopK);
}

TEST(ConfigParseTest, CrossFieldErrorPointsAtTheKeyThatWasSet) {
  // dead_timeout_s keeps its default (2.5); the error points at suspect_timeout_s's line.
  Result<Config> config = ParseConfigString("[cluster]\nmin_nodes = 2\nsuspect_timeout_s = 10\n", "x.toml");
  EXPECT_EQ(ErrorOf(config),
            "x.toml:3:1: cluster.dead_timeout_s: expected a number >= cluster.suspect_timeout_s (10.0), got 2.5");
}

TEST(ConfigParseTest, AllErrorsAreReportedOnePerLine) {
  Result<Config> config =
      ParseConfigString("[train]\nbatch_size = 0\nepoch = 3\n[fabric]\nprovider = \"x\"\n", "x.toml");
  const std::string message = ErrorOf(config);
  EXPECT_THAT(message, HasSubstr("x.toml:3:1: train.epoch: unknown key; did you mean train.epochs?"));
  EXPECT_THAT(message, HasSubstr("x.toml:2:1: train.batch_size: expected an integer >= 1, got 0"));
  EXPECT_THAT(message, HasSubstr("x.toml:5:1: fabric.provider: expected one of"));
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 2);
}

TEST(ConfigParseTest, TomlSyntaxErrorNamesFileLineAndColumn) {
  Result<Config> config = ParseConfigString("[train]\nepochs = 3\nbatch_size = = 4\n", "configs/bad.toml");
  ASSERT_FALSE(config);
  EXPECT_THAT(config.error().message(), HasSubstr("configs/bad.toml:3:"));
  EXPECT_THAT(config.error().message(), HasSubstr("invalid TOML"));
  EXPECT_THAT(config.error().message(), HasSubstr("\n  batch_size = = 4\n               ^"));

  config = ParseConfigString("[train]\nepochs = 3\nepochs = 4\n", "dup.toml");
  ASSERT_FALSE(config);
  EXPECT_THAT(config.error().message(), HasSubstr("dup.toml:3:"));
  EXPECT_THAT(config.error().message(), HasSubstr("epochs"));
}

TEST(ConfigParseTest, MissingFileIsNotFoundNamingThePath) {
  Result<Config> config = ParseConfigFile("/nonexistent/chorus.toml");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code(), StatusCode::kNotFound);
  EXPECT_THAT(config.error().message(), HasSubstr("/nonexistent/chorus.toml"));
}

TEST(ConfigParseTest, ParseConfigFileReportsThePathInErrors) {
  const std::string path = ::testing::TempDir() + "/chorus_config_test_bad.toml";
  {
    std::ofstream out(path);
    out << "[train]\n\nthreads = 1000\n";
  }
  Result<Config> config = ParseConfigFile(path);
  EXPECT_EQ(ErrorOf(config), path + ":3:1: train.threads: expected an integer in [1, 256], got 1000");
  std::filesystem::remove(path);
}

TEST(ConfigOverrideTest, SetsValuesOfEveryType) {
  Config config = DefaultConfig();
  ASSERT_TRUE(ApplyOverride(&config, "train.batch_size=128", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, " train.base_lr = 0.25 ", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "run.name=trial-3", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "run.node_name=\"quoted\"", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "run.output_dir=123", "--set").ok());  // a bare word is a string
  ASSERT_TRUE(ApplyOverride(&config, "cluster.bootstrap=a:1, b:2", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "train.seed=7", "--set").ok());
  EXPECT_EQ(config.train.batch_size, 128);
  EXPECT_EQ(config.train.base_lr, 0.25);
  EXPECT_EQ(config.run.name, "trial-3");
  EXPECT_EQ(config.run.node_name, "quoted");
  EXPECT_EQ(config.run.output_dir, "123");
  EXPECT_EQ(config.cluster.bootstrap, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(config.train.seed, 7u);
  ASSERT_TRUE(ApplyOverride(&config, "cluster.bootstrap=[\"c:3\"]", "--set").ok());
  EXPECT_EQ(config.cluster.bootstrap, (std::vector<std::string>{"c:3"}));
  EXPECT_TRUE(ValidateConfig(config).ok()) << ErrorOf(ValidateConfig(config));
}

TEST(ConfigOverrideTest, SetsNestedBooleanAndIntegerListKeys) {
  Config config = DefaultConfig();
  ASSERT_TRUE(ApplyOverride(&config, "exchange.kind=allreduce", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "exchange.fp16_wire=true", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "exchange.compression.codec=sign", "--set a").ok());
  ASSERT_TRUE(ApplyOverride(&config, "exchange.compression.ratio=0.5", "--set").ok());
  ASSERT_TRUE(ApplyOverride(&config, "topology.dims=[2,4]", "--set b").ok());
  EXPECT_EQ(config.exchange.kind, ExchangeKind::kAllreduce);
  EXPECT_TRUE(config.exchange.fp16_wire);
  EXPECT_EQ(config.exchange.compression.codec, gossip::CodecKind::kSign);
  EXPECT_EQ(config.exchange.compression.ratio, 0.5);
  EXPECT_EQ(config.topology.dims, (std::vector<int>{2, 4}));
  EXPECT_EQ(config.origins.at("exchange.compression.codec"), "--set a");
  EXPECT_EQ(config.origins.at("topology.dims[1]"), "--set b");
  ASSERT_TRUE(ApplyOverride(&config, "topology.dims=3, 5, 7", "--set").ok());  // bare list
  EXPECT_EQ(config.topology.dims, (std::vector<int>{3, 5, 7}));
  ASSERT_TRUE(ApplyOverride(&config, "topology.dims=[]", "--set").ok());
  EXPECT_TRUE(config.topology.dims.empty());
  EXPECT_TRUE(ValidateConfig(config).ok()) << ErrorOf(ValidateConfig(config));

  ASSERT_TRUE(ApplyOverride(&config, "topology.dims=[2,0]", "--set topology.dims=[2,0]").ok());
  EXPECT_EQ(ErrorOf(ValidateConfig(config)),
            "--set topology.dims=[2,0]: topology.dims[1]: expected an integer >= 1, got 0");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "exchange.compression.codc=sign", "--set")),
            "--set: exchange.compression.codc: unknown key; did you mean exchange.compression.codec?");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "exchange.fp16_wire=yes", "--set")),
            "--set: exchange.fp16_wire: expected a boolean (true or false), got \"yes\"");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "topology.dims=[2,\"x\"]", "--set")),
            "--set: topology.dims[1]: expected a 32-bit integer, got a string (\"x\")");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "exchange.compression=sign", "--set")),
            "--set: exchange.compression: a table, not a key; set one of its keys, such as "
            "exchange.compression.codec");
}

TEST(ConfigOverrideTest, OverridesAFileValueAndIsValidatedWithItsOrigin) {
  Result<Config> config = ParseConfigString("[train]\nbatch_size = 32\n", "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  ASSERT_TRUE(ApplyOverride(&*config, "train.batch_size=0", "--set train.batch_size=0").ok());
  EXPECT_EQ(ErrorOf(ValidateConfig(*config)),
            "--set train.batch_size=0: train.batch_size: expected an integer >= 1, got 0");
  ASSERT_TRUE(ApplyOverride(&*config, "train.batch_size=128", "--set train.batch_size=128").ok());
  EXPECT_TRUE(ValidateConfig(*config).ok());
  EXPECT_EQ(config->train.batch_size, 128);
  EXPECT_EQ(config->origins.at("train.batch_size"), "--set train.batch_size=128");
}

TEST(ConfigOverrideTest, RejectsBadAssignments) {
  Config config = DefaultConfig();
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "train.batchsize=3", "--set")),
            "--set: train.batchsize: unknown key; did you mean train.batch_size?");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "train.epochs=abc", "--set")),
            "--set: train.epochs: expected an integer, got \"abc\"");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "train.epochs=\"3\"", "--set")),
            "--set: train.epochs: expected an integer, got a string (\"3\")");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "train.epochs", "--set")),
            "--set: expected section.key=value, got \"train.epochs\"");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "train.epochs=", "--set")),
            "--set: train.epochs: missing value after '='");
  EXPECT_EQ(ErrorOf(ApplyOverride(&config, "epochs=3", "--set")), "--set: epochs: unknown key");
  // A value cannot smuggle in a second key.
  EXPECT_THAT(ErrorOf(ApplyOverride(&config, "train.epochs=3\nbatch_size = 1", "--set")),
              HasSubstr("expected a single TOML value"));
  EXPECT_TRUE(config.SameSettings(DefaultConfig()));
}

TEST(DescribeConfigTest, PrintsEveryKeyAndReparsesToTheSameSettings) {
  Config config = DefaultConfig();
  config.run.name = "round-trip";
  config.run.node_name = "node7";
  config.cluster.token = "quote \" backslash \\ tab \t newline \n end";
  config.cluster.bootstrap = {"a.example:7100", "[::1]:7101"};
  config.cluster.advertise = "10.1.2.3:7100";
  config.train.base_lr = 0.1 + 0.2;  // not a short decimal: must still round-trip exactly
  config.train.weight_decay = 1e-7;
  config.train.seed = 9007199254740993ull;  // above 2^53: an integer, not a double
  config.loss_scale.initial = 1e20;
  config.train.epochs = 7;
  config.exchange.kind = ExchangeKind::kGossip;
  config.exchange.protocol = GossipProtocolKind::kChoco;
  config.exchange.fp16_wire = true;
  config.exchange.gamma = 0.1 + 0.2;
  config.exchange.compression.codec = gossip::CodecKind::kTopK;
  config.exchange.compression.ratio = 0.003;
  config.exchange.compression.chunk = 17;
  config.topology.kind = topologies::GraphKind::kTorus;
  config.topology.dims = {2, 3, 4};
  config.topology.seed = 42;
  ASSERT_TRUE(ValidateConfig(config).ok()) << ErrorOf(ValidateConfig(config));

  const std::string text = DescribeConfig(config);
  for (const std::string& path : ConfigKeyPaths()) {
    const size_t dot = path.rfind('.');  // exchange.compression.codec: table [exchange.compression]
    std::string section = "[";
    section.append(path, 0, dot).append("]");
    std::string key = "\n";
    key.append(path, dot + 1).append(" = ");
    EXPECT_THAT(text, HasSubstr(section)) << path;
    EXPECT_THAT(text, HasSubstr(key)) << path;
  }
  Result<Config> again = ParseConfigString(text, "described");
  ASSERT_TRUE(again) << ErrorOf(again) << "\n" << text;
  EXPECT_TRUE(again->SameSettings(config)) << text;
  EXPECT_EQ(again->cluster.token, config.cluster.token);
  EXPECT_EQ(again->train.base_lr, config.train.base_lr);
  EXPECT_EQ(again->train.seed, config.train.seed);
  EXPECT_EQ(again->exchange, config.exchange);
  EXPECT_EQ(again->topology, config.topology);
  EXPECT_THAT(text, HasSubstr("\n[exchange.compression]\n"));
  EXPECT_THAT(text, HasSubstr("\ndims = [2, 3, 4]"));
  EXPECT_THAT(text, HasSubstr("\nfp16_wire = true"));
}

TEST(DescribeConfigTest, SameSettingsSeesExchangeAndTopology) {
  Config changed = DefaultConfig();
  changed.exchange.compression.chunk = 8;
  EXPECT_FALSE(changed.SameSettings(DefaultConfig()));
  changed = DefaultConfig();
  changed.topology.dims = {4};
  EXPECT_FALSE(changed.SameSettings(DefaultConfig()));
}

TEST(DescribeConfigTest, KeyPathsCoverEveryTable) {
  const std::vector<std::string> paths = ConfigKeyPaths();
  for (const char* table : {"run.", "train.", "loss_scale.", "data.", "cluster.", "fabric.", "exchange.",
                            "exchange.compression.", "topology."}) {
    EXPECT_TRUE(std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return p.starts_with(table); }))
        << table;
  }
}

class FakeEnvironment {
 public:
  FakeEnvironment(std::initializer_list<std::pair<const std::string, std::string>> vars) : vars_(vars) {}
  EnvLookup Lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

TEST(EnvironmentHintsTest, SlurmSetsRankAndMinNodes) {
  FakeEnvironment env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"OMPI_COMM_WORLD_RANK", "5"}});
  Config config = DefaultConfig();
  ASSERT_TRUE(ApplyEnvironmentHints(&config, env.Lookup()).ok());
  EXPECT_EQ(config.cluster.rank_hint, 3);
  EXPECT_EQ(config.cluster.min_nodes, 8);
  EXPECT_EQ(config.origins.at("cluster.rank_hint"), "env SLURM_PROCID");
  EXPECT_EQ(config.origins.at("cluster.min_nodes"), "env SLURM_NTASKS");
}

TEST(EnvironmentHintsTest, OpenMpiIsUsedWithoutSlurm) {
  FakeEnvironment env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
  Config config = DefaultConfig();
  ASSERT_TRUE(ApplyEnvironmentHints(&config, env.Lookup()).ok());
  EXPECT_EQ(config.cluster.rank_hint, 1);
  EXPECT_EQ(config.cluster.min_nodes, 3);
}

TEST(EnvironmentHintsTest, ValuesFromTheFileWin) {
  FakeEnvironment env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}});
  Result<Config> config = ParseConfigString("[cluster]\nmin_nodes = 1\nrank_hint = 0\n", "x.toml");
  ASSERT_TRUE(config) << ErrorOf(config);
  ASSERT_TRUE(ApplyEnvironmentHints(&*config, env.Lookup()).ok());
  EXPECT_EQ(config->cluster.rank_hint, 0);
  EXPECT_EQ(config->cluster.min_nodes, 1);
}

TEST(EnvironmentHintsTest, NoVariablesChangeNothing) {
  FakeEnvironment env({{"SLURM_PROCID", ""}});
  Config config = DefaultConfig();
  ASSERT_TRUE(ApplyEnvironmentHints(&config, env.Lookup()).ok());
  EXPECT_TRUE(config.SameSettings(DefaultConfig()));
}

TEST(EnvironmentHintsTest, MalformedVariableIsAnErrorNamingIt) {
  Config config = DefaultConfig();
  FakeEnvironment bad_rank({{"SLURM_PROCID", "x1"}});
  EXPECT_EQ(ErrorOf(ApplyEnvironmentHints(&config, bad_rank.Lookup())),
            "environment variable SLURM_PROCID=x1: expected an integer >= 0");
  FakeEnvironment bad_size({{"OMPI_COMM_WORLD_SIZE", "0"}});
  EXPECT_EQ(ErrorOf(ApplyEnvironmentHints(&config, bad_size.Lookup())),
            "environment variable OMPI_COMM_WORLD_SIZE=0: expected an integer >= 1");
}

TEST(TomlQuoteTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(TomlQuote("plain"), "\"plain\"");
  EXPECT_EQ(TomlQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(TomlQuote(std::string("\n\t\x01", 3)), "\"\\n\\t\\u0001\"");
  EXPECT_EQ(TomlQuote("tcp;ofi_rxm"), "\"tcp;ofi_rxm\"");
}

}  // namespace
}  // namespace chorus::node

namespace chorus::node {
namespace {

TEST(ChocoGammaTest, ZeroPicksTheCodecDefaultOtherwiseTheSetting) {
  ExchangeConfig e;
  ASSERT_EQ(e.gamma, 0.0);
  e.compression.codec = gossip::CodecKind::kSign;
  EXPECT_EQ(ChocoGamma(e), 0.6);
  e.compression.codec = gossip::CodecKind::kTopK;
  EXPECT_EQ(ChocoGamma(e), 0.2);
  e.compression.codec = gossip::CodecKind::kRandomK;
  EXPECT_EQ(ChocoGamma(e), 0.2);
  e.gamma = 0.35;
  EXPECT_EQ(ChocoGamma(e), 0.35);
}

// config check refuses what the node would refuse at start: a protocol that
// exchanges symmetrically on a directed graph (push-sum takes any).
TEST(ConfigParseTest, ADirectedGraphForAProtocolThatNeedsAnUndirectedOneIsRefused) {
  const std::string tail = "\"\n[topology]\nkind = \"one-peer-exponential\"\n[cluster]\nmin_nodes = 4\n";
  Result<Config> choco = ParseConfigString("[exchange]\nkind = \"gossip\"\nprotocol = \"choco" + tail, "x.toml");
  ASSERT_FALSE(choco);
  EXPECT_THAT(ErrorOf(choco), HasSubstr("x.toml:5:1: topology.kind: topology one-peer-exponential is directed; "
                                        "protocol choco needs an undirected graph (use push-sum)"));
  Result<Config> push_sum =
      ParseConfigString("[exchange]\nkind = \"gossip\"\nprotocol = \"push-sum" + tail, "x.toml");
  EXPECT_TRUE(push_sum) << ErrorOf(push_sum);
}

}  // namespace
}  // namespace chorus::node
