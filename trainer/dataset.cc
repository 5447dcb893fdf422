// IDX / Fashion-MNIST reading and the synthetic data set. See dataset.h.
//
// A file is gunzipped with zlib's inflate as far as it is needed (so that a
// corrupt or truncated stream and bytes after it are all caught, which gzread
// would hide),
// parsed as IDX, checked, and normalised through a 256-entry lookup table. No
// shuffling or batching here.
#include "trainer/dataset.h"

#include "common/files.h"
#include "common/posix_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

namespace chorus::trainer {
namespace {

// Largest decompressed IDX file accepted; Fashion-MNIST train images are 47 MB.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;
constexpr uint8_t kIdxTypeUnsignedByte = 0x08;
constexpr int kImageRows = 28;
constexpr int kImageCols = 28;

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}


// A file's compressed bytes, read by offset in chunks as inflate takes them:
// a prefix inflates only as much of the file as it needs.
class CompressedFile {
 public:
  static Result<CompressedFile> Open(const std::string& path) {
    CompressedFile file(OwnedFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), path);
    if (file.fd_.get() < 0) return Err(ErrnoStatus(errno, "open " + path));
    struct stat st {};
    if (::fstat(file.fd_.get(), &st) != 0) return Err(ErrnoStatus(errno, "stat " + path));
    file.size_ = static_cast<uint64_t>(std::max<off_t>(st.st_size, 0));
    return file;
  }

  uint64_t size() const { return size_; }
  // Up to `n` bytes at `offset` into `out`; fewer only at the end of the file.
  Result<size_t> ReadAt(uint64_t offset, uint8_t* out, size_t n) const {
    return ReadAtUpTo(fd_.get(), offset, {out, n}, path_);
  }

