// node/config/: the typed configuration of one node. TOML is parsed once
// (config_parse.h) into these structs and enums; everything outside this
// folder reads settings as types, never as text.
//
// Every field has a default, so an empty file (or no file) is a valid config:
// the built-in default trains `mlp` on one node. Each enum's spellings are
// listed once, in the EnumName table beside it (here for node settings, in the
// layer that owns the enum otherwise); the parser, `chorus config check`,
// DescribeConfig and the docs all read those tables. This header holds only
// plain structs and tables: parsing, checks and printing are in the other files
// of this folder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/log.h"
#include "gossip/codecs/codec.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/transport/provider.h"
#include "topologies/topology_spec.h"
#include "trainer/choices.h"

namespace chorus::node {

// run.progress: a bar on a terminal (auto, bar), lines, or nothing.
enum class ProgressSetting { kAuto, kBar, kLines, kOff };
inline constexpr EnumName<ProgressSetting> kProgressNames[] = {
    {ProgressSetting::kAuto, "auto"}, {ProgressSetting::kBar, "bar"},
    {ProgressSetting::kLines, "lines"}, {ProgressSetting::kOff, "off"}};

// train.stop: when a run ends. kEpochs: after train.epochs passes over the
// data (every node the same steps); kSamples: when the members together have
// trained train.epochs x the training set's samples, each node as fast as it
// can under an exchange that lets nodes run apart (pairwise gossip), and as
// kEpochs under the others (their nodes step together).
enum class StopSetting { kEpochs, kSamples };
inline constexpr EnumName<StopSetting> kStopNames[] = {{StopSetting::kEpochs, "epochs"},
                                                       {StopSetting::kSamples, "samples"}};

// train.balance: how a synchronous all-reduce step's global batch is split.
// kNone: each node trains its train.batch_size; kTime: the global batch (the
// members' train.batch_size summed) is split by the nodes' measured speed.
enum class BalanceSetting { kNone, kTime };
inline constexpr EnumName<BalanceSetting> kBalanceNames[] = {{BalanceSetting::kNone, "none"},
                                                             {BalanceSetting::kTime, "time"}};

// exchange.kind: how replicas are kept together.
enum class ExchangeKind { kNone, kAllreduce, kGossip };
inline constexpr EnumName<ExchangeKind> kExchangeKindNames[] = {
    {ExchangeKind::kNone, "none"}, {ExchangeKind::kAllreduce, "allreduce"}, {ExchangeKind::kGossip, "gossip"}};

// exchange.protocol: the gossip protocol (gossip/protocols/).
enum class GossipProtocolKind { kDpsgd, kPairwiseAsync, kPushSum, kChoco };
inline constexpr EnumName<GossipProtocolKind> kGossipProtocolNames[] = {
    {GossipProtocolKind::kDpsgd, "dpsgd"},
    {GossipProtocolKind::kPairwiseAsync, "pairwise-async"},
    {GossipProtocolKind::kPushSum, "push-sum"},
    {GossipProtocolKind::kChoco, "choco"}};

// exchange.on_failure: after a member dies, re-form over the survivors or stop.
enum class OnFailure { kContinue, kStop };
inline constexpr EnumName<OnFailure> kOnFailureNames[] = {{OnFailure::kContinue, "continue"},
                                                         {OnFailure::kStop, "stop"}};

// exchange.consensus: how gossip replicas agree at the end: an exact average
// (all-reduce), gossip rounds until the bound, or not at all.
enum class ConsensusSetting { kAllreduce, kRounds, kNone };
inline constexpr EnumName<ConsensusSetting> kConsensusNames[] = {{ConsensusSetting::kAllreduce, "allreduce"},
                                                                {ConsensusSetting::kRounds, "rounds"},
                                                                {ConsensusSetting::kNone, "none"}};

// exchange.gossip_momentum: what a gossip node's momentum remembers: its own
// gradients (local), or the moves its model made, mixing included
// (quasi-global; node/exchange/gossip_corrections.h).
enum class GossipMomentum { kLocal, kQuasiGlobal };
inline constexpr EnumName<GossipMomentum> kGossipMomentumNames[] = {{GossipMomentum::kLocal, "local"},
                                                                   {GossipMomentum::kQuasiGlobal, "quasi-global"}};

// exchange.correction: a correction of D-PSGD's mixing for unlike data (d2:
// Tang et al. 2018; node/exchange/gossip_corrections.h).
enum class GossipCorrection { kNone, kD2 };
inline constexpr EnumName<GossipCorrection> kGossipCorrectionNames[] = {{GossipCorrection::kNone, "none"},
                                                                       {GossipCorrection::kD2, "d2"}};

// train.lars_norm: which gradient norm LARS's trust ratio sees on a CPU node
// that gossips every step, estimated from the node's own (trainer/optimizer.h):
// its own batch's (local; auto is local), the batches of the nodes one gossip
// round averages (mixed: the node and its neighbours on the graph, all of them
// on the complete graph), or the global batch's (global-batch); or the
// global batch's estimated from products with the gossip peers' gradients of
// the same step (peer: D-PSGD and CHOCO, which send a sketch of the gradient
// along the graph's edges every step: node/exchange/peer_gradient_products.h);
// or the members' mean gradient's, from gradient sketches averaged exactly
// along the one-peer exponential or complete graph, a few steps old
// (mean-sketch: node/exchange/mean_sketch.h).
// Elsewhere the node's own: an all-reduce's gradient is the global batch's
// already, and local steps between outer steps average nothing.
enum class LarsNorm { kAuto, kLocal, kMixed, kGlobalBatch, kPeer, kMeanSketch };
inline constexpr EnumName<LarsNorm> kLarsNormNames[] = {{LarsNorm::kAuto, "auto"},
                                                       {LarsNorm::kLocal, "local"},
                                                       {LarsNorm::kMixed, "mixed"},
                                                       {LarsNorm::kGlobalBatch, "global-batch"},
                                                       {LarsNorm::kPeer, "peer"},
                                                       {LarsNorm::kMeanSketch, "mean-sketch"}};

// The name of a node setting's value, as written in TOML.
// exchange.outer.optimizer: the outer step of low-communication training
// (node/exchange/outer_exchange.h). kNone: the exchange runs every step.
enum class OuterOptimizer { kNone, kAverage, kSgd, kNesterov };
inline constexpr EnumName<OuterOptimizer> kOuterOptimizerNames[] = {{OuterOptimizer::kNone, "none"},
                                                                   {OuterOptimizer::kAverage, "average"},
                                                                   {OuterOptimizer::kSgd, "sgd"},
                                                                   {OuterOptimizer::kNesterov, "nesterov"}};

// exchange.outer.peers: with whom a gossip node's outer step averages.
enum class OuterPeers { kNeighbours, kRandom };
inline constexpr EnumName<OuterPeers> kOuterPeersNames[] = {{OuterPeers::kNeighbours, "neighbours"},
                                                           {OuterPeers::kRandom, "random"}};

// exchange.outer.inner: what a node does between outer steps.
enum class OuterInner { kAlone, kSite, kSiteGossip };
inline constexpr EnumName<OuterInner> kOuterInnerNames[] = {
    {OuterInner::kAlone, "alone"}, {OuterInner::kSite, "site"}, {OuterInner::kSiteGossip, "site-gossip"}};

inline std::string_view SettingName(ProgressSetting v) { return NameOf(kProgressNames, v); }
inline std::string_view SettingName(StopSetting v) { return NameOf(kStopNames, v); }
inline std::string_view SettingName(BalanceSetting v) { return NameOf(kBalanceNames, v); }
inline std::string_view SettingName(ExchangeKind v) { return NameOf(kExchangeKindNames, v); }
inline std::string_view SettingName(GossipProtocolKind v) { return NameOf(kGossipProtocolNames, v); }
inline std::string_view SettingName(OnFailure v) { return NameOf(kOnFailureNames, v); }
inline std::string_view SettingName(ConsensusSetting v) { return NameOf(kConsensusNames, v); }
inline std::string_view SettingName(OuterOptimizer v) { return NameOf(kOuterOptimizerNames, v); }
inline std::string_view SettingName(OuterPeers v) { return NameOf(kOuterPeersNames, v); }
inline std::string_view SettingName(OuterInner v) { return NameOf(kOuterInnerNames, v); }

// exchange.algorithm takes every all-reduce algorithm but shared-memory, which
// exchange.shared_memory chooses by itself.
constexpr bool IsConfigurableAlgorithm(gossip::AllreduceAlgorithm a) {
  return a != gossip::AllreduceAlgorithm::kSharedMemory;
}

struct RunConfig {
  std::string name = "default";  // runs/<name>/<node>/...
  std::string node_name;         // default: "node<rank>"
  std::string output_dir = "runs";
  LogLevel log_level = LogLevel::kInfo;
  ProgressSetting progress = ProgressSetting::kAuto;

