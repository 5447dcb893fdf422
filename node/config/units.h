// Units on the command line and in configs: link bandwidths ("10gbit",
// "100mbit", "125mbps") and durations ("50us", "1ms", "2.5s").
//
// Bandwidth units follow tc(8): "bit", "kbit", "mbit", "gbit", "tbit" are bits
// per second (SI, x1000); "kibit", "mibit", "gibit" are x1024; "bps", "kbps",
// "mbps", "gbps" are BYTES per second (as in tc). An optional "/s" suffix is
// accepted ("10gbit/s"). Durations: "ns", "us" (or "µs"), "ms", "s"; a bare
// "0" is zero. Units are case-insensitive; a number without a unit is an error
// (is "100" bits or bytes?).
//
// Must not: guess. Every error names the text and the accepted units.
#pragma once

#include <string_view>

#include "common/status.h"

namespace chorus::node {

// Bytes per second of a bandwidth such as "10gbit" (= 1.25e9). Must be > 0.
[[nodiscard]] Result<double> ParseBandwidth(std::string_view text);

// Seconds of a duration such as "50us" (= 5e-5). Must be >= 0.
[[nodiscard]] Result<double> ParseDuration(std::string_view text);

// A link as "<bandwidth> [<latency>]" ("100mbit 50ms"; words apart by spaces
// or tabs): bytes per second and one-way seconds (0 when not given).
struct LinkText {
  double bytes_per_s = 0.0;
  double latency_s = 0.0;
};
[[nodiscard]] Result<LinkText> ParseLinkText(std::string_view text);

}  // namespace chorus::node