 private:
  CompressedFile(OwnedFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  OwnedFd fd_;
  std::string path_;
  uint64_t size_ = 0;
};

bool IsGzip(const uint8_t* data, size_t n) { return n >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

// Gunzip's first output size: ISIZE (the last 4 bytes, the uncompressed size
// mod 2^32 of the last member) is a good guess, capped by deflate's best
// ratio (about 1032:1) so that a damaged trailer cannot make us allocate a
// gigabyte up front, and by `stop_at`.
Result<uint64_t> FirstOutputSize(const CompressedFile& file, uint64_t stop_at) {
  uint64_t guess = file.size() * 2;
  uint8_t trailer[4];
  if (file.size() >= 4) {
    CHORUS_ASSIGN_OR_RETURN(size_t got, file.ReadAt(file.size() - 4, trailer, 4));
    if (got == 4) {
      guess = uint64_t{trailer[0]} | uint64_t{trailer[1]} << 8 | uint64_t{trailer[2]} << 16 |
              uint64_t{trailer[3]} << 24;
    }
  }
  guess = std::min<uint64_t>(guess, file.size() * 1032);
  if (stop_at > 0) guess = std::min(guess, stop_at);
  return std::min<uint64_t>(std::max<uint64_t>(guess, 4096) + 1, kMaxIdxBytes + 1);
}

// The error of an inflate that returned `ret` (neither progress nor the end
// of a member) with `consumed` compressed bytes taken.
Status InflateFailure(int ret, const z_stream& zs, uint64_t consumed, uint64_t file_size, const std::string& path) {
  if (ret == Z_BUF_ERROR) {
    return DataLoss(path + ": gzip stream is truncated (input ended after " + std::to_string(file_size) +
                    " compressed bytes)");
  }
  if (ret == Z_MEM_ERROR) return ResourceExhausted(path + ": out of memory while inflating");
  return DataLoss(path + ": corrupt gzip stream near compressed offset " + std::to_string(consumed) + ": " +
                  (zs.msg ? zs.msg : "inflate error"));
}

// Inflates every gzip member of `file`; anything after the last member that is
// not another gzip member is an error, as is a stream that ends early. With
// `stop_at` > 0, stops once that many bytes are out (fewer if the stream
// holds fewer) and returns them: the rest is neither read, inflated nor
// checked.
Result<std::vector<uint8_t>> Gunzip(const CompressedFile& file, const std::string& path, uint64_t stop_at = 0) {
  CHORUS_ASSIGN_OR_RETURN(uint64_t first_size, FirstOutputSize(file, stop_at));
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {  // 16 + : gzip wrapper only
    return Err(Internal(path + ": inflateInit2 failed"));
  }
  std::vector<uint8_t> out(first_size);
  std::vector<uint8_t> in(size_t{1} << 18);
  uint64_t read = 0;  // compressed bytes read into `in` so far; read - zs.avail_in are consumed
  // Moves what inflate has not taken to the front of `in` and reads more after it.
  auto fill = [&]() -> Status {
    if (zs.avail_in > 0) std::memmove(in.data(), zs.next_in, zs.avail_in);
    CHORUS_ASSIGN_OR_RETURN(size_t got, file.ReadAt(read, in.data() + zs.avail_in, in.size() - zs.avail_in));
    read += got;
    zs.next_in = in.data();
    zs.avail_in += static_cast<uInt>(got);
    return Status::Ok();
  };
  size_t out_pos = 0;
  Status status;
  for (;;) {
    if (out_pos == out.size()) {
      if (out.size() > kMaxIdxBytes) {
        status = ResourceExhausted(path + ": decompresses to more than " +
                                   std::to_string(kMaxIdxBytes) + " bytes");
        break;
      }
      out.resize(std::min<uint64_t>(out.size() * 2, kMaxIdxBytes + 1));
    }
    if (zs.avail_in == 0 && read < file.size()) {
      if (status = fill(); !status.ok()) break;
    }
    const size_t out_chunk = std::min<size_t>(out.size() - out_pos, std::numeric_limits<uInt>::max());
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    out_pos += out_chunk - zs.avail_out;
    if (stop_at > 0 && out_pos >= stop_at && (ret == Z_OK || ret == Z_STREAM_END || ret == Z_BUF_ERROR)) {
      out_pos = stop_at;
      break;
    }
    if (ret == Z_STREAM_END) {
      if (zs.avail_in < 2 && read < file.size()) {
        if (status = fill(); !status.ok()) break;
      }
      const uint64_t at = read - zs.avail_in;
      if (at == file.size()) break;
      if (IsGzip(zs.next_in, zs.avail_in)) {
        inflateReset(&zs);  // another gzip member follows
        continue;
      }
      status = DataLoss(path + ": " + std::to_string(file.size() - at) +
                        " unexpected bytes after the end of the gzip stream (at offset " + std::to_string(at) +
                        ")");
      break;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && zs.avail_out == 0) continue;  // output full: grow
    if (ret == Z_BUF_ERROR && zs.avail_in == 0 && read < file.size()) continue;  // more input to read
    status = InflateFailure(ret, zs, read - zs.avail_in, file.size(), path);
    break;
  }
  inflateEnd(&zs);
  if (!status.ok()) return Err(std::move(status));
  out.resize(out_pos);
  return out;
}

uint32_t ReadBigEndian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// `max_records` > 0 and below the first dimension: only that many records
// are expected (a prefix of the file), and nothing after them is checked.
Result<IdxArray> ParseIdx(std::vector<uint8_t> raw, const std::string& path, uint32_t expected_magic,
                          uint32_t max_records) {
  if (raw.size() < 4) {
    return Err(DataLoss(path + ": truncated: " + std::to_string(raw.size()) +
                        " bytes, shorter than the 4-byte IDX magic"));
  }
  IdxArray idx;
  idx.magic = ReadBigEndian32(raw.data());
  if (idx.magic != expected_magic) {
    return Err(InvalidArgument(path + ": IDX magic is " + Hex32(idx.magic) + ", expected " +
                               Hex32(expected_magic) + " (unsigned bytes, " +
                               std::to_string(expected_magic & 0xff) + " dimensions)"));
  }
  const size_t ndims = idx.magic & 0xff;
  const size_t header_bytes = 4 + 4 * ndims;
  if (raw.size() < header_bytes) {
    return Err(DataLoss(path + ": truncated: " + std::to_string(raw.size()) +
                        " bytes, the IDX header needs " + std::to_string(header_bytes)));
  }
  uint64_t elements = 1;
  for (size_t d = 0; d < ndims; ++d) {
    const uint32_t dim = ReadBigEndian32(raw.data() + 4 + 4 * d);
    idx.dims.push_back(dim);
    elements *= dim;
    if (elements > kMaxIdxBytes) {
      return Err(InvalidArgument(path + ": IDX dimensions describe more than " +
                                 std::to_string(kMaxIdxBytes) + " elements"));
    }
  }
  const uint64_t data_bytes = raw.size() - header_bytes;
  idx.records = idx.dims[0];
  if (max_records > 0 && max_records < idx.dims[0]) {
    const uint64_t needed = elements / idx.dims[0] * max_records;
    if (data_bytes < needed) {
      return Err(DataLoss(path + ": truncated: the first " + std::to_string(max_records) + " records need " +
                          std::to_string(needed) + " data bytes, file has " + std::to_string(data_bytes)));
    }
    raw.resize(header_bytes + needed);
    raw.erase(raw.begin(), raw.begin() + static_cast<ptrdiff_t>(header_bytes));
    idx.bytes = std::move(raw);
    idx.records = max_records;
    return idx;
  }
  if (data_bytes < elements) {
    return Err(DataLoss(path + ": truncated: dimensions need " + std::to_string(elements) +
                        " data bytes, file has " + std::to_string(data_bytes)));
  }
  if (data_bytes > elements) {
    return Err(DataLoss(path + ": " + std::to_string(data_bytes - elements) +
                        " trailing bytes after the " + std::to_string(elements) +
                        " data bytes the dimensions describe"));
  }
  raw.erase(raw.begin(), raw.begin() + static_cast<ptrdiff_t>(header_bytes));
  idx.bytes = std::move(raw);
  return idx;
}

std::string DimsToString(const std::vector<uint32_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

// Uniform float in [-1, 1) from the top 24 bits of one 64-bit draw.
float UniformSigned(std::mt19937_64& rng) {
  return static_cast<float>(rng() >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace

Result<IdxArray> ReadIdxFile(const std::string& path, uint32_t expected_magic, uint32_t max_records) {
  if (((expected_magic >> 8) & 0xff) != kIdxTypeUnsignedByte || (expected_magic >> 16) != 0) {
    return Err(InvalidArgument(path + ": ReadIdxFile reads unsigned-byte IDX files only, asked for magic " +
                               Hex32(expected_magic)));
  }
  CHORUS_ASSIGN_OR_RETURN(CompressedFile compressed, CompressedFile::Open(path));
  uint8_t magic[2];
  CHORUS_ASSIGN_OR_RETURN(size_t magic_bytes, compressed.ReadAt(0, magic, 2));
  if (IsGzip(magic, magic_bytes)) {
    // A prefix: the header first (its dimensions give a record's size), then
    // the header and the records asked for. A header that does not parse is
    // inflated whole, for the error a whole read gives.
    uint64_t stop_at = 0;
    const size_t header_bytes = 4 + 4 * size_t{expected_magic & 0xff};
    if (max_records > 0) {
      CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> head, Gunzip(compressed, path, header_bytes));
      if (head.size() == header_bytes && ReadBigEndian32(head.data()) == expected_magic) {
        uint64_t record = 1;
        for (size_t d = 1; d < (expected_magic & 0xff); ++d) record *= ReadBigEndian32(head.data() + 4 + 4 * d);
        const uint64_t records = std::min<uint64_t>(max_records, ReadBigEndian32(head.data() + 4));
        if (record > 0 && record * records <= kMaxIdxBytes) stop_at = header_bytes + record * records;
      }
    }
    CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, Gunzip(compressed, path, stop_at));
    return ParseIdx(std::move(raw), path, expected_magic, max_records);
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> file, ReadFileBytes(path, kMaxIdxBytes));
  return ParseIdx(std::move(file), path, expected_magic, max_records);
}

Result<Dataset> LoadIdxImageDataset(const std::string& images_path, const std::string& labels_path,
                                    int expected_count, int limit, const std::string& name) {
  if (limit < 0) {
    return Err(InvalidArgument(name + ": limit must be >= 0 (0 = all), got " + std::to_string(limit)));
  }
  // Only the images used are inflated (the train set's are 47 MB, a fifth of
  // a second of every node's start); the labels are read whole and all checked.
  CHORUS_ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(images_path, kIdxImagesMagic, static_cast<uint32_t>(limit)));
  CHORUS_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(labels_path, kIdxLabelsMagic));
  if (images.dims[1] != kImageRows || images.dims[2] != kImageCols) {
    return Err(InvalidArgument(images_path + ": images are " + DimsToString(images.dims) +
                               ", expected [N, 28, 28]"));
  }
  const uint32_t count = images.dims[0];
  if (labels.dims[0] != count) {
    return Err(InvalidArgument(images_path + " holds " + std::to_string(count) + " images but " +
                               labels_path + " holds " + std::to_string(labels.dims[0]) + " labels"));
  }
  if (expected_count > 0 && count != static_cast<uint32_t>(expected_count)) {
    return Err(InvalidArgument(images_path + ": " + std::to_string(count) + " images, expected " +
                               std::to_string(expected_count) + " for " + name));
  }
  if (count > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return Err(InvalidArgument(images_path + ": too many images (" + std::to_string(count) + ")"));
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (labels.bytes[i] >= kNumClasses) {
      return Err(DataLoss(labels_path + ": label " + std::to_string(labels.bytes[i]) + " at index " +
                          std::to_string(i) + " is outside 0.." + std::to_string(kNumClasses - 1)));
    }
  }

  const int n = (limit == 0 || static_cast<uint32_t>(limit) > count) ? static_cast<int>(count) : limit;
  Dataset ds;
  ds.count = n;
  ds.channels = 1;
  ds.height = kImageRows;
  ds.width = kImageCols;
  std::array<float, 256> table;
  for (int v = 0; v < 256; ++v) {
    table[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }
  const size_t pixels = static_cast<size_t>(n) * kImageRows * kImageCols;
  ds.images.resize(pixels);
  const uint8_t* src = images.bytes.data();
  float* dst = ds.images.data();
  for (size_t i = 0; i < pixels; ++i) dst[i] = table[src[i]];
  ds.labels.assign(labels.bytes.begin(), labels.bytes.begin() + n);
  ds.description = name + ": " + std::to_string(n) + " of " + std::to_string(count) +
                   " images from " + images_path;
  return ds;
}

Result<Dataset> LoadFashionMnist(const std::string& dir, Split split, int limit) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  const std::string images_path = base + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = base + prefix + "-labels-idx1-ubyte.gz";
  const std::string name = std::string("Fashion-MNIST ") + (split == Split::kTrain ? "train" : "test");
  const int expected = split == Split::kTrain ? kFashionMnistTrainCount : kFashionMnistTestCount;
  Result<Dataset> ds = LoadIdxImageDataset(images_path, labels_path, expected, limit, name);
  if (!ds && ds.error().code() == StatusCode::kNotFound) {
    return Err(NotFound(ds.error().message() + "; Fashion-MNIST comes from the Debian package " +
                        kFashionMnistPackage + " (apt-get install " + kFashionMnistPackage +
                        "), which puts it in " + kFashionMnistDefaultDir));
  }
  return ds;
}

Dataset MakeSyntheticDataset(int count, uint64_t seed) {
  Dataset ds;
  ds.count = count < 0 ? 0 : count;
  const int64_t image_size = ds.ImageSize();
  std::mt19937_64 rng(seed);
  std::vector<float> prototypes(static_cast<size_t>(kNumClasses * image_size));
  for (float& p : prototypes) p = UniformSigned(rng);
  ds.images.resize(static_cast<size_t>(ds.count * image_size));
  ds.labels.resize(static_cast<size_t>(ds.count));
  for (int i = 0; i < ds.count; ++i) {
    // 2^64 mod 10 = 6, so the modulo bias is about 3e-19: negligible.
    const int32_t label = static_cast<int32_t>(rng() % kNumClasses);
    ds.labels[i] = label;
    const float* proto = prototypes.data() + label * image_size;
    float* img = ds.images.data() + i * image_size;
    for (int64_t p = 0; p < image_size; ++p) img[p] = proto[p] + 0.5f * UniformSigned(rng);
  }
  ds.description = "synthetic: " + std::to_string(ds.count) + " images, seed " + std::to_string(seed);
  return ds;
}

Dataset PrefixOf(const Dataset& data, int count) {
  if (count >= data.count) return data;
  Dataset out;
  out.count = count;
  out.channels = data.channels;
  out.height = data.height;
  out.width = data.width;
  out.images.assign(data.images.begin(), data.images.begin() + count * data.ImageSize());
  out.labels.assign(data.labels.begin(), data.labels.begin() + count);
  out.description = data.description + " (first " + std::to_string(count) + ")";
  return out;
}

}  // namespace chorus::trainer