  bool operator==(const RunConfig&) const = default;
};

struct TrainConfig {
  trainer::ModelKind model = trainer::ModelKind::kMlp;
  trainer::Precision precision = trainer::Precision::kFp16;
  trainer::OptimizerKind optimizer = trainer::OptimizerKind::kLars;
  trainer::Device device;           // the CPU; GPU nodes train in fp16
  bool cuda_graphs = true;          // GPU: replay each training pass as a CUDA graph
  int epochs = 5;
  int batch_size = 64;              // per node
  double base_lr = 2.0;             // lr = base_lr * global_batch / 256 (LARS: see lars_eta)
  double momentum = 0.9;
  double weight_decay = 5e-4;       // not applied to biases and BatchNorm parameters
  double lars_eta = 0.01;           // LARS trust coefficient (lr * eta matters; measured 0.01-0.02 best)
  LarsNorm lars_norm = LarsNorm::kAuto;  // the gradient norm of the trust ratio
  int lars_norm_nodes = 0;          // mixed / global-batch: at most this many nodes' batches; 0: no cap
  double warmup_epochs = 1.0;       // linear warm-up
  double lr_decay_power = 2.0;      // polynomial decay power
  int threads = 2;                  // compute threads
  uint64_t seed = 1;
  int eval_every_epochs = 1;
  int eval_every_steps = 0;         // also evaluate every N steps (0: off); curves for `chorus compare`
  int eval_samples = 0;             // intermediate evaluations use the first N test samples (0: all)
  int log_every_steps = 50;
  int checkpoint_every_epochs = 1;  // 0: only at the end
  double slowdown = 0.0;            // sleep this fraction of each step's compute time
  StopSetting stop = StopSetting::kEpochs;
  BalanceSetting balance = BalanceSetting::kNone;
  int balance_every_steps = 20;     // balance = "time": the split is re-measured this often

