// `chorus simulate`: methods one after another, each as `nodes` virtual-node
// threads over one virtual-time LocalHub (see simulate.h).
#include "node/lab/simulate/simulate.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "common/quantile.h"
#include "gossip/transport/local/local_transport.h"
#include "node/config/config_parse.h"
#include "node/exchange/gossip_exchange.h"
#include "node/outputs/metrics.h"
#include "node/lab/simulate/exchange_cpu_meter.h"
#include "node/lab/simulate/simulate_node.h"
#include "node/run/trainer_options.h"
#include "node/run/training_loop.h"
#include "trainer/dataset.h"
#include "trainer/trainer.h"
#include "topologies/spectral_gap.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Complete-graph local SGD keeps n - 1 full inboxes per node; past this many
// nodes that is too much memory for one process.
constexpr int kMaxCompleteGraphNodes = 32;

// The scalable local SGD of the simulator: H = 8 local steps, then one D-PSGD
// round on the hypercube (log2 n neighbours; n a power of two).
CompareMethod LocalSgdHypercube() {
  return {"local-sgd-hypercube", "local SGD (H=8, hypercube)", "local-sgd",
          {"exchange.kind=gossip", "exchange.protocol=dpsgd", "topology.kind=hypercube",
           "exchange.period=8"}};
}

// Why `method` cannot run under virtual time with `nodes` nodes ("" when it
// can), by what its overrides set (a bad override is reported where the
// method's config is built: MethodConfig).
std::string Unsupported(const CompareMethod& m, int nodes) {
  Config set = DefaultConfig();
  for (const std::string& o : m.overrides) {
    if (!ApplyOverride(&set, o, "method " + m.name).ok()) return "";
  }
  if (set.topology.kind == topologies::GraphKind::kComplete && nodes > kMaxCompleteGraphNodes) {
    return "gossip on the complete graph keeps " + std::to_string(nodes - 1) +
           " full parameter inboxes per node (n^2 vectors in one process) past " +
           std::to_string(kMaxCompleteGraphNodes) + " nodes; use local-sgd-hypercube";
  }
  return "";
}

// Every node's train.batch_size, in rank order.
std::vector<int> NodeBatches(const SimulateOptions& options) {
  std::vector<int> batches;
  for (int r = 0; r < options.nodes; ++r) batches.push_back(NodeBatchSize(options, r));
  return batches;
}

