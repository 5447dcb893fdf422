// Names of enum values, listed once beside each enum: the table that parsing,
// printing, checking and help text all read, so that the spellings cannot
// drift apart. Header-only, std only.
//
//   enum class Precision { kFp16, kFp32 };
//   inline constexpr EnumName<Precision> kPrecisionNames[] = {
//       {Precision::kFp16, "fp16"}, {Precision::kFp32, "fp32"}};
//   NameOf(kPrecisionNames, Precision::kFp32)   // "fp32"
//   FromName(kPrecisionNames, "fp16")           // Precision::kFp16
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value` ("?" when the table lacks it).
template <typename E, size_t N>
constexpr std::string_view NameOf(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The value named `name`, or nothing.
template <typename E, size_t N>
constexpr std::optional<E> FromName(const EnumName<E> (&names)[N], std::string_view name) {
  for (const EnumName<E>& n : names) {
    if (n.name == name) return n.value;
  }
  return std::nullopt;
}

// Every name, in table order.
template <typename E, size_t N>
std::vector<std::string_view> NamesOf(const EnumName<E> (&names)[N]) {
  std::vector<std::string_view> out;
  for (const EnumName<E>& n : names) out.push_back(n.name);
  return out;
}

// The names joined, e.g. "fp16 | fp32" with " | ", or "\"fp16\", \"fp32\"" quoted.
inline std::string JoinNames(const std::vector<std::string_view>& names, std::string_view separator,
                             bool quoted = false) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += separator;
    if (quoted) out += '"';
    out += names[i];
    if (quoted) out += '"';
  }
  return out;
}

// The same for any names, ", " between them by default ("node1, node3").
inline std::string JoinNames(const std::vector<std::string>& names, std::string_view separator = ", ") {
  return JoinNames(std::vector<std::string_view>(names.begin(), names.end()), separator);
}

}  // namespace chorus
