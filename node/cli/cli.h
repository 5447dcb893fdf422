// node/cli/: the `chorus` subcommands (CLI11): each parses its flags and calls one folder.
//
// Command-line interface of the `chorus` binary (CLI11).
#pragma once

#include <string>
#include <vector>

namespace chorus::node {

// Parses argv and runs the chosen subcommand; returns the process exit code.
int RunCli(int argc, char** argv);

// The flags of one subcommand, as its --help lists them.
struct CommandFlags {
  std::string command;             // the words after `chorus`: "launch", "bench p2p"
  std::vector<std::string> flags;  // every name of every option, "-n" and "--nodes"; no positionals, no --help
};

// Every subcommand with at least one flag, in registration order, from the
// same app RunCli parses with (nothing runs): what the docs' flag tables list.
std::vector<CommandFlags> DescribeCommandFlags();

}  // namespace chorus::node