// The method's config: base + overrides + what the simulator fixes.
Result<Config> MethodConfig(const SimulateOptions& options, const CompareMethod& method) {
  Config config = options.base;
  for (const std::string& o : method.overrides) {
    CHORUS_RETURN_IF_ERROR(ApplyOverride(&config, o, "method " + method.name + ": " + o));
  }
  // A recipe's name ("dpsgd-ring+exchange.period=2") as a file name.
  config.run.name = method.name;
  for (char& c : config.run.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  config.run.output_dir = options.out_dir;
  config.train.threads = 1;
  config.exchange.on_failure = OnFailure::kStop;
  config.fabric.op_timeout_s = options.timeout_s;
  config.cluster.min_nodes = options.nodes;
  CHORUS_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

Status CheckOptions(const SimulateOptions& o) {
  std::string bad;
  if (o.nodes < 2) bad = "nodes must be >= 2, got " + std::to_string(o.nodes);
  else if (o.methods.empty()) bad = "no methods to run";
  else if (!(o.latency_s >= 0)) bad = "latency must be >= 0";
  else if (!(o.bytes_per_second > 0)) bad = "bandwidth must be > 0";
  else if (o.sites < 1 || o.sites > o.nodes) bad = "sites must be in 1..nodes, got " + std::to_string(o.sites);
  else if (o.sites > 1 && !(o.site_bytes_per_second > 0)) bad = "sites need a site link bandwidth > 0";
  else if (!(o.compute_scale > 0)) bad = "compute scale must be > 0";
  else if (!(o.compute_spread >= 0)) bad = "compute spread must be >= 0";
  else if (std::any_of(o.speeds.begin(), o.speeds.end(), [](double v) { return !(v > 0 && std::isfinite(v)); }))
    bad = "speeds must be > 0";
  else if (std::any_of(o.batch_sizes.begin(), o.batch_sizes.end(), [](int b) { return b < 1; }))
    bad = "batch sizes must be >= 1";
  else if (!(o.exchange_cpu_scale >= 0 && std::isfinite(o.exchange_cpu_scale)))
    bad = "exchange CPU scale must be >= 0";
  else if (o.eval_nodes < 1) bad = "eval nodes must be >= 1";
  else if (o.evals < 0) bad = "evaluations must be >= 0 (0: four per epoch)";
  else if (o.eval_samples < 1) bad = "eval samples must be >= 1";
  else if (o.log_points < 1) bad = "log points must be >= 1";
  else if (!(o.timeout_s > 0)) bad = "timeout must be > 0";
  else if (!(o.target_accuracy > 0 && o.target_accuracy <= 1)) bad = "target accuracy must be in (0, 1]";
  else if (o.out_dir.empty()) bad = "output directory is empty";
  if (!bad.empty()) return InvalidArgument("simulate: " + bad);
  for (const CompareMethod& m : o.methods) {
    const std::string why = Unsupported(m, o.nodes);
    if (!why.empty()) return InvalidArgument("simulate: method " + m.name + ": " + why);
  }
  return Status::Ok();
}

// `count` ranks spread evenly over 0..nodes-1, always with rank 0.
std::vector<int> SpreadRanks(int count, int nodes) {
  count = std::min(count, nodes);
  std::vector<int> ranks;
  for (int k = 0; k < count; ++k) ranks.push_back(static_cast<int>(int64_t{k} * nodes / count));
  return ranks;
}

// `count` evaluation steps evenly spaced over 1..total, ending at total.
std::vector<int64_t> EvalSteps(int count, int64_t total) {
  std::vector<int64_t> steps;
  for (int k = 1; k <= count; ++k) {
    const int64_t s = std::max<int64_t>(1, total * k / count);
    if (steps.empty() || steps.back() != s) steps.push_back(s);
  }
  return steps;
}

struct SharedData {
  trainer::Dataset train;
  trainer::Dataset eval;
};

// The modelled compute of one step at speed 1, by batch size.
using ComputeByBatch = std::map<int, StepCompute>;

// The compute of a step at the base batch and at every node's, times
// compute_scale: measured for each (`measured`), else the given times at the
// base batch, with the forward/backward in proportion to the batch for the
// others (the update works on the parameters, whatever the batch).
Result<ComputeByBatch> ComputePerBatch(const SimulateOptions& options, bool measured) {
  std::vector<int> batches = NodeBatches(options);
  batches.push_back(options.base.train.batch_size);
  ComputeByBatch out;
  for (int b : batches) {
    if (out.contains(b)) continue;
    StepCompute c{options.forward_backward_s, options.update_s};
    if (measured) {
      Config config = options.base;
      config.train.batch_size = b;
      CHORUS_ASSIGN_OR_RETURN(c, MeasureStepCompute(config));
    } else {
      const double ratio = static_cast<double>(b) / options.base.train.batch_size;
      c.forward_backward_s *= ratio;
    }
    c.forward_backward_s *= options.compute_scale;
    c.update_s *= options.compute_scale;
    out.emplace(b, c);
  }
  return out;
}

// Every node's GossipExchange would compute the same O(n^3) spectral gap.
// -1 when there is none (not gossip, or no gap).
Result<double> SpectralGap(const Config& config, int n) {
  if (config.exchange.kind != ExchangeKind::kGossip) return -1.0;
  CHORUS_ASSIGN_OR_RETURN(topologies::Graph graph, GossipGraph(config, n));
  auto gap = topologies::GraphSpectralGap(graph);
  return gap ? gap->gap_per_round : -1.0;
}

// The method's config for each batch size of the nodes: the method's, with
// train.batch_size set, each checked.
Result<std::map<int, Config>> ConfigsByBatch(const Config& method_config, const std::vector<int>& batches) {
  std::map<int, Config> configs;
  for (int b : batches) {
    if (configs.contains(b)) continue;
    Config c = method_config;
    if (b != c.train.batch_size) {
      c.train.batch_size = b;
      c.origins["train.batch_size"] = "chorus simulate batch sizes";
      CHORUS_RETURN_IF_ERROR(ValidateConfig(c));
    }
    configs.emplace(b, std::move(c));
  }
  return configs;
}

// Whether the method's nodes answer one another from threads of their own
// (pairwise gossip's responders): its hub then orders every event
// (event_order.h).
bool AnswersFromThreads(const Config& config) {
  return config.exchange.kind == ExchangeKind::kGossip && config.exchange.protocol == GossipProtocolKind::kPairwiseAsync;
}

// What every node of one method shares: the data, one hub in virtual time
// with the options' link model (and `cpu_meter`'s charges, when not null;
// every event in order when `ordered`), the final evaluations and every
// rank's batch.
VirtualNodeSpec SharedSpec(const SimulateOptions& options, const SharedData& data, EvalCache* final_eval,
                           double spectral_gap, ExchangeCpuMeter* cpu_meter, const std::vector<int>* batches,
                           bool ordered) {
  gossip::LocalHubOptions hub_options;
  hub_options.world_size = options.nodes;
  hub_options.name_prefix = "node";
  hub_options.virtual_time.enabled = true;
  hub_options.virtual_time.ordered = ordered;
  hub_options.virtual_time.latency_s = options.latency_s;
  hub_options.virtual_time.bytes_per_second = options.bytes_per_second;
  if (options.sites > 1) {
    for (int i = 0; i < options.nodes; ++i) hub_options.virtual_time.site_of_slot.push_back(i % options.sites);
    hub_options.virtual_time.site_latency_s = options.site_latency_s;
    hub_options.virtual_time.site_bytes_per_second = options.site_bytes_per_second;
  }
  if (cpu_meter != nullptr) cpu_meter->Install(&hub_options.virtual_time);
  VirtualNodeSpec shared;
  shared.world_size = options.nodes;
  shared.sites = options.sites;
  shared.batch_sizes = batches;
  shared.hub = gossip::LocalHub::Create(hub_options);
  shared.train = &data.train;
  shared.eval_set = &data.eval;
  shared.final_eval = final_eval;
  shared.spectral_gap = spectral_gap;
  shared.cpu_meter = cpu_meter;
  shared.ordered = ordered;
  return shared;
}

// Every rank's spec: `shared` plus the rank's config (its batch size), compute
// time, evaluation schedule and folder under `method_dir`.
std::vector<VirtualNodeSpec> NodeSpecs(const SimulateOptions& options, const VirtualNodeSpec& shared,
                                       const std::map<int, Config>& configs, const ComputeByBatch& compute,
                                       const std::string& method_dir) {
  const int n = options.nodes;
  const std::vector<int>& batches = *shared.batch_sizes;
  int global_batch = 0;
  for (int b : batches) global_batch += b;
  const Config& config = configs.begin()->second;
  // A global batch larger than the data is each node's error (RunVirtualNode): no evaluations then.
  const int64_t steps_per_epoch = ClusterStepsPerEpoch(config, shared.train->count, global_batch).value_or(0);
  const int64_t total_steps = steps_per_epoch * config.train.epochs;
  const std::vector<int> eval_ranks = SpreadRanks(options.eval_nodes, n);
  std::vector<VirtualNodeSpec> specs;
  specs.reserve(n);
  for (int r = 0; r < n; ++r) {
    VirtualNodeSpec spec = shared;
    spec.rank = r;
    const int batch = batches[static_cast<size_t>(r)];
    spec.config = &configs.at(batch);
    const double spread = n > 1 ? 1.0 + options.compute_spread * r / (n - 1) : 1.0;
    const double slower = spread / NodeSpeed(options, r);
    spec.forward_backward_s = compute.at(batch).forward_backward_s * slower;
    spec.update_s = compute.at(batch).update_s * slower;
    specs.push_back(std::move(spec));
  }
  // Evaluation points: the same steps on every node; at their own pace,
  // each node's share of the budget's steps by its modelled speed, so that
  // the k-th points of all nodes come at about one virtual moment.
  std::vector<std::vector<int64_t>> points(static_cast<size_t>(n), EvalSteps(options.evals, total_steps));
  if (shared.ledger != nullptr) {
    // The budget's samples at every node's modelled rate end at one moment.
    double samples_per_s = 0.0;
    for (int r = 0; r < n; ++r) {
      const VirtualNodeSpec& s = specs[static_cast<size_t>(r)];
      samples_per_s += batches[static_cast<size_t>(r)] / (s.forward_backward_s + s.update_s);
    }
    const double end_s = static_cast<double>(total_steps) * global_batch / samples_per_s;
    for (int r = 0; r < n; ++r) {
      const VirtualNodeSpec& s = specs[static_cast<size_t>(r)];
      const int64_t steps = std::max<int64_t>(1, std::llround(end_s / (s.forward_backward_s + s.update_s)));
      points[static_cast<size_t>(r)] = EvalSteps(options.evals, steps);
    }
  }
  if (shared.board != nullptr) shared.board->WatchByRank(points);
  for (int r = 0; r < n; ++r) {
    VirtualNodeSpec& spec = specs[static_cast<size_t>(r)];
    if (std::find(eval_ranks.begin(), eval_ranks.end(), r) != eval_ranks.end()) {
      spec.eval_steps = points[static_cast<size_t>(r)];
    }
    spec.log_every = std::max<int64_t>(1, total_steps / options.log_points);
    spec.dir = method_dir + "/node" + std::to_string(r);
  }
  return specs;
}

// Runs every node on a thread of its own; their summaries in rank order, or
// the first node error.
Result<std::vector<json>> RunNodes(std::vector<VirtualNodeSpec> specs) {
  const int n = static_cast<int>(specs.size());
  std::vector<json> summaries(n);
  std::mutex error_mu;
  Status first_error;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (VirtualNodeSpec& node_spec : specs) {
    std::shared_ptr<gossip::LocalHub> hub = node_spec.hub;
    threads.emplace_back([spec = std::move(node_spec), &summaries, &error_mu, &first_error, hub, n] {
      Result<json> summary = RunVirtualNode(spec);
      if (summary) {
        summaries[spec.rank] = std::move(*summary);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.ok()) first_error = summary.error();
      }
      // The others would wait for this node until their deadlines: end them now.
      for (int s = 0; s < n; ++s) hub->Kill(s);
    });
  }
  for (std::thread& t : threads) t.join();
  if (!first_error.ok()) return Err(first_error);
  return summaries;
}

// Under ordered events a node does not wait at an evaluation for the others'
// copies (it would hold back the events that bring them): the exact
// distances go into the evaluating nodes' records once every node is done.
Status FillExactDistances(const std::string& method_dir, const std::vector<int>& ranks,
                          VirtualConsensusBoard& board) {
  for (int r : ranks) {
    const std::string path = method_dir + "/node" + std::to_string(r) + "/metrics.jsonl";
    std::ifstream in(path);
    if (!in) return NotFound("simulate: cannot read " + path);
    std::string out;
    std::string line;
    int64_t point = 0;  // the node's k-th point is every node's k-th (WatchByRank)
    while (std::getline(in, line)) {
      json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("eval_accuracy") && record.contains("step") &&
          record["step"].is_number_integer()) {
        const double d = board.Distance(r, record["step"].get<int64_t>(), /*timeout_s=*/0.0);
        if (d >= 0) {
          record["consensus_distance_exact"] = d;
          record["consensus_point"] = point++;
          line = record.dump();
        }
      }
      out += line + "\n";
    }
    in.close();
    CHORUS_RETURN_IF_ERROR(WriteFileAtomic(
        path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(out.data()), out.size())));
  }
  return Status::Ok();
}

