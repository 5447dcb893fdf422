// Renders report.html in headless Chromium (Debian `chromium`) and checks from
// the screenshot that the plots show: the page's own style is grey only, so
// coloured pixels come from the plot lines. Baselines: the same report without
// plots (next to no colour) and an empty page (next to no ink). Skipped with a
// message where Chromium or gnuplot is absent.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "node/lab/report/report.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

// "" when there is no Chromium.
std::string FindChromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  if (std::system("command -v chromium > /dev/null 2>&1") == 0) return "chromium";
  return "";
}

void BrowserWriteFile(const fs::path& path, const std::string& text) { chorus::testing::WriteTextFile(path, text); }
std::string BrowserReadFile(const fs::path& path) { return chorus::testing::ReadTextFile(path); }

// A comparison of three methods x two nodes, four epochs, smooth curves.
void WriteBrowserComparison(const fs::path& root) {
  struct M {
    const char* name;
    const char* family;
    double speed;  // epochs per second
    double rate;   // how fast accuracy rises per epoch
    double bytes_per_epoch;
  };
  const M methods[] = {{"ring-allreduce", "allreduce", 0.5, 1.2, 8e7},
                       {"dpsgd-ring", "gossip", 0.7, 0.9, 4e7},
                       {"choco-sign", "gossip", 0.9, 0.7, 2e6}};
  nlohmann::json listed = nlohmann::json::array();
  for (const M& m : methods) {
    listed.push_back({{"name", m.name}, {"dir", m.name}, {"family", m.family}, {"exit_code", 0}});
    for (int n = 0; n < 2; ++n) {
      std::string lines;
      for (int q = 1; q <= 16; ++q) {  // a record every quarter epoch
        const double epochs = q / 4.0;
        nlohmann::json r = {{"step", q * 25},
                            {"epoch", (q - 1) / 4},
                            {"epoch_progress", epochs},
                            {"time", epochs / m.speed + 0.1 * n},
                            {"loss", 2.3 * std::exp(-m.rate * epochs) + 0.2},
                            {"samples", q * 1600},
                            {"bytes_sent", m.bytes_per_epoch * epochs}};
        if (std::string(m.family) == "gossip") r["consensus_distance_estimate"] = 0.5 * std::exp(-epochs);
        lines += r.dump() + "\n";
        if (q % 4 == 0) {
          r["epoch"] = q / 4;
          r["eval_accuracy"] = 0.9 - 0.5 * std::exp(-m.rate * epochs);
          lines += r.dump() + "\n";
        }
      }
      const fs::path node = root / m.name / ("node" + std::to_string(n));
      BrowserWriteFile(node / "metrics.jsonl", lines);
      BrowserWriteFile(node / "summary.json", nlohmann::json({{"test_accuracy", 0.9 - 0.5 * std::exp(-m.rate * 4)},
                                                       {"train_seconds", 4 / m.speed + 0.1 * n},
                                                       {"samples_per_s", 1600 * 4 * m.speed},
                                                       {"bytes_sent", m.bytes_per_epoch * 4},
                                                       {"consensus_distance_after", 1e-4}})
                                           .dump());
    }
  }
  BrowserWriteFile(root / "compare.json", nlohmann::json({{"name", "browser-test"},
                                                   {"nodes", 2},
                                                   {"target_accuracy", 0.85},
                                                   {"single_node", {{"samples_per_s", 4000.0}}},
                                                   {"methods", listed}})
                                       .dump());
}

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width x height x 3
};

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Decodes an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes).
bool DecodePng(const std::string& file, Image* image, std::string* error) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const auto* data = reinterpret_cast<const uint8_t*>(file.data());
  if (file.size() < 8 || !std::equal(kSignature, kSignature + 8, data)) {
    *error = "no PNG signature";
    return false;
  }
  int channels = 0;
  std::vector<uint8_t> compressed;
  for (size_t pos = 8; pos + 12 <= file.size();) {
    const uint32_t length = BigEndian32(data + pos);
    const std::string type(file.data() + pos + 4, 4);
    const uint8_t* body = data + pos + 8;
    if (pos + 12 + length > file.size()) break;
    if (type == "IHDR") {
      image->width = static_cast<int>(BigEndian32(body));
      image->height = static_cast<int>(BigEndian32(body + 4));
      const int depth = body[8], color = body[9], interlace = body[12];
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        *error = "unsupported PNG: depth " + std::to_string(depth) + ", colour type " + std::to_string(color);
        return false;
      }
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), body, body + length);
    }
    pos += 12 + length;
  }
  if (channels == 0 || image->width <= 0 || image->height <= 0) {
    *error = "no IHDR";
    return false;
  }
  const size_t stride = static_cast<size_t>(image->width) * channels;
  std::vector<uint8_t> raw((stride + 1) * image->height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK ||
      raw_size != raw.size()) {
    *error = "IDAT does not inflate to the image size";
    return false;
  }
  // Undo the per-row filters (PNG spec, section 9).
  std::vector<uint8_t> pixels(stride * image->height);
  for (int y = 0; y < image->height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &pixels[y * stride];
    const uint8_t* up = y > 0 ? &pixels[(y - 1) * stride] : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<size_t>(channels) ? out[x - channels] : 0;
      const int b = up ? up[x] : 0;
      const int c = (up && x >= static_cast<size_t>(channels)) ? up[x - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          *error = "bad PNG filter " + std::to_string(filter);
          return false;
      }
      out[x] = static_cast<uint8_t>(in[x] + predictor);
    }
  }
  image->rgb.resize(static_cast<size_t>(image->width) * image->height * 3);
  for (size_t i = 0; i < static_cast<size_t>(image->width) * image->height; ++i) {
    for (int k = 0; k < 3; ++k) image->rgb[i * 3 + k] = pixels[i * channels + k];
  }
  return true;
}

