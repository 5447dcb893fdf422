// node/cli/: the `chorus` subcommands (CLI11): each parses its flags and calls one folder.
//
// Command-line interface of the `chorus` binary (CLI11).
#pragma once

namespace chorus::node {

// Parses argv and runs the chosen subcommand; returns the process exit code.
int RunCli(int argc, char** argv);

}  // namespace chorus::node