SimulatedMethod RunMethod(const SimulateOptions& options, const CompareMethod& method,
                          const SharedData& data, const ComputeByBatch& compute) {
  SimulatedMethod out;
  out.method = method;
  const double wall_start = NowSeconds();
  auto fail = [&](const Status& s) {
    out.exit_code = 1;
    out.error = s.ToString();
    out.wall_seconds = NowSeconds() - wall_start;
    return out;
  };
  Result<Config> config = MethodConfig(options, method);
  if (!config) return fail(config.error());
  Result<double> spectral_gap = SpectralGap(*config, options.nodes);
  if (!spectral_gap) return fail(spectral_gap.error());
  const std::vector<int> batches = NodeBatches(options);
  Result<std::map<int, Config>> configs = ConfigsByBatch(*config, batches);
  if (!configs) return fail(configs.error());
  EvalCache final_eval;
  // Outlives the nodes and so the hub's calls into it.
  std::optional<ExchangeCpuMeter> cpu_meter;
  if (options.exchange_cpu_scale > 0) cpu_meter.emplace(options.nodes, options.exchange_cpu_scale);
  VirtualNodeSpec shared = SharedSpec(options, data, &final_eval, *spectral_gap,
                                      cpu_meter ? &*cpu_meter : nullptr, &batches, AnswersFromThreads(*config));
  VirtualConsensusBoard board(options.nodes);
  shared.board = &board;
  SampleLedger ledger(options.nodes);
  if (shared.ordered && config->train.stop == StopSetting::kSamples) shared.ledger = &ledger;
  MeanGradientBarrier mean_gradient(options.nodes, options.timeout_s);
  if (options.exact_lars_norm) {
    if (shared.ordered) return fail(InvalidArgument("--exact-lars-norm: " + method.name + "'s nodes run steps apart"));
    shared.mean_gradient = &mean_gradient;
  }
  const std::string method_dir = options.out_dir + "/" + method.name;
  std::error_code ec;
  fs::remove_all(method_dir, ec);  // a previous simulation's nodes must not mix in
  Result<std::vector<json>> summaries = RunNodes(NodeSpecs(options, shared, *configs, compute, method_dir));
  if (!summaries) return fail(summaries.error());
  if (shared.ordered) {
    Status filled = FillExactDistances(method_dir, SpreadRanks(options.eval_nodes, options.nodes), board);
    if (!filled.ok()) return fail(filled);
  }
  out.summaries = std::move(*summaries);
  out.wall_seconds = NowSeconds() - wall_start;
  return out;
}

