// Safetensors writer and validating reader. See safetensors.h for the format. nlohmann/json builds and parses the
// header; its exceptions are caught here and never leave this file.
//
// Writer layout (as the reference Rust implementation): "__metadata__" first when
// there is any metadata, then the tensors in data order; tensors are laid out in
// decreasing dtype size (stable, so callers' order is kept within one size), which
// keeps every tensor aligned to its element size because the header is padded to
// a multiple of 8. The reader accepts any order but, like the reference, requires
// the tensors to tile the data area exactly: no overlap, no gap, nothing after.
// This file must not know about models or checkpoints: it moves named byte arrays.
#include "trainer/safetensors.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace chorus::trainer {
namespace {

using Json = nlohmann::ordered_json;

// The reference implementation's limit on the JSON header (100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  const char* name;
  int size;
};
constexpr std::array<DtypeInfo, 15> kDtypes = {{
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4}, {"U32", 4}, {"F32", 4},
    {"I64", 8}, {"U64", 8}, {"F64", 8},
}};

// Bytes per element of `dtype`, or 0 when it is not a safetensors dtype.
int DtypeSize(const std::string& dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (dtype == d.name) return d.size;
  }
  return 0;
}

// prod(shape) * elem_size, or nullopt on a negative dimension or overflow.
std::optional<uint64_t> ByteSize(const std::vector<int64_t>& shape, int elem_size) {
  uint64_t n = static_cast<uint64_t>(elem_size);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return std::nullopt;
    n *= ud;
  }
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void PutLittleEndian64(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetLittleEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

Result<std::vector<uint8_t>> Serialize(const std::string& path, std::span<const NamedTensor> tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey) {
      return Err(InvalidArgument(path + ": tensor name '" + t.name + "' is not allowed"));
    }
    if (!names.insert(t.name).second) {
      return Err(InvalidArgument(path + ": tensor '" + t.name + "' appears twice"));
    }
    const int elem = DtypeSize(t.dtype);
    if (elem == 0) {
      return Err(InvalidArgument(path + ": tensor '" + t.name + "': unknown dtype '" + t.dtype + "'"));
    }
    const std::optional<uint64_t> bytes = ByteSize(t.shape, elem);
    if (!bytes || *bytes != t.bytes.size()) {
      return Err(InvalidArgument(path + ": tensor '" + t.name + "': shape " + ShapeToString(t.shape) +
                                 " of " + t.dtype + " does not match its " +
                                 std::to_string(t.bytes.size()) + " bytes"));
    }
  }

  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return DtypeSize(tensors[a].dtype) > DtypeSize(tensors[b].dtype);
  });

  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const NamedTensor& t = tensors[i];
    Json entry = Json::object();
    entry["dtype"] = t.dtype;
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.bytes.size()};
    header[t.name] = std::move(entry);
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();  // compact, strict UTF-8
  } catch (const Json::exception& e) {
    return Err(InvalidArgument(path + ": cannot encode the header (names and metadata must be UTF-8): " +
                               e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out(8 + text.size() + offset);
  PutLittleEndian64(text.size(), out.data());
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (size_t i : order) {
    const std::vector<uint8_t>& b = tensors[i].bytes;
    if (!b.empty()) std::memcpy(data, b.data(), b.size());
    data += b.size();
  }
  return out;
}


// Reads a JSON array of non-negative integers; false if it is anything else.
bool ReadUnsignedArray(const Json& j, std::vector<uint64_t>* out) {
  if (!j.is_array()) return false;
  for (const Json& v : j) {
    if (!v.is_number_unsigned()) return false;
    out->push_back(v.get<uint64_t>());
  }
  return true;
}

struct Entry {
  NamedTensor tensor;
  uint64_t begin = 0, end = 0;
};

Result<Entry> ParseTensorEntry(const std::string& path, const std::string& name, const Json& j,
                               uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!j.is_object()) return Err(DataLoss(where + ": header entry is not a JSON object"));
  for (const auto& [key, value] : j.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Err(DataLoss(where + ": unknown field '" + key + "'"));
    }
  }
  if (!j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets")) {
    return Err(DataLoss(where + ": needs dtype, shape and data_offsets"));
  }
  Entry e;
  e.tensor.name = name;
  if (!j["dtype"].is_string()) return Err(DataLoss(where + ": dtype is not a string"));
  e.tensor.dtype = j["dtype"].get<std::string>();
  const int elem = DtypeSize(e.tensor.dtype);
  if (elem == 0) return Err(DataLoss(where + ": unknown dtype '" + e.tensor.dtype + "'"));
  std::vector<uint64_t> shape;
  if (!ReadUnsignedArray(j["shape"], &shape)) {
    return Err(DataLoss(where + ": shape is not an array of non-negative integers"));
  }
  for (uint64_t d : shape) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Err(DataLoss(where + ": dimension " + std::to_string(d) + " is too large"));
    }
    e.tensor.shape.push_back(static_cast<int64_t>(d));
  }
  std::vector<uint64_t> offsets;
  if (!ReadUnsignedArray(j["data_offsets"], &offsets) || offsets.size() != 2) {
    return Err(DataLoss(where + ": data_offsets is not [begin, end] of non-negative integers"));
  }
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.begin > e.end) {
    return Err(DataLoss(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + "] end before they begin"));
  }
  if (e.end > data_size) {
    return Err(DataLoss(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + "] run past the " + std::to_string(data_size) +
                        " data bytes in the file"));
  }
  const std::optional<uint64_t> bytes = ByteSize(e.tensor.shape, elem);
  if (!bytes || *bytes != e.end - e.begin) {
    return Err(DataLoss(where + ": shape " + ShapeToString(e.tensor.shape) + " of " + e.tensor.dtype +
                        " needs " + (bytes ? std::to_string(*bytes) : std::string("too many")) +
                        " bytes but data_offsets span " + std::to_string(e.end - e.begin)));
  }
  return e;
}

}  // namespace

