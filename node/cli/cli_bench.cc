// `chorus bench ...`: benchmark subcommands. Registers `bench p2p` (bench_p2p.h)
// and `bench allreduce` (bench_allreduce.h); other benchmarks add their subcommand under the same `bench` command.
//
// Must not: do work at registration time (only in the callback).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/log.h"
#include "gossip/collectives/collective_options.h"
#include "node/bench/bench_allreduce.h"
#include "node/bench/bench_p2p.h"
#include "node/config/config_parse.h"
#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"

namespace chorus::node {

namespace {

// The `bench` subcommand, created by the first caller.
CLI::App* BenchCommand(CLI::App& app) {
  auto existing = app.get_subcommands([](CLI::App* sub) { return sub->get_name() == "bench"; });
  if (!existing.empty()) return existing.front();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (numbers, not tests)");
  bench->require_subcommand(1);
  return bench;
}

// The names of `providers`.
std::vector<std::string> ProviderNames(const std::vector<gossip::FabricProvider>& providers) {
  std::vector<std::string> names;
  for (gossip::FabricProvider p : providers) names.emplace_back(gossip::ProviderName(p));
  return names;
}
// Every provider's name: what --provider accepts.
std::vector<std::string> ProviderNames() {
  std::vector<std::string> names;
  for (std::string_view name : NamesOf(gossip::kFabricProviderNames)) names.emplace_back(name);
  return names;
}

// --min-size and --max-size of both benches: sizes grow x4 from the smallest.
void AddSizeRange(CLI::App& cmd, size_t* min_size, size_t* max_size, const std::string& what) {
  cmd.add_option("--min-size", *min_size, "Smallest " + what + " (bytes; 4KiB, 1MiB... accepted)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd.add_option("--max-size", *max_size, "Largest " + what + "; sizes grow x4 from the smallest")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
}

// --busy-poll-us of both benches (gossip::BusyPollFor).
constexpr const char* kBusyPollHelp =
    "Transport knob: how long a wait polls the CQ without yielding (-1: 200 over shm if the host "
    "has a core per process, else 0)";

// --wait-spin-us, --wait-spin-per-mib-us and --progress-max-sleep-us.
void AddTransportKnobs(CLI::App& cmd, TransportKnobs* knobs) {
  cmd.add_option("--wait-spin-us", knobs->wait_spin_us,
                 "Transport knob: how long a wait polls the CQ itself before sleeping (-1: default)");
  cmd.add_option("--wait-spin-per-mib-us", knobs->wait_spin_per_mib_us,
                 "Transport knob: extra wait polling per MiB of the message (-1: default)");
  cmd.add_option("--progress-max-sleep-us", knobs->progress_max_sleep_us,
                 "Transport knob: longest idle sleep of the progress thread (-1: default)");
  cmd.add_option("--seal", knobs->seal,
                 "Seal every message as a cluster does (fabric.authenticate, fabric.encrypt): off, mac or "
                 "encrypt; shm never seals")
      ->check(CLI::IsMember({"off", "mac", "encrypt"}))
      ->capture_default_str();
}

struct BenchAllreduceArgs {
  std::vector<std::string> providers = ProviderNames(BenchAllreduceOptions{}.providers);
  std::string ranks = "2,4";
  std::string algorithms = "ring,tree,halving-doubling,recursive-doubling";
  size_t min_size = size_t{4} << 10;
  size_t max_size = size_t{64} << 20;
  bool quick = false;
  double seconds = BenchAllreduceOptions{}.seconds_per_size;
  double warmup = BenchAllreduceOptions{}.warmup_seconds;
  int rounds = BenchAllreduceOptions{}.rounds;
  int busy_poll_us = -1;
  TransportKnobs knobs;
  size_t rxm_eager_limit = gossip::kDefaultRxmEagerLimit;
  size_t segment_bytes = 0;
  std::string config;
  bool fit_crossovers = false;
};

void AddBenchAllreduceOptions(CLI::App* cmd, BenchAllreduceArgs* args) {
  cmd->add_option("--provider", args->providers,
                  "Provider(s), repeatable or comma-separated: " +
                      JoinNames(NamesOf(gossip::kFabricProviderNames), ", ", /*quoted=*/true))
      ->delimiter(',')
      ->check(CLI::IsMember(ProviderNames()))
      ->capture_default_str();
  cmd->add_option("--ranks", args->ranks, "World sizes, comma-separated (each a set of processes)")
      ->capture_default_str();
  cmd->add_option("--algorithms", args->algorithms,
                  "Comma-separated: " + JoinNames(NamesOf(gossip::kAllreduceAlgorithmNames), ", "))
      ->capture_default_str();
  AddSizeRange(*cmd, &args->min_size, &args->max_size, "buffer");
  cmd->add_flag("--quick", args->quick, "Only 4 KiB, 1 MiB and 16 MiB");
  cmd->add_option("--seconds", args->seconds, "Timed seconds per row that the call count aims at")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed seconds of all-reduces before the first row")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds,
                  "Rounds over every row; above 1 the algorithms alternate size by size and each provider ends "
                  "with the medians over rounds (and auto against the best), which --fit-crossovers then fits")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--busy-poll-us", args->busy_poll_us, kBusyPollHelp)->capture_default_str();
  AddTransportKnobs(*cmd, &args->knobs);
  cmd->add_option("--rxm-eager-limit", args->rxm_eager_limit,
                  "tcp;ofi_rxm only: messages up to this size go eagerly into the posted receive instead of by "
                  "rendezvous (fabric.rxm_eager_kib; 0: rxm's own rendezvous above 16 KiB; see docs/libfabric.md)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--segment-bytes", args->segment_bytes,
                  "Pipelining segment of every algorithm (AllreduceOptions::segment_bytes; 0: the default for the "
                  "world size and host)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--config", args->config,
                  "A node's TOML: `auto` picks by its [exchange.crossovers] (default: the provider's)");
  cmd->add_flag("--fit-crossovers", args->fit_crossovers,
                "After each provider: the [exchange.crossovers] that make `auto` pick the fastest measured "
                "(needs ring, tree, halving-doubling and recursive-doubling in --algorithms)");
}

// --config: the [exchange.crossovers] of a node's TOML (none given: the defaults).
Result<CrossoversConfig> ReadCrossovers(const std::string& path) {
  if (path.empty()) return CrossoversConfig{};
  Result<Config> config = ParseConfigFile(path);
  if (!config) return Err(InvalidArgument("--config: " + config.error().ToString()));
  return config->exchange.crossovers;
}

// --ranks: "2,4".
Result<std::vector<int>> ParseRanks(const std::string& text) {
  std::vector<int> ranks;
  for (const std::string& item : SplitCommas(text)) {
    try {
      size_t used = 0;
      ranks.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return Err(InvalidArgument("--ranks: \"" + item + "\" is not a number"));
    }
  }
  return ranks;
}

// --algorithms: "ring,tree".
Result<std::vector<gossip::AllreduceAlgorithm>> ParseAlgorithms(const std::string& text) {
  std::vector<gossip::AllreduceAlgorithm> algorithms;
  for (const std::string& item : SplitCommas(text)) {
    auto algorithm = gossip::ParseAllreduceAlgorithm(item);
    if (!algorithm) return Err(InvalidArgument("--algorithms: " + algorithm.error().ToString()));
    algorithms.push_back(*algorithm);
  }
  return algorithms;
}

// --fit-crossovers needs every algorithm `auto` chooses between.
Status CheckFitAlgorithms(const std::vector<gossip::AllreduceAlgorithm>& algorithms) {
  using gossip::AllreduceAlgorithm;
  for (auto needed : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree, AllreduceAlgorithm::kHalvingDoubling,
                      AllreduceAlgorithm::kRecursiveDoubling}) {
    if (std::find(algorithms.begin(), algorithms.end(), needed) == algorithms.end()) {
      return InvalidArgument("--fit-crossovers needs " + std::string(gossip::AllreduceAlgorithmName(needed)) +
                             " in --algorithms");
    }
  }
  return Status::Ok();
}

// The buffer sizes: --quick's three, else --min-size to --max-size.
Result<std::vector<size_t>> ChooseSizes(const BenchAllreduceArgs& args) {
  if (args.quick) return std::vector<size_t>{size_t{4} << 10, size_t{1} << 20, size_t{16} << 20};
  if (args.min_size == 0 || args.max_size < args.min_size) {
    return Err(InvalidArgument("need 0 < min-size <= max-size, got " + std::to_string(args.min_size) + " and " +
                               std::to_string(args.max_size)));
  }
  return BenchAllreduceSizes(args.min_size, args.max_size);
}

// BenchAllreduceOptions from the flags; errors are the command line's.
Result<BenchAllreduceOptions> BenchAllreduceOptionsFrom(const BenchAllreduceArgs& args) {
  BenchAllreduceOptions options;
  options.fit_crossovers = args.fit_crossovers;
  CHORUS_ASSIGN_OR_RETURN(options.crossovers, ReadCrossovers(args.config));
  options.busy_poll_us = args.busy_poll_us;
  options.rxm_eager_limit = args.rxm_eager_limit;
  options.segment_bytes = args.segment_bytes;
  options.knobs = args.knobs;
  options.providers.clear();
  for (const std::string& name : args.providers) {
    options.providers.push_back(*FromName(gossip::kFabricProviderNames, name));  // checked by IsMember
  }
  options.seconds_per_size = args.seconds;
  options.warmup_seconds = args.warmup;
  options.rounds = args.rounds;
  CHORUS_ASSIGN_OR_RETURN(options.ranks, ParseRanks(args.ranks));
  CHORUS_ASSIGN_OR_RETURN(options.algorithms, ParseAlgorithms(args.algorithms));
  if (options.fit_crossovers) CHORUS_RETURN_IF_ERROR(CheckFitAlgorithms(options.algorithms));
  CHORUS_ASSIGN_OR_RETURN(options.sizes, ChooseSizes(args));
  return options;
}

int RunBenchAllreduceCommand(const BenchAllreduceArgs& args) {
  Result<BenchAllreduceOptions> options = BenchAllreduceOptionsFrom(args);
  if (!options) {
    CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce: ", options.error().message());
    return kExitUsage;
  }
  return RunBenchAllreduce(*options);
}

void RegisterBenchAllreduce(CLI::App& bench, CliContext& context) {
  CLI::App* cmd = bench.add_subcommand(
      "allreduce", "All-reduce algorithms between local processes over libfabric (nccl-tests' table)");
  auto args = std::make_shared<BenchAllreduceArgs>();
  AddBenchAllreduceOptions(cmd, args.get());
  cmd->callback([args, &context] { context.exit_code = RunBenchAllreduceCommand(*args); });
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CliContext& context) {
  CLI::App* bench = BenchCommand(app);
  CLI::App* p2p = bench->add_subcommand(
      "p2p", "Ping-pong between two local processes over libfabric (fi_pingpong's definitions)");
  struct Args {
    std::string provider = "all";
    size_t min_size = size_t{4} << 10;
    size_t max_size = size_t{64} << 20;
    int iterations = 0;
    int busy_poll_us = -1;
    TransportKnobs knobs;
  };
  auto args = std::make_shared<Args>();
  p2p->add_option("--busy-poll-us", args->busy_poll_us, kBusyPollHelp);
  AddTransportKnobs(*p2p, &args->knobs);
  std::vector<std::string> p2p_choices = ProviderNames();
  p2p_choices.push_back("all");
  p2p->add_option("--provider", args->provider,
                  "Provider: " + JoinNames(NamesOf(gossip::kFabricProviderNames), ", ", /*quoted=*/true) +
                      " or \"all\" (each of them)")
      ->check(CLI::IsMember(p2p_choices))
      ->capture_default_str();
  AddSizeRange(*p2p, &args->min_size, &args->max_size, "message");
  p2p->add_option("--iterations", args->iterations,
                  "Timed round trips per size (0: min(1000, max(10, 1 GiB / size)))")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  p2p->callback([args, &context] {
    BenchP2pOptions options;
    if (auto provider = FromName(gossip::kFabricProviderNames, args->provider)) options.providers = {*provider};
    options.min_size = args->min_size;
    options.max_size = args->max_size;
    options.iterations = args->iterations;
    options.busy_poll_us = args->busy_poll_us;
    options.knobs = args->knobs;
    context.exit_code = RunBenchP2p(options);
  });
  RegisterBenchAllreduce(*bench, context);
}

}  // namespace chorus::node
