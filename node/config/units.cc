// Parsing of bandwidths and durations with units (see units.h).
#include "node/config/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace chorus::node {
namespace {

struct Unit {
  std::string_view name;
  double factor;  // to bytes/s or to seconds
};

// Bandwidth units, to bytes per second.
constexpr Unit kBandwidthUnits[] = {
    {"bit", 1.0 / 8},       {"kbit", 1e3 / 8},          {"mbit", 1e6 / 8},
    {"gbit", 1e9 / 8},      {"tbit", 1e12 / 8},         {"kibit", 1024.0 / 8},
    {"mibit", 1048576.0 / 8}, {"gibit", 1073741824.0 / 8}, {"bps", 1.0},
    {"kbps", 1e3},          {"mbps", 1e6},              {"gbps", 1e9},
    {"tbps", 1e12},
};
constexpr std::string_view kBandwidthHelp =
    "bit, kbit, mbit, gbit, tbit (bits/s), kibit, mibit, gibit, or bps, kbps, mbps, gbps, tbps "
    "(bytes/s, as in tc), e.g. \"10gbit\"";

// Duration units, to seconds.
constexpr Unit kDurationUnits[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1.0},
};
constexpr std::string_view kDurationHelp = "ns, us, ms, s, e.g. \"50us\" or \"1ms\"";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5mbit" into 12.5 and "mbit"; `what` names the quantity in errors.
Result<std::pair<double, std::string>> SplitNumber(std::string_view text, std::string_view what) {
  const std::string_view s = TrimSpace(text);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) {
    return Err(InvalidArgument(std::string(what) + " \"" + std::string(text) +
                               "\" does not start with a number"));
  }
  if (!std::isfinite(value)) {
    return Err(InvalidArgument(std::string(what) + " \"" + std::string(text) + "\" is not finite"));
  }
  const std::string unit = Lower(TrimSpace(std::string_view(end, s.data() + s.size() - end)));
  return std::make_pair(value, unit);
}

Result<double> Parse(std::string_view text, std::string_view what, std::span<const Unit> units,
                     std::string_view help, bool allow_per_second) {
  CHORUS_ASSIGN_OR_RETURN(auto parts, SplitNumber(text, what));
  auto [value, unit] = parts;
  if (allow_per_second && unit.size() > 2 && unit.ends_with("/s")) unit.resize(unit.size() - 2);
  if (unit.empty()) {
    if (value == 0 && !allow_per_second) return 0.0;
    return Err(InvalidArgument(std::string(what) + " \"" + std::string(text) +
                               "\" has no unit; use " + std::string(help)));
  }
  for (const Unit& u : units) {
    if (unit == u.name) return value * u.factor;
  }
  return Err(InvalidArgument(std::string(what) + " \"" + std::string(text) + "\": unknown unit \"" +
                             unit + "\"; use " + std::string(help)));
}

}  // namespace

Result<double> ParseBandwidth(std::string_view text) {
  CHORUS_ASSIGN_OR_RETURN(double v, Parse(text, "bandwidth", kBandwidthUnits, kBandwidthHelp,
                                          /*allow_per_second=*/true));
  if (!(v > 0)) {
    return Err(InvalidArgument("bandwidth \"" + std::string(text) + "\" must be positive"));
  }
  return v;
}

Result<double> ParseDuration(std::string_view text) {
  CHORUS_ASSIGN_OR_RETURN(double v, Parse(text, "duration", kDurationUnits, kDurationHelp,
                                          /*allow_per_second=*/false));
  if (v < 0) {
    return Err(InvalidArgument("duration \"" + std::string(text) + "\" must not be negative"));
  }
  return v;
}

Result<LinkText> ParseLinkText(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  if (words.empty() || words.size() > 2) {
    return Err(InvalidArgument("link \"" + std::string(text) +
                               "\": expected \"<bandwidth> [<latency>]\", e.g. \"100mbit 50ms\""));
  }
  LinkText link;
  CHORUS_ASSIGN_OR_RETURN(link.bytes_per_s, ParseBandwidth(words[0]));
  if (words.size() == 2) {
    CHORUS_ASSIGN_OR_RETURN(link.latency_s, ParseDuration(words[1]));
  }
  return link;
}

}  // namespace chorus::node
