// The [compare] table of a comparison file (`chorus compare FILE`).
//
// A comparison file is a node config (every node of every method reads it;
// node parsing skips [compare]) plus this table, which says what to run:
//
//   [compare]
//   name = "compare-default"            # runs/<name>/
//   nodes = 4                           # nodes per method
//   target_accuracy = 0.85              # "time to target" in the table
//   methods = ["ring-allreduce", "dpsgd-ring", ...]   # built-in names (BuiltinMethods)
//   single_node_baseline = true         # measure S (one node alone) for e = T / (S x N)
//   link = { bandwidth = "1gbit", latency = "1ms" }   # optional: emulated links
//   straggler = { node = 3, slowdown = 2.0 }          # optional: node 3 is 3x slower
//   speeds = [1, 1, 0.5, 0.33]          # optional, instead of straggler: node i's compute speed
//                                       # in (0, 1] (train.slowdown = 1/speed - 1), one per node
//   batch_sizes = [32, 64, 64, 128]     # optional: node i's train.batch_size, one per node
//   late_joiner = { node = 3, after_s = 5.0 }         # optional: node 3 starts 5 s late and joins
//   sites = [[0, 1, 2, 3], [4, 5, 6, 7]]                # optional, with link: the nodes of each site
//   site_link = "100mbit 50ms"                        # the link between sites: bandwidth [latency]
//
//   [[compare.method]]                  # optional: methods of your own
//   name = "choco-topk"
//   label = "CHOCO top-1%"
//   family = "gossip"                   # allreduce | gossip | local-sgd | low-communication
//   set = ["exchange.kind=gossip", "exchange.protocol=choco", "exchange.compression.codec=top-k"]
//
// Must not: run anything. Errors name the file, line and key like node configs.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace chorus::node {

// One method of the matrix: the node settings that make it (as --set overrides).
struct CompareMethod {
  std::string name;    // folder name under runs/<compare>/, [a-z0-9-]
  std::string label;   // for people: "ring all-reduce"
  std::string family;  // allreduce | gossip | local-sgd | low-communication
  std::vector<std::string> overrides;  // "section.key=value"
};

// Emulated links between the nodes (network namespaces + veth + tc).
struct LinkSpec {
  bool enabled = false;
  std::string bandwidth;  // as written, e.g. "1gbit"
  std::string latency;    // as written, e.g. "1ms" ("" = none)
  double bytes_per_s = 0.0;
  double latency_s = 0.0;
};

struct CompareConfig {
  std::string source;  // the file
  std::string name = "compare";
  int nodes = 4;
  double target_accuracy = 0.85;
  bool single_node_baseline = true;
  std::vector<CompareMethod> methods;
  LinkSpec link;
  // A straggler for experiments: node `slow_node` sleeps `slowdown` times each
  // step's compute (train.slowdown; 2.0 makes it 3x slower). -1: none.
  int slow_node = -1;
  double slowdown = 0.0;
  // Per-node profiles; empty: none, else `nodes` entries. speeds[i] in (0, 1]:
  // node i's compute speed relative to a full node (it runs with
  // train.slowdown = 1/speeds[i] - 1). batch_sizes[i] >= 1: node i's
  // train.batch_size. A straggler is the speeds profile with one node slow:
  // the file gives one or the other.
  std::vector<double> speeds;
  std::vector<int> batch_sizes;
  // A late joiner: node `late_node` (>= 1) starts `late_after_s` seconds after
  // the others and joins their running cluster (launch --join-after). -1: none.
  int late_node = -1;
  double late_after_s = 0.0;
  // Sites: the nodes of each site (every node in one), joined by site_link;
  // `link` is then each node's link inside its site. Empty: one site.
  std::vector<std::vector<int>> sites;
  LinkSpec site_link;
};

// Node i's site (0-based, in the order of `sites`); empty without sites.
std::vector<int> SiteOfNode(const CompareConfig& config);

// The keys of the [compare] table, in the order the docs give them
// (`method` is the [[compare.method]] array); any other key is an error.
const std::vector<std::string>& CompareKeys();

// The methods `methods = [...]` may name, the default matrix first
// (docs/cli-and-configs.md lists them; a test holds it to this list).
const std::vector<CompareMethod>& BuiltinMethods();
// The default matrix: the first nine of BuiltinMethods(), and after the
// plain one-peer D-PSGD its mean-norm recipe (dpsgd-qgm-mean-norm-one-peer-exp).
std::vector<std::string> DefaultMethodNames();
// The method called `name`: the one in `defined` if there is one, else the
// built-in one; nullptr when neither has it.
const CompareMethod* FindMethod(const std::vector<CompareMethod>& defined, std::string_view name);

// The settings single nodes get on top of every node's (chorus launch
// --node-set): the straggler's or the speeds' train.slowdown and the
// batch_sizes' train.batch_size, for the full cluster of `config.nodes`.
std::vector<std::pair<int, std::string>> ProfileNodeSettings(const CompareConfig& config);

// The global batch of the full cluster: the batch_sizes summed, else
// `batch_size` (every node's) times the nodes.
int CompareGlobalBatch(const CompareConfig& config, int batch_size);

// Reads the [compare] table of `path` (absent table: all defaults).
[[nodiscard]] Result<CompareConfig> ParseCompareFile(const std::string& path);

}  // namespace chorus::node