  bool operator==(const TrainConfig&) const = default;
};

struct LossScaleConfig {
  double initial = 65536.0;
  int growth_interval = 2000;  // clean steps before the scale grows
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  double min_scale = 1.0;

  bool operator==(const LossScaleConfig&) const = default;
};

struct DataConfig {
  std::string dir = "/usr/share/datasets/fashion-mnist";
  int train_limit = 0;  // 0: all 60000
  int test_limit = 0;   // 0: all 10000
  // Training images only (trainer/augment.h): each mirrored left-right with
  // probability 1/2, and moved by up to augment_shift pixels each way.
  bool augment_flip = false;
  int augment_shift = 0;

  bool operator==(const DataConfig&) const = default;
};

struct ClusterConfig {
  std::string listen = "127.0.0.1:0";  // control-plane host:port (0: any free port)
  std::string advertise;               // address peers use to reach us (default: listen)
  std::vector<std::string> bootstrap;  // "host:port" of any running members
  std::string token;                   // shared cluster secret (never sent)
  // Per-node credentials (node/control/credentials.h): the issuer's public
  // key, hex; set, every member must show a credential of it for its name.
  std::string issuer;
  std::string credential;              // this node's credential file (needed with issuer)
  // Public keys (hex) of credentials the issuer revoked: refused whatever
  // name they show (`chorus credential show` prints a credential's key).
  std::vector<std::string> revoked;
  int min_nodes = 1;                   // epoch 0 is fixed once this many are present
  double join_timeout_s = 60.0;
  // Members admit waiting joiners at admission points: a control-plane
  // barrier of every member between two steps, about every admit_every_s
  // seconds of training and at least admit_every_steps steps apart (the
  // members agree on each next one); admit_every_steps = 0: never.
  int admit_every_steps = 10;
  double admit_every_s = 2.0;
  // Silence decides only frozen and cut-off members (refused dials decide a
  // killed one), so dead_timeout_s is how long such a member stalls the
  // others. docs/clusters-and-failures.md says why 2.5 s is safe on a loaded
  // host.
  double heartbeat_interval_s = 0.25;
  double suspect_timeout_s = 1.0;
  double dead_timeout_s = 2.5;
  // A node the others removed (frozen or cut off past dead_timeout_s) joins
  // again by itself, as a new process under its name, through its bootstrap
  // list and the members it knew (RunNode).
  bool rejoin = true;
  // Distinct members whose own checks must name a member (as sending poison)
  // before the cluster expels it: one member's word, true or not, expels
  // nobody, so up to expel_quorum - 1 lying members cannot expel an honest one.
  int expel_quorum = 2;
  // Only join a formed cluster: never found one, never join one that is
  // still forming, and refuse forming nodes' probes so that they choose their
  // founder among themselves. A node rejoining by itself sets it, so that the
  // nodes of a shattered cluster never found a second one. Ends after
  // join_timeout_s without reaching a formed cluster.
  bool join_only = false;
  std::string host_group;              // hierarchical all-reduce grouping (default: hostname)
  // Where the node is (a lab, a data centre): links inside a site are fast,
  // links between sites slow. Link-aware collectives and the two-level outer
  // exchange group by it. Default: the host group.
  std::string site;
  int rank_hint = -1;                  // from SLURM_PROCID / OMPI_COMM_WORLD_RANK when unset