json MethodJson(const SimulatedMethod& m) {
  json j = {{"name", m.method.name},       {"label", m.method.label},
            {"dir", m.method.name},        {"family", m.method.family},
            {"exit_code", m.exit_code},    {"wall_seconds", m.wall_seconds},
            {"overrides", m.method.overrides}};
  if (!m.error.empty()) j["error"] = m.error;
  return j;
}

// The profiles as compare.json records them (null when none).
json ProfilesJson(const SimulateOptions& options) {
  if (options.speeds.empty() && options.batch_sizes.empty()) return nullptr;
  json j = {{"repeat", "node i takes entry i mod the list's length"}};
  if (!options.speeds.empty()) j["speeds"] = options.speeds;
  if (!options.batch_sizes.empty()) j["batch_sizes"] = options.batch_sizes;
  return j;
}

json CompareJson(const SimulateOptions& options, const StepCompute& compute, bool measured,
                 const std::vector<SimulatedMethod>& methods) {
  const Config& base = options.base;
  const double step_s = compute.forward_backward_s + compute.update_s;
  int global_batch = 0;
  for (int b : NodeBatches(options)) global_batch += b;
  json j;
  j["name"] = fs::path(options.out_dir).filename().string();
  j["kind"] = "simulate";
  j["nodes"] = options.nodes;
  j["target_accuracy"] = options.target_accuracy;
  j["model"] = base.train.model;
  j["epochs"] = base.train.epochs;
  j["batch_size"] = base.train.batch_size;
  j["global_batch"] = global_batch;
  j["node_profiles"] = ProfilesJson(options);
  j["link"] = {{"bandwidth", options.bandwidth},
               {"latency", options.latency},
               {"emulated", false},
               {"simulated", true},
               {"note", "virtual time: latency-bandwidth model, one NIC per node (sends "
                        "serialised per sender), no receive-side contention"}};
  j["single_node"] = {{"samples_per_s", base.train.batch_size / step_s},
                      {"source", measured ? "measured compute of one step, one thread"
                                          : "given compute time per step"}};
  j["simulation"] = {{"time", "virtual seconds"},
                     {"forward_backward_s", compute.forward_backward_s},
                     {"update_s", compute.update_s},
                     {"compute_measured", measured},
                     {"compute_scale", options.compute_scale},
                     {"compute_spread", options.compute_spread},
                     {"exchange_cpu_scale", options.exchange_cpu_scale},
                     {"latency_s", options.latency_s},
                     {"bytes_per_second", options.bytes_per_second},
                     {"sites", options.sites},
                     {"site_link", options.site_link},
                     {"site_latency_s", options.site_latency_s},
                     {"site_bytes_per_second", options.site_bytes_per_second},
                     {"eval_nodes", SpreadRanks(options.eval_nodes, options.nodes)},
                     {"evals", options.evals},
                     {"eval_samples", options.eval_samples},
                     {"train_samples", base.data.train_limit}};
  json list = json::array();
  for (const SimulatedMethod& m : methods) list.push_back(MethodJson(m));
  j["methods"] = std::move(list);
  return j;
}

}  // namespace

