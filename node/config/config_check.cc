// ValidateConfig: range and cross-field checks, every error naming where the
// key was set (file:line:col, --set, environment) and what was expected.
// Values written as names were checked when they were parsed (config_fields.h).
#include "node/config/config_check.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "node/config/config_describe.h"  // TomlQuote
#include "node/config/config_fields.h"
#include "node/config/host_port.h"
#include "trainer/dataset.h"

namespace chorus::node {
namespace {

class Checker {
 public:
  explicit Checker(const Config& config) : config_(config) {}

  // `key` is the key at fault; `related` another key the check involves, whose
  // origin is used when `key` itself was left at its default.
  void Fail(const std::string& key, const std::string& what, const std::string& related = "") {
    const bool set_here = config_.origins.contains(key) || config_.origins.contains(key.substr(0, key.find('[')));
    errors_.push_back(SettingOrigin(config_, set_here || related.empty() ? key : related) + ": " + key + ": " + what);
  }

  void IntAtLeast(const std::string& key, int64_t v, int64_t min) {
    if (v < min) Fail(key, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
  }
  void IntInRange(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      Fail(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + std::to_string(v));
    }
  }
  void NumberAbove(const std::string& key, double v, double min) {
    if (!std::isfinite(v) || !(v > min)) Fail(key, "expected a number > " + FormatDouble(min) + ", got " + FormatDouble(v));
  }
  void NumberAtLeast(const std::string& key, double v, double min) {
    if (!std::isfinite(v) || !(v >= min)) {
      Fail(key, "expected a number >= " + FormatDouble(min) + ", got " + FormatDouble(v));
    }
  }
  // lo <= v < hi, or lo < v < hi when `open_low`.
  void NumberBelow(const std::string& key, double v, double lo, double hi, bool open_low) {
    bool ok = std::isfinite(v) && (open_low ? v > lo : v >= lo) && v < hi;
    if (!ok) {
      Fail(key, std::string("expected a number in ") + (open_low ? "(" : "[") + FormatDouble(lo) + ", " +
                    FormatDouble(hi) + "), got " + FormatDouble(v));
    }
  }
  // 0 < v <= 1.
  void NumberInHalfOpenUnit(const std::string& key, double v) {
    if (!std::isfinite(v) || !(v > 0.0 && v <= 1.0)) Fail(key, "expected a number in (0, 1], got " + FormatDouble(v));
  }
  // A single folder name: used as runs/<name>/<node>.
  void FolderName(const std::string& key, const std::string& v, bool allow_empty) {
    if (v.empty()) {
      if (!allow_empty) Fail(key, "expected a non-empty name, got \"\"");
      return;
    }
    bool ok = v != "." && v != ".." &&
              std::all_of(v.begin(), v.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
              });
    if (!ok) Fail(key, "expected a name of letters, digits, '-', '_' and '.', got " + TomlQuote(v));
  }
  void NonEmpty(const std::string& key, const std::string& v) {
    if (v.empty()) Fail(key, "expected a non-empty string, got \"\"");
  }
  void Address(const std::string& key, const std::string& v, bool allow_port_zero) {
    Result<HostPort> parsed = ParseHostPort(v);
    if (!parsed) {
      Fail(key, "expected host:port, got " + TomlQuote(v) + " (" + parsed.error().message() + ")");
    } else if (parsed->port == 0 && !allow_port_zero) {
      Fail(key, "expected host:port with a port in [1, 65535], got " + TomlQuote(v));
    }
  }