  bool operator==(const ClusterConfig&) const = default;
};

struct FabricConfig {
  gossip::FabricProvider provider = gossip::FabricProvider::kTcpRxm;
  double op_timeout_s = 30.0;            // deadline of one data-plane wait
  int busy_poll_us = 0;                  // a wait first polls the CQ without yielding this long
  int wait_spin_us = 200;                // a wait polls the CQ itself this long, then sleeps
  int progress_max_sleep_us = 1000;      // longest idle sleep of the progress thread
  int port = 0;                          // tcp;ofi_rxm / net listen port (0: any free port; shm: 0)
  bool authenticate = true;              // a MAC on every data-plane message (not over shm)
  bool encrypt = false;                  // and the payload encrypted
  // tcp;ofi_rxm: messages up to this many KiB go eagerly into the posted
  // receive (gossip::FabricOptions::rxm_eager_limit); 0: rxm's rendezvous
  // above 16 KiB. Every member must use the same (a shared setting).
  int rxm_eager_kib = static_cast<int>(gossip::kDefaultRxmEagerLimit >> 10);

  bool operator==(const FabricConfig&) const = default;
};

struct CompressionConfig {
  gossip::CodecKind codec = gossip::CodecKind::kNone;
  double ratio = 0.01;         // top-k / random-k: fraction of elements kept, (0, 1]
  int chunk = 256;             // int8 / sign: elements per scale
  int value_bits = 32;         // top-k / random-k: bits of each kept value (32, 16 or 8)
  bool operator==(const CompressionConfig&) const = default;
};

// Low-communication training ([exchange.outer]): every `period` inner steps
// (the node's own optimizer) the pseudo-gradient, the outer parameters minus
// the node's, is averaged over the peers and applied to the outer parameters
// by `optimizer` (node/exchange/outer_exchange.h).
struct OuterConfig {
  OuterOptimizer optimizer = OuterOptimizer::kNone;
  double lr = 0.7;
  double momentum = 0.9;
  int period = 50;         // inner steps H between outer steps of one fragment
  int fragments = 1;       // streaming: parameter fragments synced in turn, 1 <= F <= period
  int delay = 0;           // streaming: steps from a fragment's sync to its outer update, < period / fragments
  double local_mix = 0.0;  // share of the node's parameters kept when the outer update lands, [0, 1)
  OuterPeers peers = OuterPeers::kNeighbours;  // gossip only; all-reduce averages over every member
  // Two levels (all-reduce only): kSite averages the parameters with the
  // node's cluster.site after every inner step (an all-reduce inside the
  // site); kSiteGossip mixes them with the site's neighbours on the
  // [topology] graph built over the site (D-PSGD), and averages the site
  // exactly at the steps whose outer sync is due. The outer step then runs
  // across sites, by one representative per site unless
  // site_representatives is false (every node, over the link-aware ring).
  OuterInner inner = OuterInner::kAlone;
  bool site_representatives = true;
  bool operator==(const OuterConfig&) const = default;
};

// Where `algorithm = "auto"` switches algorithm ([exchange.crossovers]): sizes
// in KiB of the whole bucket, -1 keeping the default measured for the provider
// (gossip::CrossoversForProvider; the rules are gossip/collectives/allreduce_auto.h's).
// For a host whose `chorus bench allreduce` table disagrees with the defaults.
struct CrossoversConfig {
  int small_tree_max_kib = -1;          // more ranks than cores on one host: the tree up to here (0: never)
  int recursive_doubling_max_kib = -1;  // up to here: recursive doubling
  int tree_max_kib = -1;                // then up to here the tree (0: never)
  int halving_doubling_min_kib = -1;    // halving-doubling from here...
  int halving_doubling_max_kib = -1;    // ...to here
  int large_tree_min_kib = -1;          // above that, the tree from here on (else the ring)
  int hierarchical_min_kib = -1;        // several hosts, some shared: hierarchical from here
  bool operator==(const CrossoversConfig&) const = default;
};

// How replicas are kept together ([exchange]).
struct ExchangeConfig {
  ExchangeKind kind = ExchangeKind::kNone;
  // allreduce
  gossip::AllreduceAlgorithm algorithm = gossip::AllreduceAlgorithm::kAuto;
  int bucket_kib = 1024;             // tensor-fusion bucket threshold
  int first_bucket_kib = -1;         // the first bucket's threshold; 0: bucket_kib; -1: measured (overlap model)
  int state_sources = 4;             // allreduce: members a joiner's state comes from at once (striped)
  bool fp16_wire = false;            // all-reduce FP16 gradients (pre-divided by N)
  bool shared_memory = true;         // nodes of one host_group sum through a shared segment
  // The ring (ring and hierarchical all-reduce) runs in link-aware order:
  // each cluster.site's members together, each host's inside it, so that it
  // crosses each site boundary twice. False: rank order.
  bool link_aware = true;
  // At formation and at every membership change the members measure the
  // links between them (node/cluster/site_probe.h): a node with
  // cluster.site = "auto" takes its measured site, and a named site the
  // measurements contradict is reported.
  bool site_probe = false;
  OnFailure on_failure = OnFailure::kContinue;
  // A check of every member's contribution (node/exchange/poison_check.h).
  bool poison_check = true;
  double poison_norm_bound = 100.0;  // times the median contribution norm; 0: no norm check
  int poison_expel_after = 3;        // steps in a row a member is named before it is expelled; 0: never
  bool poison_audit_always = false;  // every step audited (poison_audit.h), not only after a misreport
  int poison_agreement_up_to = 32;   // figures gathered in agreement (Collective::AgreedAllgather) up to n members
  double poison_distance_bound = 10.0;  // gossip: a neighbour's parameters farther than this x our norm; 0: off
  // gossip
  GossipProtocolKind protocol = GossipProtocolKind::kDpsgd;
  int period = 1;                    // local SGD: H local steps between mixing rounds
  int max_staleness = -1;            // pairwise-async: steps ahead of the slowest neighbour; -1: unbounded
  double gamma = 0.0;                // CHOCO consensus step size; 0: by codec (ChocoGamma, exchange/)
  GossipMomentum gossip_momentum = GossipMomentum::kLocal;
  GossipCorrection correction = GossipCorrection::kNone;
  int global_average_every = 0;      // Gossip-PGA: an exact average every this many steps; 0: never
  double consensus_control = 0.0;    // keep the exact relative consensus distance under this; 0: off
  int consensus_control_every = 25;  // steps between its measurements
  int consensus_control_max_rounds = 8;  // mixing rounds per step at most
  // end of training
  ConsensusSetting consensus = ConsensusSetting::kAllreduce;
  double consensus_bound = 1e-6;     // relative consensus distance to reach
  int consensus_max_rounds = 200;
  int consensus_every_steps = 50;    // cheap distance estimate in the metrics
  CompressionConfig compression;     // [exchange.compression]
  CrossoversConfig crossovers;       // [exchange.crossovers]
  OuterConfig outer;                 // [exchange.outer]
  bool operator==(const ExchangeConfig&) const = default;
};

// Gossip graph ([topology]).
struct TopologyConfig {
  topologies::GraphKind kind = topologies::GraphKind::kRing;
  std::vector<int> dims;      // torus
  int degree = 4;             // random-regular
  uint64_t seed = 1;          // random-regular
  bool operator==(const TopologyConfig&) const = default;
};

struct Config {
  std::string source;  // file the config came from ("<built-in default>" when none)
  RunConfig run;
  TrainConfig train;
  LossScaleConfig loss_scale;
  DataConfig data;
  ClusterConfig cluster;
  FabricConfig fabric;
  ExchangeConfig exchange;
  TopologyConfig topology;
  // Where each explicitly set key came from: key path ("train.epochs") ->
  // "file:line:col", "--set train.epochs=3", "--epochs" or "env SLURM_PROCID".
  // Keys never set are absent. Validation errors name this origin.
  std::map<std::string, std::string> origins;

