// `chorus credential issuer FILE`, `chorus credential issue --issuer FILE
// --name NAME FILE` and `chorus credential show FILE`. Printing and exit
// codes only: keys, files and checks live in node/control/credentials.h.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "node/cli/cli_commands.h"
#include "node/cli/cli_common.h"
#include "node/control/credentials.h"

namespace chorus::node {
namespace {

// A secret file is never overwritten by accident: a lost issuer key cannot
// be made again, and a lost credential locks its node out.
Status RefuseToOverwrite(const std::string& path, bool force) {
  if (force || !std::filesystem::exists(path)) return Status::Ok();
  return FailedPrecondition(path + " exists (--force replaces it)");
}

void RegisterIssuer(CLI::App& credential, CliContext& context) {
  struct Args {
    std::string file;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* issuer = credential.add_subcommand(
      "issuer", "Make a cluster's issuer key pair in FILE (keep it secret) and print its public key, the "
                "cluster.issuer every member sets");
  issuer->add_option("file", args->file, "Where to write the issuer's keys (mode 0600)")->required();
  issuer->add_flag("--force", args->force, "Replace FILE if it exists");
  issuer->callback([args, &context] {
    Result<Issuer> made = Issuer::Generate();
    Status saved = made ? RefuseToOverwrite(args->file, args->force) : made.error();
    if (saved.ok()) saved = made->Save(args->file);
    if (!saved.ok()) {
      context.exit_code = CommandError("credential issuer", saved.message(), kExitFailure);
      return;
    }
    std::printf("wrote %s (secret: it makes credentials)\n[cluster]\nissuer = \"%s\"\n", args->file.c_str(),
                KeyHex(made->public_key()).c_str());
    context.exit_code = kExitOk;
  });
}

void RegisterIssue(CLI::App& credential, CliContext& context) {
  struct Args {
    std::string issuer;
    std::string name;
    std::string file;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* issue = credential.add_subcommand(
      "issue", "Make a node's credential for NAME in FILE, signed by the issuer's key; the node sets "
               "cluster.credential to it and takes NAME as its name");
  issue->add_option("--issuer", args->issuer, "The issuer's file (chorus credential issuer)")->required();
  issue->add_option("--name", args->name, "The node's name (run.node_name)")->required();
  issue->add_option("file", args->file, "Where to write the credential (mode 0600; give it to that node only)")
      ->required();
  issue->add_flag("--force", args->force, "Replace FILE if it exists");
  issue->callback([args, &context] {
    Result<Issuer> issuer = Issuer::Load(args->issuer);
    Result<NodeCredentials> made = issuer ? issuer->Issue(args->name) : Err(issuer.error());
    Status saved = made ? RefuseToOverwrite(args->file, args->force) : made.error();
    if (saved.ok()) saved = made->Save(args->file);
    if (!saved.ok()) {
      context.exit_code = CommandError("credential issue", saved.message(), kExitFailure);
      return;
    }
    std::printf("wrote %s: a credential for '%s' (secret: whoever holds it can join as '%s')\n[cluster]\n"
                "issuer = \"%s\"\ncredential = \"%s\"\n",
                args->file.c_str(), args->name.c_str(), args->name.c_str(), KeyHex(made->issuer()).c_str(),
                args->file.c_str());
    context.exit_code = kExitOk;
  });
}

void RegisterShow(CLI::App& credential, CliContext& context) {
  auto file = std::make_shared<std::string>();
  CLI::App* show = credential.add_subcommand(
      "show", "Check a credential file (its keys and its issuer's signature) and print its name, issuer and public "
              "key, never its secret key");
  show->add_option("file", *file, "A credential file (chorus credential issue)")->required();
  show->callback([file, &context] {
    // Its own issuer and name: this checks the file, not whether a cluster accepts it.
    Result<std::shared_ptr<const NodeCredentials>> loaded = NodeCredentials::Load(*file, std::nullopt, "");
    if (!loaded) {
      context.exit_code = CommandError("credential show", loaded.error().message(), kExitFailure);
      return;
    }
    const NodeCredentials& c = **loaded;
    std::printf("name = \"%s\"\nissuer = \"%s\"\npublic_key = \"%s\"\n", c.credential().name.c_str(),
                KeyHex(c.issuer()).c_str(), KeyHex(c.credential().node_key).c_str());
    context.exit_code = kExitOk;
  });
}

}  // namespace

void RegisterCredentialCommands(CLI::App& app, CliContext& context) {
  CLI::App* credential = app.add_subcommand(
      "credential", "Per-node credentials: with cluster.issuer set, a node joins only under the name of a "
                    "credential that issuer signed (docs/clusters-and-failures.md, \"Credentials\")");
  credential->require_subcommand(1);
  RegisterIssuer(*credential, context);
  RegisterIssue(*credential, context);
  RegisterShow(*credential, context);
}

}  // namespace chorus::node
