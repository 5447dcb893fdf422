// The scaling view (see report_scaling.h).
#include "node/lab/report/report_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/files.h"
#include "node/lab/report/report_plots.h"
#include "node/lab/report/report_table.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

struct ScalingMethod {
  std::string method;
  std::string label;
};

// Every method of the points, in first-seen order.
std::vector<ScalingMethod> ScalingMethods(const std::vector<ScalingPoint>& points) {
  std::vector<ScalingMethod> out;
  for (const ScalingPoint& p : points) {
    for (const nlohmann::json& row : p.table) {
      const std::string method = row.value("method", "");
      if (std::none_of(out.begin(), out.end(), [&](const ScalingMethod& m) { return m.method == method; })) {
        out.push_back({method, row.value("label", method)});
      }
    }
  }
  return out;
}

// The number `key` of `method`'s row at `point`; NaN when missing or null.
double ScalingValue(const ScalingPoint& point, const std::string& method, const char* key) {
  for (const nlohmann::json& row : point.table) {
    if (row.value("method", "") != method) continue;
    const auto it = row.find(key);
    if (it != row.end() && it->is_number()) return it->get<double>();
  }
  return std::nan("");
}


Status WriteScalingFile(const fs::path& path, const std::string& text) {
  return WriteFileAtomic(path.string(), std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// A gnuplot script drawing `column` (scaled by `scale`) of every method
// against the node count, with the data inline.
std::string ScalingScript(const std::string& id, const std::string& title, const std::string& ylabel,
                   const std::vector<ScalingPoint>& points, const std::vector<ScalingMethod>& methods,
                   const char* key, double scale, bool log_y) {
  std::ostringstream gp;
  gp << "# " << title << ": written by `chorus simulate --nodes N1,N2,...`; the numbers are scaling.csv's.\n"
     << "# Re-run from this folder: gnuplot " << id << ".gp\n"
     << "set terminal svg size 640,460 noenhanced font 'sans,11' background rgb 'white'\n"
     << "set output " << GnuplotQuote(id + ".svg") << "\n"
     << "set title " << GnuplotQuote(title) << "\n"
     << "set xlabel 'nodes (log scale)'\nset ylabel " << GnuplotQuote(ylabel) << "\n"
     << "set logscale x 2\nset grid\nset key below\n";
  if (log_y) gp << "set logscale y\n";
  std::vector<std::string> series;
  for (size_t m = 0; m < methods.size(); ++m) {
    std::ostringstream block;
    size_t rows = 0;
    for (const ScalingPoint& p : points) {
      const double v = ScalingValue(p, methods[m].method, key);
      if (!std::isfinite(v) || (log_y && v <= 0)) continue;
      block << p.nodes << ' ' << v * scale << '\n';
      ++rows;
    }
    if (rows == 0) continue;
    gp << "$m" << m << " << EOD\n" << block.str() << "EOD\n";
    series.push_back("$m" + std::to_string(m) + " using 1:2 with linespoints lw 1.5 pt " + std::to_string(1 + m % 13) +
                     " title " + GnuplotQuote(methods[m].label));
  }
  if (series.empty()) return "";
  gp << "plot ";
  for (size_t i = 0; i < series.size(); ++i) gp << (i ? ", \\\n     " : "") << series[i];
  gp << "\n";
  return gp.str();
}

}  // namespace

std::string ScalingTableText(const std::vector<ScalingPoint>& points) {
  const std::vector<ScalingMethod> methods = ScalingMethods(points);
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> head = {"method"};
  for (const ScalingPoint& p : points) {
    head.push_back("acc% n=" + std::to_string(p.nodes));
    head.push_back("MB/node n=" + std::to_string(p.nodes));
  }
  lines.push_back(head);
  for (const ScalingMethod& m : methods) {
    std::vector<std::string> cells = {m.label};
    for (const ScalingPoint& p : points) {
      cells.push_back(FixedCell(ScalingValue(p, m.method, "final_accuracy") * 100.0, 2));
      cells.push_back(FixedCell(ScalingValue(p, m.method, "bytes_sent_per_node") / 1e6, 2));
    }
    lines.push_back(cells);
  }
  return AlignedText(lines);
}

Result<ScalingView> WriteScalingView(const std::string& out_dir, const std::vector<ScalingPoint>& points, bool render,
                                     const std::string& gnuplot) {
  ScalingView view;
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Err(Internal("cannot create " + out_dir + ": " + ec.message()));
  const std::vector<ScalingMethod> methods = ScalingMethods(points);

  std::ostringstream csv;
  const char* const keys[] = {"final_accuracy", "bytes_sent_per_node", "time_to_target_s", "bytes_to_target_per_node"};
  csv << "method,label,nodes";
  for (const char* k : keys) csv << ',' << k;
  csv << '\n';
  for (const ScalingMethod& m : methods) {
    for (const ScalingPoint& p : points) {
      if (std::none_of(p.table.begin(), p.table.end(),
                       [&](const nlohmann::json& row) { return row.value("method", "") == m.method; })) {
        continue;  // not run at this count
      }
      csv << CsvField(m.method) << ',' << CsvField(m.label) << ',' << p.nodes;
      for (const char* k : keys) {
        const double v = ScalingValue(p, m.method, k);
        char number[32] = "";
        if (std::isfinite(v)) std::snprintf(number, sizeof(number), "%.10g", v);
        csv << ',' << number;
      }
      csv << '\n';
    }
  }
  CHORUS_RETURN_IF_ERROR(WriteScalingFile(dir / "scaling.csv", csv.str()));
  view.table_text = ScalingTableText(points);
  CHORUS_RETURN_IF_ERROR(WriteScalingFile(dir / "scaling.txt", view.table_text));

  std::vector<Plot> plots;
  struct Spec {
    const char* id;
    const char* title;
    const char* ylabel;
    const char* key;
    double scale;
    bool log_y;
  };
  for (const Spec& s : {Spec{"scaling_accuracy", "Final test accuracy against the node count", "test accuracy (%)",
                             "final_accuracy", 100.0, false},
                        Spec{"scaling_bytes", "Bytes sent per node against the node count",
                             "MB sent per node (log scale)", "bytes_sent_per_node", 1e-6, true}}) {
    Plot plot;
    plot.spec.id = s.id;
    plot.spec.title = s.title;
    plot.svg_path = (dir / (std::string(s.id) + ".svg")).string();
    const std::string script = ScalingScript(s.id, s.title, s.ylabel, points, methods, s.key, s.scale, s.log_y);
    if (script.empty()) continue;
    const fs::path path = dir / (std::string(s.id) + ".gp");
    CHORUS_RETURN_IF_ERROR(WriteScalingFile(path, script));
    plot.script_path = path.string();
    plots.push_back(std::move(plot));
  }
  if (render) RenderPlots(gnuplot, out_dir, 60.0, &plots, &view.warnings);
  for (const Plot& p : plots) {
    if (!p.svg.empty()) view.svg_paths.push_back(p.svg_path);
  }
  return view;
}

}  // namespace chorus::node
