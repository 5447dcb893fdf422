// `chorus config check FILE`. Printing and exit codes only: parsing and
// checking rules live in node/config/.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/config/config_describe.h"
#include "common/files.h"
#include "node/config/config_check.h"
#include "node/config/config_parse.h"
#include "node/control/control_plane.h"
#include "node/lab/compare/compare_config.h"
#include "trainer/dataset.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

// What a node checks only when it starts, checked here too: the data set's
// files in data.dir, its credential (with cluster.issuer), and in a
// comparison file its [compare] table (as `chorus compare` reads it). The first problem, naming file, line or key.
Status CheckBeyondTheSettings(const std::string& file, const Config& config) {
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"}) {
    if (!fs::exists(fs::path(config.data.dir) / name)) {
      return NotFound(SettingOrigin(config, "data.dir") + ": data.dir: no " + name + " in " + config.data.dir +
                      " (Fashion-MNIST: Debian's " + trainer::kFashionMnistPackage + " puts it in " +
                      trainer::kFashionMnistDefaultDir + ")");
    }
  }
  // The credential as the control plane reads it: its issuer, its name.
  if (Result<std::shared_ptr<const NodeCredentials>> credential =
          LoadClusterCredential(config.cluster, config.run.node_name);
      !credential) {
    return credential.error().WithContext(SettingOrigin(config, "cluster.credential") + ": cluster.credential");
  }
  Result<std::string> text = ReadFileText(file);
  static const std::regex kCompareTable(R"((^|\n)[ \t]*\[\[?[ \t]*compare[ \t]*[.\]])");
  if (file.empty() || !text || !std::regex_search(*text, kCompareTable)) return Status::Ok();
  return StatusOf(ParseCompareFile(file));
}

}  // namespace

void RegisterConfigCommand(CLI::App& app, CliContext& context) {
  CLI::App* config = app.add_subcommand("config", "Work with node configuration files");
  config->require_subcommand(1);

  struct CheckArgs {
    std::string file;
    std::vector<std::string> sets;
  };
  auto args = std::make_shared<CheckArgs>();
  CLI::App* check = config->add_subcommand(
      "check",
      "Validate FILE as a starting node would, and print the resolved settings as TOML: every key, its "
      "value, and for keys written as names the values accepted");
  check->add_option("file", args->file, "TOML config file")->required();
  check->add_option("--set", args->sets, "Override one setting, e.g. --set train.batch_size=128 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  check->callback([args, &context] {
    Result<Config> loaded = LoadConfig(args->file, CommandLineOverrides(args->sets, {}));
    if (!loaded) {
      context.exit_code = CommandError("config check", loaded.error().message(), kExitUsage);
      return;
    }
    if (Status more = CheckBeyondTheSettings(args->file, *loaded); !more.ok()) {
      context.exit_code = CommandError("config check", more.message(), kExitUsage);
      return;
    }
    std::fputs(DescribeConfig(*loaded).c_str(), stdout);
    context.exit_code = kExitOk;
  });
}

}  // namespace chorus::node
