// Printing a Config back as TOML, the settings members must share, and the
// list of key paths (see config_describe.h).
#include "node/config/config_describe.h"

#include <algorithm>
#include <cstdio>

#include "node/config/config_fields.h"

namespace chorus::node {

std::string DescribeConfig(const Config& config) {
  std::string out = "# Resolved settings of " + config.source + " (every key, defaults included).\n";
  for (std::string_view section : ConfigSections()) {
    std::vector<std::pair<std::string, std::string>> lines;  // "key = value", help
    size_t width = 0;
    for (const FieldSpec& f : ConfigFields()) {
      if (f.section != section) continue;
      lines.emplace_back(std::string(f.key) + " = " + FormatValue(f, config), f.Help());
      width = std::max(width, lines.back().first.size());
    }
    out += "\n[" + std::string(section) + "]\n";
    for (const auto& [line, help] : lines) {
      out += line + std::string(width - line.size() + 2, ' ') + "# " + std::string(help) + "\n";
    }
  }
  return out;
}

// Outside [exchange] and [topology], the settings that fix what a step
// computes and in what order the data comes: the model and its buffers, the
// optimizer and its schedule (epochs and the training set's size set the
// number of steps), the seed (initial weights, and the shuffle that splits the
// data between the nodes). Per node: batch size, device, threads, slowdown,
// evaluation, logging and checkpoints. And where the members meet to admit
// joiners (cluster.admit_every_steps): a barrier every member must reach.
constexpr std::string_view kSharedTrainingSettings[] = {
    "train.model",        "train.precision",     "train.optimizer",      "train.epochs",
    "train.base_lr",      "train.momentum",      "train.weight_decay",   "train.lars_eta",
    "train.warmup_epochs", "train.lr_decay_power", "train.seed",         "data.train_limit",
    "data.augment_flip",  "data.augment_shift",
    "train.stop",         "train.balance",       "train.balance_every_steps", "cluster.admit_every_steps",
    "fabric.authenticate", "fabric.encrypt", "cluster.issuer", "cluster.revoked", "cluster.expel_quorum",
    "fabric.rxm_eager_kib"};

std::string SharedSettingsText(const Config& config) {
  std::string out;
  for (const FieldSpec& f : ConfigFields()) {
    if (f.section == "topology" || f.section == "exchange" || f.section.starts_with("exchange.") ||
        std::ranges::find(kSharedTrainingSettings, f.Path()) != std::end(kSharedTrainingSettings)) {
      out += f.Path() + " = " + FormatValue(f, config) + "\n";
    }
  }
  return out;
}

std::vector<std::string> ConfigKeyPaths() {
  std::vector<std::string> paths;
  for (const FieldSpec& f : ConfigFields()) paths.push_back(f.Path());
  return paths;
}

std::string TomlQuote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace chorus::node
