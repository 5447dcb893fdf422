// `chorus bench ...`: benchmark subcommands. Registers `bench p2p` (bench_p2p.h);
// other benchmarks add their subcommand under the same `bench` command.
//
// Must not: do work at registration time (only in the callback).
#include <string>

#include <CLI/CLI.hpp>

#include "node/bench_p2p.h"
#include "node/cli_commands.h"

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
  };
  auto args = std::make_shared<Args>();
  p2p->add_option("--provider", args->provider,
                  "Provider: \"tcp;ofi_rxm\", \"shm\" or \"all\" (both)")
      ->capture_default_str();
  p2p->add_option("--min-size", args->min_size, "Smallest message (bytes; 4KiB, 1MiB... accepted)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  p2p->add_option("--max-size", args->max_size, "Largest message; sizes grow x4 from the smallest")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  p2p->add_option("--iterations", args->iterations,
                  "Timed round trips per size (0: min(1000, max(10, 1 GiB / size)))")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  p2p->callback([args, &context] {
    BenchP2pOptions options;
    if (args->provider != "all") options.providers = {args->provider};
    options.min_size = args->min_size;
    options.max_size = args->max_size;
    options.iterations = args->iterations;
    context.exit_code = RunBenchP2p(options);
  });
}

}  // namespace chorus::node