  // Compares the settings only (not `source` or `origins`).
  bool SameSettings(const Config& other) const {
    return run == other.run && train == other.train && loss_scale == other.loss_scale &&
           data == other.data && cluster == other.cluster && fabric == other.fabric &&
           exchange == other.exchange && topology == other.topology;
  }
};

// Pairwise and CHOCO exchange symmetrically with each neighbour: they need an
// undirected graph (D-PSGD also runs on regular directed ones; push-sum on any).
constexpr bool NeedsUndirectedGraph(GossipProtocolKind protocol) {
  return protocol == GossipProtocolKind::kPairwiseAsync || protocol == GossipProtocolKind::kChoco;
}

// The graph [topology] names for the gossip protocol: every protocol but
// push-sum mixes symmetrically on "ring", so for them it is the undirected ring.
inline topologies::TopologySpec GossipTopologySpec(const Config& config) {
  topologies::TopologySpec spec;
  spec.kind = config.topology.kind;
  if (config.exchange.protocol != GossipProtocolKind::kPushSum && spec.kind == topologies::GraphKind::kRing) {
    spec.kind = topologies::GraphKind::kBidirectionalRing;
  }
  spec.dims = config.topology.dims;
  spec.degree = config.topology.degree;
  spec.seed = config.topology.seed;
  return spec;
}

}  // namespace chorus::node
