// Fault injection for tests (docs/testing.md): the NAME@STEP form of the
// CHORUS_FAULT_* variables that name a member and the step a fault starts at.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

struct NameAtStep {
  std::string name;
  int64_t step = 0;
};

// "node1@5" -> {node1, 5}; nullopt for a null, empty or malformed spec (no
// '@', or nothing before it).
inline std::optional<NameAtStep> ParseNameAtStep(const char* spec) {
  if (spec == nullptr) return std::nullopt;
  const std::string_view text(spec);
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  return NameAtStep{std::string(text.substr(0, at)), std::atoll(spec + at + 1)};
}

}  // namespace chorus