double NodeSpeed(const SimulateOptions& options, int node) {
  if (options.speeds.empty()) return 1.0;
  return options.speeds[static_cast<size_t>(node) % options.speeds.size()];
}

int NodeBatchSize(const SimulateOptions& options, int node) {
  if (options.batch_sizes.empty()) return options.base.train.batch_size;
  return options.batch_sizes[static_cast<size_t>(node) % options.batch_sizes.size()];
}

std::vector<std::string> DefaultSimulateMethodNames() {
  return {"ring-allreduce", "tree-allreduce", "dpsgd-ring", "dpsgd-one-peer-exp",
          "choco-sign", "local-sgd-hypercube"};
}

Result<std::vector<CompareMethod>> SimulateMethods(const std::vector<std::string>& names,
                                                   int nodes) {
  std::vector<std::string> expanded;
  for (const std::string& name : names) {
    if (name == "default") {
      for (const std::string& d : DefaultSimulateMethodNames()) expanded.push_back(d);
    } else {
      expanded.push_back(name);
    }
  }
  std::vector<CompareMethod> known = BuiltinMethods();
  known.push_back(LocalSgdHypercube());
  std::vector<CompareMethod> out;
  for (const std::string& name : expanded) {
    // "NAME+KEY=VALUE+...": the built-in method with more settings (a recipe to try).
    const std::string base = name.substr(0, name.find('+'));
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const CompareMethod& m) { return m.name == base; });
    if (it == known.end()) {
      std::string list;
      for (const CompareMethod& m : known) list += (list.empty() ? "" : ", ") + m.name;
      return Err(InvalidArgument("simulate: unknown method \"" + base + "\"; known: " + list +
                                 " (each may be followed by +KEY=VALUE settings)"));
    }
    CompareMethod method = *it;
    if (base != name) {
      method.name = name;
      std::string extras;
      for (size_t at = base.size(); at < name.size();) {
        const size_t next = std::min(name.find('+', at + 1), name.size());
        const std::string setting = name.substr(at + 1, next - at - 1);
        if (setting.find('=') == std::string::npos) {
          return Err(InvalidArgument("simulate: method \"" + name + "\": \"" + setting +
                                     "\" is not KEY=VALUE"));
        }
        method.overrides.push_back(setting);
        extras += (extras.empty() ? "" : ", ") + setting;
        at = next;
      }
      method.label += " (" + extras + ")";
    }
    const std::string why = Unsupported(method, nodes);
    if (!why.empty()) return Err(InvalidArgument("simulate: method " + name + ": " + why));
    if (std::none_of(out.begin(), out.end(), [&](const CompareMethod& m) { return m.name == name; })) {
      out.push_back(std::move(method));
    }
  }
  return out;
}

