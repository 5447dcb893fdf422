// Helpers over the parameter table (see parameter.h). No storage, no I/O.
#include "trainer/parameter.h"

namespace chorus::trainer {

std::string_view ParamKindName(ParamKind kind) {
  switch (kind) {
    case ParamKind::kWeight: return "weight";
    case ParamKind::kBias: return "bias";
    case ParamKind::kBnScale: return "bn-scale";
    case ParamKind::kBnShift: return "bn-shift";
  }
  return "unknown";
}

int FindParameter(std::span<const ParameterInfo> table, std::string_view name) {
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

size_t ShapeElements(std::span<const int64_t> shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace chorus::trainer