const NamedTensor* SafetensorsFile::Find(const std::string& name) const {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status WriteSafetensors(const std::string& path, std::span<const NamedTensor> tensors,
                        const std::map<std::string, std::string>& metadata) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Serialize(path, tensors, metadata));
  return WriteFileAtomic(path, bytes);
}

Result<std::vector<uint8_t>> EncodeSafetensors(const std::string& what, std::span<const NamedTensor> tensors,
                                               const std::map<std::string, std::string>& metadata) {
  return Serialize(what, tensors, metadata);
}

Result<SafetensorsFile> ReadSafetensors(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> file, ReadFileBytes(path));
  return DecodeSafetensors(file, path);
}

Result<SafetensorsFile> DecodeSafetensors(std::span<const uint8_t> file, const std::string& path) {
  if (file.size() < 8) {
    return Err(DataLoss(path + ": truncated: " + std::to_string(file.size()) +
                        " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t header_len = GetLittleEndian64(file.data());
  if (header_len > kMaxHeaderBytes) {
    return Err(DataLoss(path + ": header length " + std::to_string(header_len) + " is over the " +
                        std::to_string(kMaxHeaderBytes) + "-byte limit"));
  }
  if (header_len > file.size() - 8) {
    return Err(DataLoss(path + ": header length " + std::to_string(header_len) +
                        " runs past the end of the file (" + std::to_string(file.size()) + " bytes)"));
  }
  if (header_len == 0 || file[8] != '{') {
    return Err(DataLoss(path + ": header does not start with '{'"));
  }
  const char* header_begin = reinterpret_cast<const char*>(file.data() + 8);
  Json header;
  try {
    header = Json::parse(header_begin, header_begin + header_len);
  } catch (const Json::exception& e) {
    return Err(DataLoss(path + ": header is not valid JSON: " + e.what()));
  }
  if (!header.is_object()) return Err(DataLoss(path + ": header is not a JSON object"));

  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = file.size() - data_begin;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) return Err(DataLoss(path + ": __metadata__ is not a JSON object"));
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) {
          return Err(DataLoss(path + ": __metadata__ value for '" + mkey + "' is not a string"));
        }
        out.metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    CHORUS_ASSIGN_OR_RETURN(Entry e, ParseTensorEntry(path, key, value, data_size));
    entries.push_back(std::move(e));
  }

  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t next = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < next) {
      return Err(DataLoss(path + ": tensor '" + e.tensor.name + "' [" + std::to_string(e.begin) + ", " +
                          std::to_string(e.end) + ") overlaps tensor '" + entries[i - 1].tensor.name +
                          "' ending at " + std::to_string(next)));
    }
    if (e.begin > next) {
      return Err(DataLoss(path + ": " + std::to_string(e.begin - next) + " bytes before tensor '" +
                          e.tensor.name + "' at data offset " + std::to_string(next) +
                          " belong to no tensor"));
    }
    next = e.end;
  }
  if (next != data_size) {
    return Err(DataLoss(path + ": " + std::to_string(data_size - next) +
                        " bytes after the last tensor belong to no tensor"));
  }

  out.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    const uint8_t* p = file.data() + data_begin + e.begin;
    e.tensor.bytes.assign(p, p + (e.end - e.begin));
    out.tensors.push_back(std::move(e.tensor));
  }
  return out;
}

}  // namespace chorus::trainer