  // A node trains steps of whole batches from its shard: the training set
  // (data.train_limit of it) split between the members. With fewer images
  // than a batch it would train no step at all. The cluster's size is known
  // only once it forms (the node checks again then: RunNode); here the
  // shard of cluster.min_nodes members, the smallest cluster that trains.
  void BatchFitsShard(const Config& config) {
    const int images = config.data.train_limit > 0
                           ? std::min(config.data.train_limit, trainer::kFashionMnistTrainCount)
                           : trainer::kFashionMnistTrainCount;
    const int members = std::max(1, config.cluster.min_nodes);
    const int64_t shard = images / members;
    if (config.train.batch_size >= 1 && config.train.batch_size > shard) {
      Fail("train.batch_size",
           "expected at most " + std::to_string(shard) + " (the shard of one node: " + std::to_string(images) +
               " training images over " + std::to_string(members) + " node" + (members == 1 ? "" : "s") +
               "), got " + std::to_string(config.train.batch_size),
           config.origins.contains("data.train_limit") ? "data.train_limit" : "cluster.min_nodes");
    }
  }

  Status Finish() const {
    if (errors_.empty()) return Status::Ok();
    return InvalidArgument(JoinLines(errors_));
  }

 private:
  const Config& config_;
  std::vector<std::string> errors_;
};

// One table's keys each (all errors are collected, one line each).
void CheckRun(const Config& config, Checker& check) {
  const RunConfig& run = config.run;
  check.FolderName("run.name", run.name, /*allow_empty=*/false);
  check.FolderName("run.node_name", run.node_name, /*allow_empty=*/true);
  check.NonEmpty("run.output_dir", run.output_dir);
}

void CheckTrain(const Config& config, Checker& check) {
  const TrainConfig& train = config.train;
  if (train.device.on_gpu() && train.precision != trainer::Precision::kFp16) {
    check.Fail("train.device", "GPU nodes train in fp16 (FP32 master weights); precision \"" +
                                   std::string(trainer::PrecisionName(train.precision)) + "\" is for CPU nodes",
               "train.precision");
  }
  check.IntAtLeast("train.epochs", train.epochs, 1);
  check.IntAtLeast("train.batch_size", train.batch_size, 1);
  check.BatchFitsShard(config);
  check.NumberAbove("train.base_lr", train.base_lr, 0.0);
  check.NumberBelow("train.momentum", train.momentum, 0.0, 1.0, /*open_low=*/false);
  check.NumberAtLeast("train.weight_decay", train.weight_decay, 0.0);
  check.NumberAbove("train.lars_eta", train.lars_eta, 0.0);
  check.IntAtLeast("train.lars_norm_nodes", train.lars_norm_nodes, 0);
  const GossipProtocolKind protocol = config.exchange.protocol;
  const bool sketches = train.lars_norm == LarsNorm::kPeer || train.lars_norm == LarsNorm::kMeanSketch;
  const std::string norm_name(NameOf(kLarsNormNames, train.lars_norm));
  if (sketches && config.exchange.kind == ExchangeKind::kGossip && protocol != GossipProtocolKind::kDpsgd &&
      protocol != GossipProtocolKind::kChoco) {
    check.Fail("train.lars_norm",
               "\"" + norm_name + "\" exchanges a sketch of the gradient with the graph's neighbours at every "
               "step, in lock step: exchange.protocol \"dpsgd\" or \"choco\", not \"" +
                   std::string(SettingName(protocol)) + "\"",
               "exchange.protocol");
  }
  const topologies::GraphKind graph = config.topology.kind;
  if (train.lars_norm == LarsNorm::kMeanSketch && config.exchange.kind == ExchangeKind::kGossip &&
      graph != topologies::GraphKind::kOnePeerExponential && graph != topologies::GraphKind::kComplete) {
    check.Fail("train.lars_norm",
               "\"mean-sketch\" averages the members' gradient sketches exactly along the graph: topology.kind "
               "\"one-peer-exponential\" or \"complete\", not \"" +
                   std::string(topologies::GraphKindName(graph)) + "\"",
               "topology.kind");
  }
  check.NumberAtLeast("train.warmup_epochs", train.warmup_epochs, 0.0);
  check.NumberAtLeast("train.lr_decay_power", train.lr_decay_power, 0.0);
  check.IntInRange("train.threads", train.threads, 1, 256);
  // TOML integers are signed 64-bit: a larger seed could not be written back.
  if (train.seed > static_cast<uint64_t>(INT64_MAX)) {
    check.Fail("train.seed", "expected an integer in [0, " + std::to_string(INT64_MAX) + "], got " +
                                 std::to_string(train.seed));
  }
  check.IntAtLeast("train.eval_every_epochs", train.eval_every_epochs, 0);
  check.IntAtLeast("train.eval_every_steps", train.eval_every_steps, 0);
  check.IntAtLeast("train.eval_samples", train.eval_samples, 0);
  check.IntAtLeast("train.log_every_steps", train.log_every_steps, 1);
  check.IntAtLeast("train.checkpoint_every_epochs", train.checkpoint_every_epochs, 0);
  check.NumberAtLeast("train.slowdown", train.slowdown, 0.0);
  check.IntAtLeast("train.balance_every_steps", train.balance_every_steps, 1);
}

void CheckLossScale(const Config& config, Checker& check) {
  const LossScaleConfig& scale = config.loss_scale;
  check.NumberAbove("loss_scale.initial", scale.initial, 0.0);
  check.IntAtLeast("loss_scale.growth_interval", scale.growth_interval, 1);
  check.NumberAbove("loss_scale.growth_factor", scale.growth_factor, 1.0);
  check.NumberBelow("loss_scale.backoff_factor", scale.backoff_factor, 0.0, 1.0, /*open_low=*/true);
  check.NumberAbove("loss_scale.min_scale", scale.min_scale, 0.0);
  if (scale.min_scale > 0 && scale.initial > 0 && scale.initial < scale.min_scale) {
    check.Fail("loss_scale.initial",
               "expected a number >= loss_scale.min_scale (" + FormatDouble(scale.min_scale) + "), got " +
                   FormatDouble(scale.initial),
               "loss_scale.min_scale");
  }
}

void CheckData(const Config& config, Checker& check) {
  check.NonEmpty("data.dir", config.data.dir);
  check.IntAtLeast("data.train_limit", config.data.train_limit, 0);
  check.IntAtLeast("data.test_limit", config.data.test_limit, 0);
  check.IntInRange("data.augment_shift", config.data.augment_shift, 0, 8);
}

// An Ed25519 public key as the credential files write it: 64 hex digits.
bool IsPublicKeyHex(const std::string& key) {
  return key.size() == 64 &&
         std::all_of(key.begin(), key.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// Per-node credentials: a well-formed issuer key, and a credential file
// exactly when there is an issuer (the control plane reads the file).
void CheckCredentials(const ClusterConfig& cluster, Checker& check) {
  if (!cluster.issuer.empty() && !IsPublicKeyHex(cluster.issuer)) {
    check.Fail("cluster.issuer",
               "expected the issuer's public key, 64 hex digits (`chorus credential issuer` prints it), got " +
                   TomlQuote(cluster.issuer));
  }
  if (!cluster.issuer.empty() && cluster.credential.empty()) {
    check.Fail("cluster.credential", "expected this node's credential file: cluster.issuer is set",
               "cluster.issuer");
  }
  if (cluster.issuer.empty() && !cluster.credential.empty()) {
    check.Fail("cluster.credential", "a credential without cluster.issuer is never shown", "cluster.issuer");
  }
  for (size_t i = 0; i < cluster.revoked.size(); ++i) {
    const std::string& key = cluster.revoked[i];
    if (!IsPublicKeyHex(key)) {
      check.Fail("cluster.revoked[" + std::to_string(i) + "]",
                 "expected a credential's public key, 64 hex digits (`chorus credential show` prints it), got " +
                     TomlQuote(key));
    }
  }
  if (cluster.issuer.empty() && !cluster.revoked.empty()) {
    check.Fail("cluster.revoked", "revoked credentials without cluster.issuer: nobody shows one", "cluster.issuer");
  }
}

void CheckCluster(const Config& config, Checker& check) {
  const ClusterConfig& cluster = config.cluster;
  check.Address("cluster.listen", cluster.listen, /*allow_port_zero=*/true);
  if (!cluster.advertise.empty()) check.Address("cluster.advertise", cluster.advertise, false);
  for (size_t i = 0; i < cluster.bootstrap.size(); ++i) {
    check.Address("cluster.bootstrap[" + std::to_string(i) + "]", cluster.bootstrap[i], false);
  }
  check.IntAtLeast("cluster.min_nodes", cluster.min_nodes, 1);
  check.IntAtLeast("cluster.expel_quorum", cluster.expel_quorum, 1);
  check.NumberAbove("cluster.join_timeout_s", cluster.join_timeout_s, 0.0);
  check.NumberAbove("cluster.heartbeat_interval_s", cluster.heartbeat_interval_s, 0.0);
  check.NumberAbove("cluster.suspect_timeout_s", cluster.suspect_timeout_s, 0.0);
  check.NumberAbove("cluster.dead_timeout_s", cluster.dead_timeout_s, 0.0);
  if (cluster.heartbeat_interval_s > 0 && cluster.suspect_timeout_s > 0 &&
      !(cluster.suspect_timeout_s > cluster.heartbeat_interval_s)) {
    check.Fail("cluster.suspect_timeout_s",
               "expected a number > cluster.heartbeat_interval_s (" +
                   FormatDouble(cluster.heartbeat_interval_s) + "), got " +
                   FormatDouble(cluster.suspect_timeout_s),
               "cluster.heartbeat_interval_s");
  }
  if (cluster.suspect_timeout_s > 0 && cluster.dead_timeout_s > 0 &&
      cluster.dead_timeout_s < cluster.suspect_timeout_s) {
    check.Fail("cluster.dead_timeout_s",
               "expected a number >= cluster.suspect_timeout_s (" + FormatDouble(cluster.suspect_timeout_s) +
                   "), got " + FormatDouble(cluster.dead_timeout_s),
               "cluster.suspect_timeout_s");
  }
  check.IntAtLeast("cluster.rank_hint", cluster.rank_hint, -1);
  check.IntAtLeast("cluster.admit_every_steps", cluster.admit_every_steps, 0);
  check.NumberAtLeast("cluster.admit_every_s", cluster.admit_every_s, 0.0);
  CheckCredentials(cluster, check);
}

void CheckFabric(const Config& config, Checker& check) {
  check.NumberAbove("fabric.op_timeout_s", config.fabric.op_timeout_s, 0.0);
  check.IntAtLeast("fabric.busy_poll_us", config.fabric.busy_poll_us, 0);
  check.IntAtLeast("fabric.wait_spin_us", config.fabric.wait_spin_us, 0);
  check.IntAtLeast("fabric.progress_max_sleep_us", config.fabric.progress_max_sleep_us, 1);
  check.IntInRange("fabric.rxm_eager_kib", config.fabric.rxm_eager_kib, 0, 16384);
  if (config.exchange.poison_norm_bound != 0) {
    check.NumberAbove("exchange.poison_norm_bound", config.exchange.poison_norm_bound, 1.0);
  }
  check.IntAtLeast("exchange.poison_expel_after", config.exchange.poison_expel_after, 0);
  check.IntAtLeast("exchange.poison_agreement_up_to", config.exchange.poison_agreement_up_to, 0);
  check.NumberAtLeast("exchange.poison_distance_bound", config.exchange.poison_distance_bound, 0.0);
  if (config.fabric.encrypt && !config.fabric.authenticate) {
    check.Fail("fabric.encrypt", "needs fabric.authenticate = true (the MAC is what makes a message trustworthy)");
  }
  const int port = config.fabric.port;
  check.IntInRange("fabric.port", port, 0, 65535);
  if (port != 0 && config.fabric.provider == gossip::FabricProvider::kShm) {
    check.Fail("fabric.port", "expected 0 with fabric.provider = \"shm\" (shm endpoints have no port), got " +
                                  std::to_string(port),
               "fabric.provider");
  }
  Result<HostPort> listen = ParseHostPort(config.cluster.listen);
  if (port != 0 && listen && listen->port == port) {
    check.Fail("fabric.port",
               "expected a port other than cluster.listen's (the control plane listens on " +
                   std::to_string(port) + "), got " + std::to_string(port),
               "cluster.listen");
  }
}

void CheckExchange(const Config& config, Checker& check) {
  // Every [exchange] key is checked whatever the kind, so a bad value of a
  // setting of the kind not chosen today does not wait until the kind is switched.
  const ExchangeConfig& exchange = config.exchange;
  check.IntAtLeast("exchange.bucket_kib", exchange.bucket_kib, 1);
  check.IntAtLeast("exchange.first_bucket_kib", exchange.first_bucket_kib, -1);
  check.IntAtLeast("exchange.state_sources", exchange.state_sources, 1);
  check.IntAtLeast("exchange.period", exchange.period, 1);
  check.IntAtLeast("exchange.max_staleness", exchange.max_staleness, -1);
  if (exchange.gamma != 0.0) check.NumberInHalfOpenUnit("exchange.gamma", exchange.gamma);
  check.NumberAbove("exchange.consensus_bound", exchange.consensus_bound, 0.0);
  check.IntAtLeast("exchange.consensus_max_rounds", exchange.consensus_max_rounds, 1);
  check.IntAtLeast("exchange.consensus_every_steps", exchange.consensus_every_steps, 1);
  check.IntAtLeast("exchange.global_average_every", exchange.global_average_every, 0);
  if (exchange.consensus_control != 0.0) check.NumberAbove("exchange.consensus_control", exchange.consensus_control, 0.0);
  check.IntAtLeast("exchange.consensus_control_every", exchange.consensus_control_every, 1);
  check.IntAtLeast("exchange.consensus_control_max_rounds", exchange.consensus_control_max_rounds, 1);
  // A lossy codec without CHOCO's error feedback is allowed: that is the plain lossy exchange.
  const CompressionConfig& compression = exchange.compression;
  check.NumberInHalfOpenUnit("exchange.compression.ratio", compression.ratio);
  check.IntAtLeast("exchange.compression.chunk", compression.chunk, 1);
  if (compression.value_bits != 32 && compression.value_bits != 16 && compression.value_bits != 8) {
    check.Fail("exchange.compression.value_bits",
               "expected 32, 16 or 8, got " + std::to_string(compression.value_bits));
  }
  const CrossoversConfig& x = exchange.crossovers;
  check.IntAtLeast("exchange.crossovers.small_tree_max_kib", x.small_tree_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.recursive_doubling_max_kib", x.recursive_doubling_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.tree_max_kib", x.tree_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.halving_doubling_min_kib", x.halving_doubling_min_kib, -1);
  check.IntAtLeast("exchange.crossovers.halving_doubling_max_kib", x.halving_doubling_max_kib, -1);
  check.IntAtLeast("exchange.crossovers.large_tree_min_kib", x.large_tree_min_kib, -1);
  check.IntAtLeast("exchange.crossovers.hierarchical_min_kib", x.hierarchical_min_kib, -1);
  const OuterConfig& outer = exchange.outer;
  check.NumberAbove("exchange.outer.lr", outer.lr, 0.0);
  check.NumberBelow("exchange.outer.momentum", outer.momentum, 0.0, 1.0, /*open_low=*/false);
  check.IntAtLeast("exchange.outer.period", outer.period, 1);
  check.IntInRange("exchange.outer.fragments", outer.fragments, 1, std::max(1, outer.period));
  check.IntInRange("exchange.outer.delay", outer.delay, 0,
                   std::max(0, outer.period / std::max(1, outer.fragments) - 1));
  check.NumberBelow("exchange.outer.local_mix", outer.local_mix, 0.0, 1.0, /*open_low=*/false);
}

// Measured sites: a node that asks for one needs the cluster to measure.
void CheckSiteProbe(const Config& config, Checker& check) {
  if (config.cluster.site == "auto" && !config.exchange.site_probe) {
    check.Fail("cluster.site", "\"auto\" is found by measuring the links; exchange.site_probe is false",
               "exchange.site_probe");
  }
  if (config.exchange.site_probe && config.exchange.kind == ExchangeKind::kGossip &&
      config.exchange.protocol == GossipProtocolKind::kPairwiseAsync) {
    check.Fail("exchange.site_probe",
               "the members measure together at each membership change; pairwise-async nodes follow the "
               "changes at their own pace",
               "exchange.protocol");
  }
}

// Two levels: the site's inner exchange (an all-reduce average, or gossip)
// under an outer step over every member.
void CheckTwoLevel(const Config& config, Checker& check) {
  const ExchangeConfig& e = config.exchange;
  if (e.outer.inner == OuterInner::kAlone) return;
  const std::string inner = "\"" + std::string(SettingName(e.outer.inner)) + "\"";
  if (e.outer.optimizer == OuterOptimizer::kNone) {
    check.Fail("exchange.outer.inner", inner + " runs between outer steps; exchange.outer.optimizer is \"none\"",
               "exchange.outer.optimizer");
  } else if (e.kind != ExchangeKind::kAllreduce) {
    check.Fail("exchange.outer.inner",
               inner + " needs an outer all-reduce across sites; exchange.kind is \"" +
                   std::string(SettingName(e.kind)) + "\"",
               "exchange.kind");
  } else if (e.compression.codec != gossip::CodecKind::kNone) {
    check.Fail("exchange.outer.inner", inner + " sends plain parameters across sites; a codec is set",
               "exchange.compression.codec");
  }
}

// A protocol that needs an undirected graph on a kind of graph that is
// directed. The graph is built for cluster.min_nodes (at least 2) members: a
// shape that fits no such cluster (a torus's dims) the node reports at start,
// when the members are known.
void CheckGossipGraph(const Config& config, Checker& check) {
  const bool outer_neighbours = config.exchange.outer.optimizer != OuterOptimizer::kNone &&
                                config.exchange.outer.peers == OuterPeers::kNeighbours;
  if (config.exchange.kind != ExchangeKind::kGossip ||
      !(outer_neighbours || NeedsUndirectedGraph(config.exchange.protocol))) {
    return;
  }
  Result<topologies::Graph> graph =
      topologies::MakeTopology(GossipTopologySpec(config), std::max(2, config.cluster.min_nodes));
  if (graph && !graph->IsUndirected()) {
    check.Fail("topology.kind",
               "topology " + std::string(topologies::GraphKindName(config.topology.kind)) + " is directed; " +
                   (outer_neighbours ? std::string("an outer step with the neighbours")
                                     : "protocol " + std::string(SettingName(config.exchange.protocol))) +
                   " needs an undirected graph" + (outer_neighbours ? "" : " (use push-sum)"),
               outer_neighbours ? "exchange.outer.peers" : "exchange.protocol");
  }
}

// The corrections of a gossip step (gossip_corrections.h) and the lock-step
// additions (an exact average every so often, consensus control) need what
// each assumes: D^2 D-PSGD's doubly stochastic mixing every step, the lock-step
// ones a protocol whose rounds every member runs together, consensus control
// one mixing round per step to add to.
void CheckGossipCorrections(const Config& config, Checker& check) {
  const ExchangeConfig& e = config.exchange;
  const bool any = e.gossip_momentum != GossipMomentum::kLocal || e.correction != GossipCorrection::kNone ||
                   e.global_average_every > 0 || e.consensus_control > 0.0;
  if (!any) return;
  const std::string kind(SettingName(e.kind));
  auto needs = [&](const char* key, const std::string& what, const char* other) { check.Fail(key, what, other); };
  const char* key = e.correction != GossipCorrection::kNone ? "exchange.correction"
                    : e.gossip_momentum != GossipMomentum::kLocal ? "exchange.gossip_momentum"
                    : e.global_average_every > 0 ? "exchange.global_average_every"
                                                 : "exchange.consensus_control";
  if (e.kind != ExchangeKind::kGossip) {
    needs(key, "corrects a gossip step; exchange.kind is \"" + kind + "\"", "exchange.kind");
    return;
  }
  if (e.outer.optimizer != OuterOptimizer::kNone) {
    needs(key, "corrects a gossip step every step; an outer step (exchange.outer.optimizer) is set",
          "exchange.outer.optimizer");
    return;
  }
  if (e.correction == GossipCorrection::kD2) {
    if (e.protocol != GossipProtocolKind::kDpsgd) {
      needs("exchange.correction",
            "d2 needs D-PSGD's symmetric mixing; exchange.protocol is \"" + std::string(SettingName(e.protocol)) + "\"",
            "exchange.protocol");
    }
    if (e.period != 1) needs("exchange.correction", "d2 mixes every step; exchange.period is " + std::to_string(e.period), "exchange.period");
  }
  const bool lockstep_only = e.global_average_every > 0 || e.consensus_control > 0.0;
  if (lockstep_only && e.protocol == GossipProtocolKind::kPairwiseAsync) {
    needs(e.global_average_every > 0 ? "exchange.global_average_every" : "exchange.consensus_control",
          "runs on every member at the same step; pairwise-async nodes step apart", "exchange.protocol");
  }
  if (e.global_average_every > 0 && e.protocol == GossipProtocolKind::kPushSum) {
    needs("exchange.global_average_every",
          "replaces the weights by their mean; push-sum's weights carry mass that an average would drop",
          "exchange.protocol");
  }
  if (e.consensus_control > 0.0 && e.period != 1) {
    needs("exchange.consensus_control",
          "adds mixing rounds to every step; exchange.period is " + std::to_string(e.period), "exchange.period");
  }
}

// Load balancing splits a synchronous step's global batch: only an
// all-reduce has one (gossip nodes each train their own batch, and the
// asynchronous ones run apart anyway). Under an outer optimizer over
// all-reduce (DiLoCo, local SGD) the inner steps still run in lock step
// between syncs, and the split evens their length (the speeds gathered
// where no sync is in flight, BalanceDue).
void CheckBalance(const Config& config, Checker& check) {
  if (config.train.balance != BalanceSetting::kTime) return;
  if (config.exchange.kind != ExchangeKind::kAllreduce) {
    check.Fail("train.balance",
               "balance \"time\" splits an all-reduce step's global batch; exchange.kind is \"" +
                   std::string(SettingName(config.exchange.kind)) + "\"",
               "exchange.kind");
  }
}

void CheckTopology(const Config& config, Checker& check) {
  const TopologyConfig& topology = config.topology;
  for (size_t i = 0; i < topology.dims.size(); ++i) {
    check.IntAtLeast("topology.dims[" + std::to_string(i) + "]", topology.dims[i], 1);
  }
  check.IntAtLeast("topology.degree", topology.degree, 1);
  if (topology.seed > static_cast<uint64_t>(INT64_MAX)) {
    check.Fail("topology.seed", "expected an integer in [0, " + std::to_string(INT64_MAX) + "], got " +
                                    std::to_string(topology.seed));
  }
}

}  // namespace

std::string SettingOrigin(const Config& config, const std::string& key) {
  for (const std::string& k : {key, key.substr(0, key.find('['))}) {
    auto it = config.origins.find(k);
    if (it != config.origins.end()) return it->second;
  }
  return config.source.empty() ? std::string("<config>") : config.source;
}

Status ValidateConfig(const Config& config) {
  Checker check(config);
  CheckRun(config, check);
  CheckTrain(config, check);
  CheckLossScale(config, check);
  CheckData(config, check);
  CheckCluster(config, check);
  CheckFabric(config, check);
  CheckExchange(config, check);
  CheckTopology(config, check);
  CheckGossipGraph(config, check);
  CheckGossipCorrections(config, check);
  CheckTwoLevel(config, check);
  CheckSiteProbe(config, check);
  CheckBalance(config, check);
  return check.Finish();
}

}  // namespace chorus::node