Result<StepCompute> MeasureStepCompute(const Config& config, int steps) {
  Config c = config;
  c.train.threads = 1;
  const int batch_size = c.train.batch_size;
  trainer::Dataset data = trainer::MakeSyntheticDataset(batch_size, c.train.seed);
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<trainer::Trainer> t,
                          trainer::Trainer::Create(MakeTrainerOptions(c, batch_size, 1000)));
  std::vector<int32_t> indices(batch_size);
  for (int i = 0; i < batch_size; ++i) indices[i] = i;
  trainer::Batch batch;
  CHORUS_RETURN_IF_ERROR(trainer::MakeBatch(data, indices, &batch));
  std::vector<double> fb, up;
  constexpr int kWarmup = 2;
  for (int s = 0; s < kWarmup + std::max(1, steps); ++s) {
    const double t0 = NowSeconds();
    CHORUS_ASSIGN_OR_RETURN(trainer::ForwardBackwardResult pass, t->ForwardBackward(batch));
    const double t1 = NowSeconds();
    CHORUS_ASSIGN_OR_RETURN(trainer::UpdateResult update, t->ApplyUpdate(s));
    const double t2 = NowSeconds();
    (void)pass;
    (void)update;
    if (s >= kWarmup) {
      fb.push_back(t1 - t0);
      up.push_back(t2 - t1);
    }
  }
  return StepCompute{Quantile(fb, 0.5), Quantile(up, 0.5)};
}

