// The config key table and the text helpers of node/config/ (see config_fields.h).
#include "node/config/config_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>
#include <utility>

#include "node/config/config_describe.h"  // TomlQuote

namespace chorus::node {
namespace {

template <typename T>
constexpr FieldType FieldTypeOf() {
  if constexpr (std::is_same_v<T, std::string>) {
    return FieldType::kString;
  } else if constexpr (std::is_same_v<T, bool>) {
    return FieldType::kBool;
  } else if constexpr (std::is_same_v<T, int>) {
    return FieldType::kInt;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return FieldType::kUint64;
  } else if constexpr (std::is_same_v<T, double>) {
    return FieldType::kDouble;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return FieldType::kStringList;
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    return FieldType::kIntList;
  } else {
    static_assert(sizeof(T) == 0, "config field of a type FieldType does not cover: add it");
  }
}

// Every value of an enum table is accepted.
constexpr bool AnyValue(auto) { return true; }

// The names of `table` whose values `allowed` accepts.
template <typename E, size_t N>
std::vector<std::string_view> AllowedNames(const EnumName<E> (&table)[N], bool (*allowed)(E)) {
  std::vector<std::string_view> names;
  for (const EnumName<E>& n : table) {
    if (allowed(n.value)) names.push_back(n.name);
  }
  return names;
}

template <typename E, size_t N>
std::optional<std::string> SetChoice(const EnumName<E> (&table)[N], bool (*allowed)(E), E* field,
                                     std::string_view text) {
  const std::optional<E> value = FromName(table, text);
  if (value && allowed(*value)) {
    *field = *value;
    return std::nullopt;
  }
  return ExpectedOneOf(AllowedNames(table, allowed), text);
}

// `sec` is the member path of the table's struct inside Config; its text, dots
// included, is the TOML table name (exchange.compression -> [exchange.compression]).
#define CHORUS_CONFIG_FIELD(sec, name, help_text)                                        \
  FieldSpec {                                                                            \
    #sec, #name,                                                                         \
        FieldTypeOf<std::remove_cvref_t<decltype(std::declval<Config&>().sec.name)>>(), \
        [](Config& c) -> void* { return &c.sec.name; }, help_text, {}                    \
  }

// A key written as a name of `table` (an EnumName table), of the values that
// `allowed` accepts (a constexpr predicate on the enum).
#define CHORUS_CONFIG_CHOICE(sec, name, table, allowed, help_text)                                            \
  FieldSpec {                                                                                                 \
    #sec, #name, FieldType::kChoice, nullptr, help_text,                                                      \
        ChoiceAccess {                                                                                        \
      [] { return AllowedNames(table, +[](decltype(Config{}.sec.name) v) { return allowed(v); }); },        \
          [](const Config& c) { return std::string(NameOf(table, c.sec.name)); },                             \
          [](Config& c, std::string_view text) {                                                              \
            return SetChoice(table, +[](decltype(Config{}.sec.name) v) { return allowed(v); }, &c.sec.name, \
                             text);                                                                           \
          }                                                                                                   \
    }                                                                                                         \
  }

// train.device: "cpu", "cuda" or "cuda:N".
FieldSpec DeviceField() {
  return FieldSpec{
      "train", "device", FieldType::kChoice, nullptr, "",
      ChoiceAccess{[] { return std::vector<std::string_view>{"cpu", "cuda", "cuda:N"}; },
                   [](const Config& c) { return c.train.device.Name(); },
                   [](Config& c, std::string_view text) -> std::optional<std::string> {
                     Result<trainer::Device> device = trainer::ParseDevice(text);
                     if (!device) return device.error().message();
                     c.train.device = *device;
                     return std::nullopt;
                   }}};
}

const FieldSpec kFields[] = {
    CHORUS_CONFIG_FIELD(run, name, "runs/<name>/<node>/..."),
    CHORUS_CONFIG_FIELD(run, node_name, "empty: \"node<rank>\""),
    CHORUS_CONFIG_FIELD(run, output_dir, "parent of the run folders"),
    CHORUS_CONFIG_CHOICE(run, log_level, kLogLevelNames, AnyValue, ""),
    CHORUS_CONFIG_CHOICE(run, progress, kProgressNames, AnyValue, ""),

    CHORUS_CONFIG_CHOICE(train, model, trainer::kModelNames, AnyValue, ""),
    CHORUS_CONFIG_CHOICE(train, precision, trainer::kPrecisionNames, AnyValue, ""),
    CHORUS_CONFIG_CHOICE(train, optimizer, trainer::kOptimizerNames, AnyValue, ""),
    DeviceField(),
    CHORUS_CONFIG_FIELD(train, cuda_graphs, "GPU: replay each pass as a CUDA graph"),
    CHORUS_CONFIG_FIELD(train, epochs, ">= 1"),
    CHORUS_CONFIG_FIELD(train, batch_size, "per node, >= 1 and at most the node's shard of the training set"),
    CHORUS_CONFIG_FIELD(train, base_lr, "lr = base_lr * global_batch / 256"),
    CHORUS_CONFIG_FIELD(train, momentum, "in [0, 1)"),
    CHORUS_CONFIG_FIELD(train, weight_decay, "not applied to biases and BatchNorm"),
    CHORUS_CONFIG_FIELD(train, lars_eta, "LARS trust coefficient"),
    CHORUS_CONFIG_CHOICE(train, lars_norm, kLarsNormNames, AnyValue,
                         "gossip mixing every step, on a CPU: the gradient norm of LARS's trust ratio, estimated "
                         "from this node's: its own batch's (local; auto), the batches of the nodes a gossip round "
                         "averages (mixed) or the global batch's (global-batch), or the global batch's from products "
                         "with the gossip peers' gradients of the step (peer; D-PSGD and CHOCO), or the members' mean "
                         "gradient's from sketches averaged along the one-peer exponential or complete graph "
                         "(mean-sketch; D-PSGD and CHOCO): "),
    CHORUS_CONFIG_FIELD(train, lars_norm_nodes,
                        "lars_norm mixed / global-batch / peer: the norm of at most this many nodes' batches, >= 0 (0: "
                        "no cap)"),
    CHORUS_CONFIG_FIELD(train, warmup_epochs, "linear warm-up"),
    CHORUS_CONFIG_FIELD(train, lr_decay_power, "polynomial decay power"),
    CHORUS_CONFIG_FIELD(train, threads, "compute threads, 1..256"),
    CHORUS_CONFIG_FIELD(train, seed, "initialization and shuffling"),
    CHORUS_CONFIG_FIELD(train, eval_every_epochs, "0: only the final evaluation"),
    CHORUS_CONFIG_FIELD(train, eval_every_steps, "also evaluate every N steps (0: off)"),
    CHORUS_CONFIG_FIELD(train, eval_samples, "intermediate evaluations: first N test samples (0: all)"),
    CHORUS_CONFIG_FIELD(train, log_every_steps, "progress lines and metrics"),
    CHORUS_CONFIG_FIELD(train, checkpoint_every_epochs, "0: only at the end"),
    CHORUS_CONFIG_FIELD(train, slowdown, "sleep this fraction of each step's compute"),
    CHORUS_CONFIG_CHOICE(train, stop, kStopNames, AnyValue,
                         "end (samples: when the members together trained epochs x the training set): "),
    CHORUS_CONFIG_CHOICE(train, balance, kBalanceNames, AnyValue,
                         "all-reduce's (and DiLoCo's) global batch split (time: by measured speed): "),
    CHORUS_CONFIG_FIELD(train, balance_every_steps, "balance = \"time\": steps between re-measurements (outer: rounded up to its period, streamed: gathered delay steps after the sync)"),

    CHORUS_CONFIG_FIELD(loss_scale, initial, "dynamic loss scale at start"),
    CHORUS_CONFIG_FIELD(loss_scale, growth_interval, "clean steps before the scale grows"),
    CHORUS_CONFIG_FIELD(loss_scale, growth_factor, "> 1"),
    CHORUS_CONFIG_FIELD(loss_scale, backoff_factor, "in (0, 1), applied on Inf/NaN"),
    CHORUS_CONFIG_FIELD(loss_scale, min_scale, "> 0"),

    CHORUS_CONFIG_FIELD(data, dir, "Fashion-MNIST IDX files"),
    CHORUS_CONFIG_FIELD(data, train_limit, "0: all 60000"),
    CHORUS_CONFIG_FIELD(data, test_limit, "0: all 10000"),
    CHORUS_CONFIG_FIELD(data, augment_flip, "mirror each training image left-right with probability 1/2"),
    CHORUS_CONFIG_FIELD(data, augment_shift, "move each training image by up to this many pixels each way, 0..8"),

    CHORUS_CONFIG_FIELD(cluster, listen, "control plane host:port (port 0: any free)"),
    CHORUS_CONFIG_FIELD(cluster, advertise,
                        "what peers dial; empty: listen's host (this host's name for 0.0.0.0 or ::), and port 0: "
                        "the port listen bound"),
    CHORUS_CONFIG_FIELD(cluster, bootstrap, "host:port of running members"),
    CHORUS_CONFIG_FIELD(cluster, token, "shared cluster secret (never sent)"),
    CHORUS_CONFIG_FIELD(cluster, issuer,
                        "public key (hex) of the cluster's credential issuer: every member must show a credential "
                        "of it for its name (`chorus credential`); empty: the token alone admits"),
    CHORUS_CONFIG_FIELD(cluster, credential,
                        "this node's credential file (needed with issuer; run.node_name defaults to its name)"),
    CHORUS_CONFIG_FIELD(cluster, revoked,
                        "public keys (hex) of credentials the issuer revoked: refused whatever name they show"),
    CHORUS_CONFIG_FIELD(cluster, min_nodes, "epoch 0 is fixed once this many are present"),
    CHORUS_CONFIG_FIELD(cluster, join_timeout_s, "> 0"),
    CHORUS_CONFIG_FIELD(cluster, admit_every_steps,
                        "nodes that arrive while the cluster trains are admitted at admission points at least "
                        "this many steps apart (0: never)"),
    CHORUS_CONFIG_FIELD(cluster, admit_every_s,
                        "and about this many seconds of training apart (0: every admit_every_steps)"),
    CHORUS_CONFIG_FIELD(cluster, heartbeat_interval_s, "> 0"),
    CHORUS_CONFIG_FIELD(cluster, suspect_timeout_s, "> heartbeat_interval_s"),
    CHORUS_CONFIG_FIELD(cluster, dead_timeout_s, ">= suspect_timeout_s"),
    CHORUS_CONFIG_FIELD(cluster, rejoin, "a node the others removed (frozen, cut off) joins again by itself"),
    CHORUS_CONFIG_FIELD(cluster, expel_quorum,
                        "distinct members whose word removes a member: their own checks naming it as sending "
                        "poison (expelled), or their reports that it is dead while the coordinator hears it "
                        "(1: any member's word)"),
    CHORUS_CONFIG_FIELD(cluster, join_only,
                        "only join a formed cluster: never found one (a node rejoining by itself sets it)"),
    CHORUS_CONFIG_FIELD(cluster, host_group, "empty: hostname"),
    CHORUS_CONFIG_FIELD(cluster, site,
                        "where the node is; links inside a site are fast, between sites slow (empty: its host group)"),
    CHORUS_CONFIG_FIELD(cluster, rank_hint, "-1: from SLURM_PROCID / OMPI_COMM_WORLD_RANK"),

    CHORUS_CONFIG_CHOICE(fabric, provider, gossip::kFabricProviderNames, AnyValue, ""),
    CHORUS_CONFIG_FIELD(fabric, op_timeout_s, "deadline of one data-plane wait"),
    CHORUS_CONFIG_FIELD(fabric, busy_poll_us,
                        "a wait first polls the CQ without yielding this long (us); only with a core per node"),
    CHORUS_CONFIG_FIELD(fabric, wait_spin_us, "a wait polls the CQ itself this long (us), then sleeps"),
    CHORUS_CONFIG_FIELD(fabric, progress_max_sleep_us, "longest idle sleep of the progress thread (us)"),
    CHORUS_CONFIG_FIELD(fabric, port,
                        "TCP port of the data plane (tcp;ofi_rxm, net; 0: any free port; shm: must be 0); "
                        "a firewall between hosts must allow it"),
    CHORUS_CONFIG_FIELD(fabric, authenticate,
                        "a MAC on every data-plane message under the epoch's key; forgeries are dropped "
                        "(shm: never, nothing outside the host can reach it)"),
    CHORUS_CONFIG_FIELD(fabric, encrypt, "encrypt every data-plane message's payload too (needs authenticate)"),
    CHORUS_CONFIG_FIELD(fabric, rxm_eager_kib,
                        "tcp;ofi_rxm: messages up to this many KiB go eagerly into the posted receive, no "
                        "rendezvous (0: rxm's own, rendezvous above 16 KiB; 516: 2-node all-reduces of 4 MiB and "
                        "more by rendezvous, faster there); the same on every member"),

    CHORUS_CONFIG_CHOICE(exchange, kind, kExchangeKindNames, AnyValue, ""),
    CHORUS_CONFIG_CHOICE(exchange, algorithm, gossip::kAllreduceAlgorithmNames, IsConfigurableAlgorithm,
                         "allreduce: "),
    CHORUS_CONFIG_FIELD(exchange, bucket_kib, "allreduce: tensor-fusion bucket threshold, >= 1"),
    CHORUS_CONFIG_FIELD(exchange, first_bucket_kib,
                        "allreduce: threshold of the first bucket (the last layers'), so that its all-reduce overlaps the rest of backward; 0: bucket_kib; -1: chosen by the overlap model from the first steps' measurements"),
    CHORUS_CONFIG_FIELD(exchange, state_sources,
                        "allreduce: the most members a joiner takes the live state from at once, each sending "
                        "every n-th chunk (their replicas hold the same bytes); 1: one member sends it all"),
    CHORUS_CONFIG_FIELD(exchange, fp16_wire, "allreduce: FP16 gradients on the wire (times the loss scale, pre-divided by N)"),
    CHORUS_CONFIG_FIELD(exchange, shared_memory,
                        "allreduce: nodes of one host_group sum through a shared-memory segment "
                        "(false: through the fabric only)"),
    CHORUS_CONFIG_FIELD(exchange, link_aware,
                        "allreduce: the ring runs site by site (cluster.site), host by host inside a site, so that "
                        "it crosses each site boundary twice (false: rank order)"),
    CHORUS_CONFIG_FIELD(exchange, site_probe,
                        "at formation and every membership change the members time a small probe between every "
                        "pair and group themselves by it: cluster.site = \"auto\" takes the measured site, a named "
                        "site the measurements contradict is reported (lock step only)"),
    CHORUS_CONFIG_FIELD(exchange, poison_check,
                        "allreduce: gather every member's contribution norm and finite flag each step; a member "
                        "that sends non-finite values or an outlier is named and its step not applied (3+ members)"),
    CHORUS_CONFIG_FIELD(exchange, poison_norm_bound,
                        "allreduce: a contribution norm above this many times the median is rejected; 0: off"),
    CHORUS_CONFIG_FIELD(exchange, poison_expel_after,
                        "allreduce: steps in a row a member is rejected before the others expel it (one an audit "
                        "finds misstating what it sent: at once); 0: never"),
    CHORUS_CONFIG_FIELD(exchange, poison_audit_always,
                        "allreduce and its outer step, with poison_check: audit every step (each member's "
                        "contribution measured by the member that sums it; the ring's bytes, not pipelined); "
                        "false: only the rest of a membership epoch in which a member misreported its own"),
    CHORUS_CONFIG_FIELD(exchange, poison_agreement_up_to,
                        "allreduce and its outer step, with poison_check: up to this many members (and from 4, or "
                        "from 3 with cluster.issuer) the check's figures are gathered in two rounds (each member "
                        "relays its copies and every member takes the majority's, or with cluster.issuer the one its "
                        "sender signed), so that a member sending different figures to different members cannot make "
                        "them judge it differently, and is named; the second round costs each member 24 n (n - 1) "
                        "bytes a step, and 160 more a part when signed; 0: one round always"),
    CHORUS_CONFIG_FIELD(exchange, poison_distance_bound,
                        "gossip (dpsgd, pairwise-async), with poison_check: a neighbour's parameters farther from "
                        "this node's than this many times their norm are rejected; 0: off"),
    CHORUS_CONFIG_CHOICE(exchange, on_failure, kOnFailureNames, AnyValue, "allreduce, after a member died (continue: re-form over the survivors): "),
    CHORUS_CONFIG_CHOICE(exchange, protocol, kGossipProtocolNames, AnyValue, "gossip: "),
    CHORUS_CONFIG_FIELD(exchange, period, "gossip: local steps between mixing rounds, >= 1"),
    CHORUS_CONFIG_FIELD(exchange, max_staleness,
                        "pairwise-async: no node starts a step more than this many steps ahead of its slowest "
                        "neighbour (0: lock-step; -1: unbounded)"),
    CHORUS_CONFIG_FIELD(exchange, gamma, "choco: consensus step size, in (0, 1]; 0: 0.6 for sign/int8/fp16/none, 0.2 for top-k/random-k"),
    CHORUS_CONFIG_CHOICE(exchange, gossip_momentum, kGossipMomentumNames, AnyValue,
                         "gossip: what the momentum remembers: the node's own gradients (local) or the moves "
                         "of its mixed model (quasi-global, Lin et al. 2021): "),
    CHORUS_CONFIG_CHOICE(exchange, correction, kGossipCorrectionNames, AnyValue,
                         "d-psgd: d2 mixes 2 x_t - x_{t-1} - lr (g_t - g_{t-1}) against unlike data (Tang et "
                         "al. 2018; every step, period 1): "),
    CHORUS_CONFIG_FIELD(exchange, global_average_every,
                        "gossip (lock step): every this many steps an exact average of the members replaces "
                        "the mixing round (Gossip-PGA, Chen et al. 2021); 0: never"),
    CHORUS_CONFIG_FIELD(exchange, consensus_control,
                        "gossip (lock step): the bound the exact relative consensus distance is kept under by "
                        "more mixing rounds per step (Kong et al. 2021), measured every "
                        "consensus_control_every steps; 0: off"),
    CHORUS_CONFIG_FIELD(exchange, consensus_control_every, "steps between the consensus-control measurements, >= 1"),
    CHORUS_CONFIG_FIELD(exchange, consensus_control_max_rounds, "mixing rounds per step at most, >= 1"),
    CHORUS_CONFIG_CHOICE(exchange, consensus, kConsensusNames, AnyValue, "end of training: "),
    CHORUS_CONFIG_FIELD(exchange, consensus_bound, "relative consensus distance to reach, > 0"),
    CHORUS_CONFIG_FIELD(exchange, consensus_max_rounds, ">= 1"),
    CHORUS_CONFIG_FIELD(exchange, consensus_every_steps, "distance estimate in the metrics, >= 1"),

    CHORUS_CONFIG_CHOICE(exchange.compression, codec, gossip::kCodecKindNames, AnyValue, ""),
    CHORUS_CONFIG_FIELD(exchange.compression, ratio, "top-k / random-k: fraction kept, in (0, 1]"),
    CHORUS_CONFIG_FIELD(exchange.compression, chunk, "int8 / sign: elements per scale, >= 1"),
    CHORUS_CONFIG_FIELD(exchange.compression, value_bits,
                        "top-k / random-k: bits of each kept value: 32 (f32), 16 (fp16) or 8 (int8 with one "
                        "scale)"),

    CHORUS_CONFIG_CHOICE(exchange.outer, optimizer, kOuterOptimizerNames, AnyValue,
                         "low-communication training: the outer step every `period` inner steps (none: the "
                         "exchange every step; average: local SGD; nesterov: DiLoCo): "),
    CHORUS_CONFIG_FIELD(exchange.outer, lr, "outer learning rate, > 0"),
    CHORUS_CONFIG_FIELD(exchange.outer, momentum, "outer momentum, in [0, 1)"),
    CHORUS_CONFIG_FIELD(exchange.outer, period, "inner steps between a fragment's outer steps, >= 1"),
    CHORUS_CONFIG_FIELD(exchange.outer, fragments,
                        "streaming: parameter fragments synced in turn, period / fragments steps apart, "
                        "1..period"),
    CHORUS_CONFIG_FIELD(exchange.outer, delay,
                        "streaming: inner steps a fragment's communication overlaps before its outer update "
                        "lands, 0..period / fragments - 1"),
    CHORUS_CONFIG_FIELD(exchange.outer, local_mix,
                        "share of the node's own parameters kept when an outer update lands, in [0, 1)"),
    CHORUS_CONFIG_CHOICE(exchange.outer, peers, kOuterPeersNames, AnyValue,
                         "gossip: the outer step averages with the [topology] neighbours or one random peer "
                         "per round (NoLoCo); all-reduce averages over every member: "),
    CHORUS_CONFIG_CHOICE(exchange.outer, inner, kOuterInnerNames, AnyValue,
                         "between outer steps each node trains alone, or (all-reduce) averages its parameters "
                         "with its cluster.site after every inner step (site-gossip: mixes them with its "
                         "site neighbours on the [topology] graph, and averages the site at outer syncs), the "
                         "outer step then running across sites: "),
    CHORUS_CONFIG_FIELD(exchange.outer, site_representatives,
                        "inner \"site\" or \"site-gossip\": the outer step runs among one node per site (the "
                        "lowest rank; its site then takes the result from it); false: among every node"),

    CHORUS_CONFIG_FIELD(exchange.crossovers, small_tree_max_kib,
                        "auto, 4+ ranks on one host with fewer cores: the tree up to this size (KiB; 0: never; "
                        "-1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, recursive_doubling_max_kib,
                        "auto: recursive doubling up to this bucket size (KiB; -1: the provider's default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, tree_max_kib,
                        "auto: then the tree up to this size (KiB; 0: never; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, halving_doubling_min_kib,
                        "auto: halving-doubling from this size (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, halving_doubling_max_kib,
                        "auto: ... up to this size, the ring above (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, large_tree_min_kib,
                        "auto: above halving-doubling, the tree from this size instead of the ring (KiB; -1: default)"),
    CHORUS_CONFIG_FIELD(exchange.crossovers, hierarchical_min_kib,
                        "auto, several hosts some shared: hierarchical from this size (KiB; -1: default)"),

    CHORUS_CONFIG_CHOICE(topology, kind, topologies::kGraphKindNames, AnyValue, ""),
    CHORUS_CONFIG_FIELD(topology, dims, "torus: extent of each dimension (empty: automatic)"),
    CHORUS_CONFIG_FIELD(topology, degree, "random-regular: neighbours per node, >= 1"),
    CHORUS_CONFIG_FIELD(topology, seed, "random-regular: graph seed"),
};

#undef CHORUS_CONFIG_FIELD
#undef CHORUS_CONFIG_CHOICE

constexpr std::string_view kSections[] = {"run",      "train",    "loss_scale",           "data",
                                          "cluster",  "fabric",   "exchange",             "exchange.compression",
                                          "exchange.crossovers", "exchange.outer", "topology"};

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string FieldSpec::Help() const {
  if (type != FieldType::kChoice) return std::string(help);
  return std::string(help) + JoinNames(choice.names(), " | ");
}

std::span<const FieldSpec> ConfigFields() { return kFields; }
std::span<const std::string_view> ConfigSections() { return kSections; }

const FieldSpec* FindField(std::string_view section, std::string_view key) {
  for (const FieldSpec& f : kFields) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

bool IsSection(std::string_view name) {
  return std::find(std::begin(kSections), std::end(kSections), name) != std::end(kSections);
}

// The candidate closest to `word`, when it is close enough to be a likely typo.
std::optional<std::string> Closest(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t limit = word.size() <= 3 ? 1 : (word.size() <= 8 ? 2 : 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string FormatDouble(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  std::string s(buffer, ec == std::errc() ? end : buffer);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Trim(std::string_view s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return std::string(s.substr(begin, end - begin + 1));
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    if (!out.empty()) out += "\n";
    out += line;
  }
  return out;
}

std::string ExpectedOneOf(const std::vector<std::string_view>& names, std::string_view got) {
  std::string what = "expected one of " + JoinNames(names, ", ", /*quoted=*/true) + ", got " + TomlQuote(got);
  if (auto near = Closest(got, std::vector<std::string>(names.begin(), names.end()))) {
    what += " (did you mean " + TomlQuote(*near) + "?)";
  }
  return what;
}

std::string FormatValue(const FieldSpec& field, const Config& config) {
  const void* value = field.type == FieldType::kChoice ? nullptr : field.get(const_cast<Config&>(config));
  switch (field.type) {
    case FieldType::kChoice: return TomlQuote(field.choice.get(config));
    case FieldType::kString: return TomlQuote(*static_cast<const std::string*>(value));
    case FieldType::kBool: return *static_cast<const bool*>(value) ? "true" : "false";
    case FieldType::kInt: return std::to_string(*static_cast<const int*>(value));
    case FieldType::kUint64: return std::to_string(*static_cast<const uint64_t*>(value));
    case FieldType::kDouble: return FormatDouble(*static_cast<const double*>(value));
    case FieldType::kStringList: {
      std::string out = "[";
      for (const std::string& item : *static_cast<const std::vector<std::string>*>(value)) {
        out += (out.size() > 1 ? ", " : "") + TomlQuote(item);
      }
      return out + "]";
    }
    case FieldType::kIntList: {
      std::string out = "[";
      for (int item : *static_cast<const std::vector<int>*>(value)) {
        out += (out.size() > 1 ? ", " : "") + std::to_string(item);
      }
      return out + "]";
    }
  }
  return "";
}

}  // namespace chorus::node