struct Ink {
  size_t dark = 0;         // pixels that are not near-white
  size_t coloured = 0;     // pixels whose channels differ clearly (not grey)
  int coloured_bands = 0;  // 200-row bands holding over 100 coloured pixels
};

Ink CountInk(const Image& image) {
  Ink ink;
  constexpr int kBand = 200;
  std::vector<size_t> per_band(image.height / kBand + 1, 0);
  for (size_t i = 0; i + 2 < image.rgb.size(); i += 3) {
    const int r = image.rgb[i], g = image.rgb[i + 1], b = image.rgb[i + 2];
    if (std::min({r, g, b}) < 235) ++ink.dark;
    // Anti-aliased grey text stays within a few levels between channels; the
    // plot colours (e.g. #0072B2, #D55E00) differ by over 100.
    if (std::max({r, g, b}) - std::min({r, g, b}) > 60) {
      ++ink.coloured;
      ++per_band[i / 3 / image.width / kBand];
    }
  }
  for (size_t n : per_band) ink.coloured_bands += n > 100 ? 1 : 0;
  return ink;
}

// Screenshots `html` (a file) with headless Chromium; decodes the PNG.
void Screenshot(const std::string& chromium, const chorus::testing::TempDir& dir, const std::string& html,
                const std::string& name, Image* image) {
  const std::string png = dir.File(name + ".png");
  const std::string log = dir.File(name + ".log");
  // `timeout`: a hung browser must not hang the suite.
  const std::string command = "timeout 20 " + chromium +
                              " --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run"
                              " --user-data-dir=" +
                              dir.File("profile-" + name) + " --window-size=1200,3000 --screenshot=" + png +
                              " file://" + html + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << BrowserReadFile(log);
  ASSERT_TRUE(fs::exists(png)) << BrowserReadFile(log);
  std::string error;
  ASSERT_TRUE(DecodePng(BrowserReadFile(png), image, &error)) << png << ": " << error;
  EXPECT_EQ(image->width, 1200);
  EXPECT_EQ(image->height, 3000);
}

TEST(ReportBrowserTest, ChromiumShowsThePlots) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium not installed (Debian: apt-get install chromium); report page not rendered";
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot not installed (Debian: gnuplot-nox): the report has no plots to render";
  }
  chorus::testing::TempDir dir("report_browser");
  WriteBrowserComparison(dir.File("cmp"));

  ReportOptions options;
  options.inputs = {dir.File("cmp")};
  Result<ReportResult> report = BuildReport(options);
  ASSERT_TRUE(report) << report.error().ToString();
  ASSERT_EQ(report->svg_paths.size(), 7u) << ::testing::PrintToString(report->warnings);

  options.output_dir = dir.File("noplots");
  options.render_plots = false;
  Result<ReportResult> bare = BuildReport(options);
  ASSERT_TRUE(bare) << bare.error().ToString();

  BrowserWriteFile(dir.File("empty.html"),
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body></body></html>");

  Image with_plots, without_plots, empty;
  ASSERT_NO_FATAL_FAILURE(Screenshot(chromium, dir, report->html_path, "report", &with_plots));
  ASSERT_NO_FATAL_FAILURE(Screenshot(chromium, dir, bare->html_path, "noplots", &without_plots));
  ASSERT_NO_FATAL_FAILURE(Screenshot(chromium, dir, dir.File("empty.html"), "empty", &empty));

  const Ink plots = CountInk(with_plots), text = CountInk(without_plots), blank = CountInk(empty);
  std::printf("ink: report %zu coloured in %d bands; without plots %zu dark, %zu coloured; empty %zu dark\n",
              plots.coloured, plots.coloured_bands, text.dark, text.coloured, blank.dark);
  // The empty page is white; the page without plots has text and table rules
  // but (grey style) next to no colour; the plots add thousands of coloured
  // pixels, spread over the rows of the plot grid (7 plots, 2 per row), not one spot.
  EXPECT_LT(blank.dark, 100u);
  EXPECT_GT(text.dark, 10000u);
  EXPECT_LT(text.coloured, 200u);
  EXPECT_GT(plots.coloured, 5000u);
  EXPECT_GE(plots.coloured_bands, 4);
}

}  // namespace
}  // namespace chorus::node
