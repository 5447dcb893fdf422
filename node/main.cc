// chorus: the command-line entry point. Wires subcommands to node/ code.
#include "node/cli.h"

int main(int argc, char** argv) { return chorus::node::RunCli(argc, argv); }