Result<SimulationResult> RunSimulation(const SimulateOptions& given) {
  CHORUS_RETURN_IF_ERROR(CheckOptions(given));
  SimulateOptions options = given;
  // Time to target is the first evaluation point at or above it: four an
  // epoch resolve it to a quarter epoch (one an epoch compared epoch times).
  if (options.evals == 0) options.evals = std::max(4, 4 * options.base.train.epochs);
  // Each method's config must be valid before anything runs.
  for (const CompareMethod& m : options.methods) {
    auto c = MethodConfig(options, m);
    if (!c) return Err(c.error().WithContext("simulate: method " + m.name));
  }
  SimulationResult result;
  result.out_dir = options.out_dir;

  SharedData data;
  {
    const DataConfig& d = options.base.data;
    CHORUS_ASSIGN_OR_RETURN(data.train,
                            trainer::LoadFashionMnist(d.dir, trainer::Split::kTrain, d.train_limit));
    CHORUS_ASSIGN_OR_RETURN(trainer::Dataset test,
                            trainer::LoadFashionMnist(d.dir, trainer::Split::kTest, options.eval_samples));
    data.eval = trainer::PrefixOf(test, options.eval_samples);
  }

  result.compute_measured = !(options.forward_backward_s > 0 || options.update_s > 0);
  CHORUS_ASSIGN_OR_RETURN(const ComputeByBatch by_batch, ComputePerBatch(options, result.compute_measured));
  const StepCompute compute = by_batch.at(options.base.train.batch_size);
  result.forward_backward_s = compute.forward_backward_s;
  result.update_s = compute.update_s;
  if (options.print_progress) {
    std::printf("simulate: %d virtual nodes, link %s latency %s, compute %.3f ms + %.3f ms per step "
                "(%s)\n",
                options.nodes, options.bandwidth.c_str(), options.latency.c_str(),
                compute.forward_backward_s * 1e3, compute.update_s * 1e3,
                result.compute_measured ? "measured" : "given");
    std::fflush(stdout);
  }

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) {
    return Err(Unavailable("simulate: cannot create " + options.out_dir + ": " + ec.message()));
  }
  const std::string compare_path = options.out_dir + "/compare.json";
  for (const CompareMethod& m : options.methods) {
    SimulatedMethod done = RunMethod(options, m, data, by_batch);
    if (options.print_progress) {
      double acc = 0.0, train_s = 0.0;
      for (const json& s : done.summaries) {
        acc += s.value("test_accuracy", 0.0) / static_cast<double>(done.summaries.size());
        train_s = std::max(train_s, s.value("train_seconds", 0.0));
      }
      if (done.exit_code == 0) {
        std::printf("  %-24s test accuracy %.2f%%, virtual train time %.3f s, wall %.1f s\n",
                    m.name.c_str(), 100.0 * acc, train_s, done.wall_seconds);
      } else {
        std::printf("  %-24s FAILED after %.1f s: %s\n", m.name.c_str(), done.wall_seconds,
                    done.error.c_str());
      }
      std::fflush(stdout);
    }
    if (done.exit_code != 0) {
      CHORUS_LOG_ERROR(Subsys::kNode, "simulate: method ", m.name, " failed: ", done.error);
    }
    result.methods.push_back(std::move(done));
    result.compare = CompareJson(options, compute, result.compute_measured, result.methods);
    CHORUS_RETURN_IF_ERROR(WriteSummary(compare_path, result.compare));
  }
  return result;
}

}  // namespace chorus::node
