// The plots of `chorus report` (see report_plots.h): curves.csv, one gnuplot
// script per plot, and the gnuplot subprocess.
//
// Each script reads the one long-format curves.csv and picks a method's rows
// with a filter on the method index and curve name (the rows of one method and
// curve are contiguous, so lines are not broken by the filtered-out rows).
//
// Must not: compute curves, build HTML, or turn a gnuplot problem into an error
// of the report.
#include "node/lab/report/report_plots.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/files.h"
#include "common/posix_io.h"
#include "node/lab/chaos/chaos.h"
#include "node/lab/report/report_table.h"

extern char** environ;

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

bool Finite(double v) { return std::isfinite(v); }

const char* CurveName(PlotQuantity q) {
  switch (q) {
    case PlotQuantity::kAccuracy:
      return "accuracy";
    case PlotQuantity::kAccuracyByTime:
      return "accuracy_by_time";
    case PlotQuantity::kTrainLoss:
      return "train_loss";
    case PlotQuantity::kConsensus:
      return "consensus";
    case PlotQuantity::kConsensusEstimate:
      return "consensus_estimate";
  }
  return "";
}

const std::vector<CurvePoint>& CurveOf(const MethodCurves& c, PlotQuantity q) {
  switch (q) {
    case PlotQuantity::kAccuracy:
      return c.accuracy;
    case PlotQuantity::kAccuracyByTime:
      return c.accuracy_by_time;
    case PlotQuantity::kTrainLoss:
      return c.train_loss;
    case PlotQuantity::kConsensusEstimate:
      return c.consensus_estimate;
    case PlotQuantity::kConsensus:
      break;
  }
  return c.consensus;
}

// The curves a plot of `q` draws per method: the consensus plot draws the
// neighbour estimate beside the exact distance.
std::vector<PlotQuantity> DrawnCurves(PlotQuantity q) {
  if (q == PlotQuantity::kConsensus) return {PlotQuantity::kConsensus, PlotQuantity::kConsensusEstimate};
  return {q};
}

double XOf(const CurvePoint& p, PlotAxis axis) {
  switch (axis) {
    case PlotAxis::kTime:
      return p.time_s;
    case PlotAxis::kBytes:
      return p.bytes_per_node / 1e6;
    case PlotAxis::kEpochs:
      break;
  }
  return p.epochs;
}

Status WriteTextFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Internal("cannot write " + path.string());
  out << text;
  out.close();
  if (!out) return Internal("error writing " + path.string());
  return Status::Ok();
}

// One method's line: its own colour, and a dash pattern and point type that
// change along the list too, so that a dozen curves stay apart where colours
// look alike (and in grey print). Colours: Okabe-Ito, then Tol's muted ones.
// Dash type 3 (dotted) is left to the neighbour estimate, which takes its
// method's colour and point type.
struct LineStyle {
  const char* color;
  int dash;   // gnuplot dt: 1 solid, 2 dashed, 4 dash-dot
  int point;  // gnuplot pt
};
constexpr LineStyle kStyles[] = {{"#0072B2", 1, 5},  {"#D55E00", 1, 7},  {"#009E73", 1, 9},  {"#CC79A7", 1, 11},
                                 {"#E69F00", 2, 13}, {"#56B4E9", 2, 15}, {"#000000", 2, 4},  {"#882255", 2, 6},
                                 {"#44AA99", 4, 8},  {"#999933", 4, 10}, {"#AA4499", 4, 12}, {"#661100", 4, 14}};
constexpr int kEstimateDash = 3;

// Method m's style; past the list, the colours repeat with another dash pattern.
LineStyle StyleOf(size_t m) {
  LineStyle style = kStyles[m % std::size(kStyles)];
  if (m >= std::size(kStyles)) {
    constexpr int kDashes[] = {1, 2, 4, 5};
    const size_t own = (m % std::size(kStyles)) / 4;  // the style's own dash: 1, 2, 4
    style.dash = kDashes[(own + m / std::size(kStyles)) % std::size(kDashes)];
  }
  return style;
}

bool IsAccuracy(PlotQuantity q) { return q == PlotQuantity::kAccuracy || q == PlotQuantity::kAccuracyByTime; }

std::string AxisLabel(PlotAxis axis) {
  switch (axis) {
    case PlotAxis::kTime:
      return "wall time (s, slowest node, evaluation excluded)";
    case PlotAxis::kBytes:
      return "MB sent per node (mean over nodes)";
    case PlotAxis::kEpochs:
      break;
  }
  return "epochs";
}

std::string QuantityLabel(PlotQuantity q) {
  switch (q) {
    case PlotQuantity::kAccuracy:
    case PlotQuantity::kAccuracyByTime:
      return "test accuracy (%, mean over nodes)";
    case PlotQuantity::kTrainLoss:
      return "training loss (mean over nodes)";
    case PlotQuantity::kConsensus:
    case PlotQuantity::kConsensusEstimate:
      break;
  }
  return "relative consensus distance";
}

// The gnuplot `using` expression of one column, NaN for rows of other series
// and, on a log axis, for values that are not positive.
std::string Column(PlotAxis axis) {
  switch (axis) {
    case PlotAxis::kTime:
      return "$4";
    case PlotAxis::kBytes:
      return "($5/1e6)";
    case PlotAxis::kEpochs:
      break;
  }
  return "$6";
}

}  // namespace

const std::vector<PlotSpec>& ReportPlotSpecs() {
  static const std::vector<PlotSpec> specs = {
      {"accuracy_time", "Test accuracy vs wall time",
       "Mean over nodes of each node's latest test accuracy, at every evaluation time of any node (from "
       "the time every node has evaluated once), against training wall time (evaluation time excluded): "
       "a straggler's late evaluations do not hold back the fast nodes' progress. Dashed: the target.",
       PlotQuantity::kAccuracyByTime, PlotAxis::kTime},
      {"accuracy_bytes", "Test accuracy vs bytes sent per node",
       "Mean test accuracy over nodes against the data-plane bytes each node had sent (mean over nodes). "
       "Dashed: the target accuracy.",
       PlotQuantity::kAccuracy, PlotAxis::kBytes},
      {"accuracy_epochs", "Test accuracy vs epochs",
       "Mean test accuracy over nodes against epochs done. Dashed: the target accuracy.",
       PlotQuantity::kAccuracy, PlotAxis::kEpochs},
      {"loss_time", "Training loss vs wall time",
       "Training loss (mean over the logging window, then over nodes) against training wall time.",
       PlotQuantity::kTrainLoss, PlotAxis::kTime},
      {"loss_bytes", "Training loss vs bytes sent per node",
       "Training loss against the data-plane bytes sent per node.", PlotQuantity::kTrainLoss,
       PlotAxis::kBytes},
      {"loss_epochs", "Training loss vs epochs", "Training loss against epochs done.",
       PlotQuantity::kTrainLoss, PlotAxis::kEpochs},
      {"consensus_time", "Consensus distance vs wall time",
       "Solid: the consensus distance, max over nodes of ||x_i - x_mean|| / ||x_mean|| with x_mean the "
       "mean of every node's weights, measured exactly at each evaluation. Dashed, \"neighbour estimate\": "
       "each node's distance to the neighbours it heard from in its last gossip round (mean over nodes, "
       "every logging step); cheap, but blind to the rest of the graph. Points measured over a single node "
       "are left out. Log scale. Drawn: the methods whose table shows a consensus distance after (all-reduce "
       "keeps replicas equal; other methods record none).",
       PlotQuantity::kConsensus, PlotAxis::kTime},
  };
  return specs;
}

std::string GnuplotQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "''";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "'";
}

namespace {

// curves.csv: every curve of every method, long format.
std::string CurvesCsv(const std::vector<MethodRun>& methods, const std::vector<MethodCurves>& curves) {
  std::ostringstream csv;
  csv << "method_index,curve,step,time_s,bytes_sent_per_node,epochs,value,nodes,method\n";
  for (size_t m = 0; m < methods.size(); ++m) {
    for (PlotQuantity q : {PlotQuantity::kAccuracy, PlotQuantity::kAccuracyByTime, PlotQuantity::kTrainLoss,
                           PlotQuantity::kConsensus, PlotQuantity::kConsensusEstimate}) {
      for (const CurvePoint& p : CurveOf(curves[m], q)) {
        csv << m << ',' << CurveName(q) << ',' << (p.step >= 0 ? std::to_string(p.step) : std::string())
            << ',' << CsvNumber(p.time_s) << ',' << CsvNumber(p.bytes_per_node) << ',' << CsvNumber(p.epochs)
            << ',' << CsvNumber(p.value) << ',' << p.nodes << ',' << CsvField(methods[m].label) << '\n';
      }
    }
  }
  return csv.str();
}

// Bytes span orders of magnitude between compressed gossip and all-reduce:
// a log axis when the largest positive value is over 100x the smallest.
bool LogX(const PlotSpec& spec, const std::vector<MethodCurves>& curves) {
  double x_min = INFINITY, x_max = 0.0;
  for (const MethodCurves& c : curves) {
    for (PlotQuantity q : DrawnCurves(spec.quantity)) {
      for (const CurvePoint& p : CurveOf(c, q)) {
        const double x = XOf(p, spec.axis);
        if (Finite(x) && x > 0) {
          x_min = std::min(x_min, x);
          x_max = std::max(x_max, x);
        }
      }
    }
  }
  return spec.axis == PlotAxis::kBytes && x_max > 0 && x_max / x_min > 100.0;
}

// Whether method `m` belongs in the plot of `spec`: the consensus plot holds
// the methods whose table row shows a consensus distance, so that plot and
// table never disagree about which methods have one.
bool Drawn(const PlotSpec& spec, const std::vector<TableRow>& rows, size_t m) {
  return spec.quantity != PlotQuantity::kConsensus || ShowsConsensus(rows[m]);
}

// The gnuplot series of every method and drawn curve with a point to draw, in
// method order; a method's neighbour estimate is dotted, in the method's colour.
// Accuracy is drawn in percent, as the table shows it.
std::vector<std::string> MethodSeries(const PlotSpec& spec, const std::vector<MethodRun>& methods,
                                      const std::vector<MethodCurves>& curves, const std::vector<TableRow>& rows,
                                      bool log_x, bool log_y) {
  std::vector<std::string> series;
  for (size_t m = 0; m < methods.size(); ++m) {
    if (!Drawn(spec, rows, m)) continue;
    for (PlotQuantity q : DrawnCurves(spec.quantity)) {
      int usable = 0;
      for (const CurvePoint& p : CurveOf(curves[m], q)) {
        const double x = XOf(p, spec.axis);
        if (Finite(x) && Finite(p.value) && (!log_x || x > 0) && (!log_y || p.value > 0)) ++usable;
      }
      if (usable == 0) continue;
      const std::string select = "($1==" + std::to_string(m) + " && strcol(2) eq '" + CurveName(q) + "')";
      std::string x = Column(spec.axis);
      if (log_x) x = "(" + x + ">0 ? " + x + " : NaN)";
      const std::string y = log_y ? "($7>0 ? $7 : NaN)" : IsAccuracy(q) ? "($7*100)" : "($7)";
      // Evaluation curves have a few points, all marked; the dense curves mark
      // about a dozen points each (pointinterval) so that methods stay apart.
      const bool dense = q == PlotQuantity::kTrainLoss || q == PlotQuantity::kConsensusEstimate;
      const int interval = dense ? std::max(1, usable / 12) : 1;
      const bool estimate = q == PlotQuantity::kConsensusEstimate;
      const std::string title = estimate ? methods[m].label + " (neighbour estimate)" : methods[m].label;
      const LineStyle style = StyleOf(m);
      series.push_back("'curves.csv' using (" + select + " ? " + x + " : NaN):(" + select + " ? " + y +
                       " : NaN) with linespoints lw 1.5 dt " + std::to_string(estimate ? kEstimateDash : style.dash) +
                       " lc rgb '" + style.color + "' pt " + std::to_string(style.point) +
                       (dense ? " ps 0.4" : " ps 0.6") + " pi " + std::to_string(interval) + " title " +
                       GnuplotQuote(title));
    }
  }
  return series;
}

// The title of `spec` naming the families of the methods it draws: "(gossip)"
// only when every one of them is gossip.
std::string TitleFor(const PlotSpec& spec, const std::vector<MethodRun>& methods, const std::vector<TableRow>& rows) {
  if (spec.quantity != PlotQuantity::kConsensus) return spec.title;
  std::vector<std::string> families;
  for (size_t m = 0; m < methods.size(); ++m) {
    const std::string family = methods[m].family.empty() ? "unknown family" : methods[m].family;
    if (Drawn(spec, rows, m) && std::find(families.begin(), families.end(), family) == families.end()) {
      families.push_back(family);
    }
  }
  std::string joined;
  for (const std::string& f : families) joined += (joined.empty() ? "" : ", ") + f;
  return joined.empty() ? spec.title : spec.title + " (" + joined + ")";
}

// Why a plot has nothing to draw.
std::string NothingToDrawNote(const PlotSpec& spec) {
  if (spec.quantity == PlotQuantity::kConsensus) {
    return "no method whose table shows a consensus distance recorded a positive one over two nodes or more";
  }
  return std::string("no method has ") + CurveName(spec.quantity) + " points with " +
         (spec.axis == PlotAxis::kBytes  ? "bytes sent"
          : spec.axis == PlotAxis::kTime ? "times"
                                         : "epochs");
}

// The dashed line of the target accuracy (`target_accuracy` a fraction, drawn in percent).
std::string TargetSeries(double target_accuracy) {
  char target[128];
  std::snprintf(target, sizeof(target), "%.6g with lines dt 2 lw 1 lc rgb '#808080' title 'target %.4g%%'",
                target_accuracy * 100.0, target_accuracy * 100.0);
  return target;
}

// The gnuplot script that draws `series` into <id>.svg.
std::string GnuplotScript(const PlotSpec& spec, const std::vector<std::string>& series, bool log_x, bool log_y) {
  std::ostringstream gp;
  gp << "# " << spec.title << ": written by `chorus report`; data in curves.csv (see its header).\n"
     << "# Re-run from this folder: gnuplot " << spec.id << ".gp\n"
     << "set terminal svg size 600,440 noenhanced font 'sans,11' background rgb 'white'\n"
     << "set output " << GnuplotQuote(spec.id + ".svg") << "\n"
     << "set datafile separator comma\n"
     << "set datafile columnheaders\n"
     << "set title " << GnuplotQuote(spec.title) << "\n"
     << "set xlabel " << GnuplotQuote(AxisLabel(spec.axis) + (log_x ? ", log scale" : "")) << "\n"
     << "set ylabel " << GnuplotQuote(QuantityLabel(spec.quantity)) << "\n"
     << "set grid\n"
     << "set key below\n";
  if (log_x) gp << "set logscale x\n";
  if (log_y) gp << "set logscale y\nset format y '%.0e'\n";
  gp << "plot ";
  for (size_t i = 0; i < series.size(); ++i) gp << (i ? ", \\\n     " : "") << series[i];
  gp << "\n";
  return gp.str();
}

// One plot: its script in `dir`, or the note saying why there is none.
Result<Plot> WritePlotScript(const fs::path& dir, const PlotSpec& spec, const std::vector<MethodRun>& methods,
                             const std::vector<MethodCurves>& curves, const std::vector<TableRow>& rows,
                             double target_accuracy) {
  Plot plot;
  plot.spec = spec;
  plot.spec.title = TitleFor(spec, methods, rows);
  plot.svg_path = (dir / (spec.id + ".svg")).string();
  std::error_code ec;
  fs::remove(plot.svg_path, ec);  // never show a drawing left by an earlier report
  const fs::path script = dir / (spec.id + ".gp");
  fs::remove(script, ec);

  const bool log_y = spec.quantity == PlotQuantity::kConsensus;
  const bool log_x = LogX(spec, curves);
  std::vector<std::string> series = MethodSeries(plot.spec, methods, curves, rows, log_x, log_y);
  if (series.empty()) {
    plot.note = NothingToDrawNote(spec);
    return plot;
  }
  if (IsAccuracy(spec.quantity) && Finite(target_accuracy)) {
    series.push_back(TargetSeries(target_accuracy));
  }
  CHORUS_RETURN_IF_ERROR(WriteTextFile(script, GnuplotScript(plot.spec, series, log_x, log_y)));
  plot.script_path = script.string();
  return plot;
}

}  // namespace

Result<std::vector<Plot>> WritePlotFiles(const std::string& report_dir, const std::vector<MethodRun>& methods,
                                         const std::vector<MethodCurves>& curves, const std::vector<TableRow>& rows,
                                         double target_accuracy) {
  if (methods.size() != curves.size() || methods.size() != rows.size()) {
    return Err(InvalidArgument(std::to_string(methods.size()) + " methods but " + std::to_string(curves.size()) +
                               " curve sets and " + std::to_string(rows.size()) + " table rows"));
  }
  const fs::path dir(report_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Err(Internal("cannot create " + report_dir + ": " + ec.message()));
  CHORUS_RETURN_IF_ERROR(WriteTextFile(dir / "curves.csv", CurvesCsv(methods, curves)));
  std::vector<Plot> plots;
  for (const PlotSpec& spec : ReportPlotSpecs()) {
    CHORUS_ASSIGN_OR_RETURN(Plot plot, WritePlotScript(dir, spec, methods, curves, rows, target_accuracy));
    plots.push_back(std::move(plot));
  }
  return plots;
}

Result<int> RunLoggedProcess(const std::vector<std::string>& argv, const std::string& cwd,
                             const std::string& log_path, double timeout_s) {
  if (argv.empty()) return Err(InvalidArgument("empty command"));
  std::error_code ec;
  const std::string log_abs = fs::absolute(log_path, ec).string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_abs.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT || rc == EACCES) {
    return Err(NotFound("cannot run " + argv[0] + ": " +
                        std::string(rc == ENOENT ? "not found" : "permission denied")));
  }
  if (rc != 0) return Err(ErrnoStatus(rc, "starting " + argv[0]));

  const Deadline deadline = Deadline::AfterSeconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t done = RetryOnEintr([&] { return waitpid(pid, &status, WNOHANG); });
    if (done == pid) break;
    if (done < 0) return Err(ErrnoStatus(errno, "waiting for " + argv[0]));
    if (deadline.Expired()) {
      kill(pid, SIGKILL);
      RetryOnEintr([&] { return waitpid(pid, &status, 0); });
      return Err(DeadlineExceeded(argv[0] + " ran past " + std::to_string(timeout_s) + " s and was killed"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

namespace {

// The last non-empty line of `path` (for notes about a failed gnuplot run).
std::string LastLine(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return "";
  std::string_view rest = *text;
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.remove_suffix(1);
  const size_t newline = rest.find_last_of('\n');
  return std::string(newline == std::string_view::npos ? rest : rest.substr(newline + 1));
}

}  // namespace

void RenderPlots(const std::string& gnuplot, const std::string& report_dir, double timeout_s,
                 std::vector<Plot>* plots, std::vector<std::string>* warnings) {
  const std::string log_path = (fs::path(report_dir) / "gnuplot.log").string();
  std::error_code ec;
  fs::remove(log_path, ec);
  for (Plot& plot : *plots) {
    if (plot.script_path.empty()) continue;
    Result<int> rc = RunLoggedProcess({gnuplot, fs::path(plot.script_path).filename().string()}, report_dir,
                                      log_path, timeout_s);
    if (!rc && rc.error().code() == StatusCode::kNotFound) {
      const std::string note = "plots not drawn: " + rc.error().message() +
                               " (install gnuplot, e.g. Debian's gnuplot-nox; the scripts are in " +
                               report_dir + ")";
      for (Plot& p : *plots) {
        if (!p.script_path.empty()) p.note = note;
      }
      warnings->push_back(note);
      return;
    }
    if (!rc) {
      plot.note = "gnuplot failed: " + rc.error().message();
    } else if (*rc != 0) {
      plot.note = "gnuplot exited with code " + std::to_string(*rc) + ": " + LastLine(log_path);
    } else {
      Result<std::string> svg = ReadFileText(plot.svg_path);
      plot.svg = svg ? std::move(*svg) : std::string();
      if (plot.svg.find("<svg") == std::string::npos) {
        plot.svg.clear();
        plot.note = "gnuplot wrote no SVG to " + plot.svg_path;
      }
    }
    if (!plot.note.empty()) warnings->push_back(plot.spec.id + ": " + plot.note);
  }
}

Result<Plot> WriteChaosPlot(const std::string& report_dir, const std::string& chaos_jsonl) {
  Plot plot;
  plot.spec = {"chaos", "Throughput and membership under faults",
               "chorus chaos: the cluster's samples/s over the last 5 s (left axis) and the node processes "
               "running and the largest membership a running node logged (right axis), against seconds after "
               "the cluster formed; dashed lines mark the faults injected (red: kill, blue: stop, green: "
               "restart).",
               PlotQuantity::kTrainLoss, PlotAxis::kTime};
  const fs::path dir(report_dir);
  plot.svg_path = (dir / "chaos.svg").string();
  std::error_code ec;
  fs::remove(plot.svg_path, ec);
  std::ifstream in(chaos_jsonl);
  if (!in) return Err(NotFound("cannot read " + chaos_jsonl));
  std::ostringstream samples, faults;
  samples << "t_s,samples_per_s,running,world_size\n";
  faults << "t_s,fault,nodes\n";
  std::vector<std::string> marks;
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    const std::optional<ChaosRecord> kind = FromName(kChaosRecordNames, e.value("kind", ""));
    if (kind == ChaosRecord::kSample) {
      samples << CsvNumber(e.value("t", 0.0)) << ',' << CsvNumber(e.value("samples_per_s", 0.0)) << ','
              << e.value("running", 0) << ',' << e.value("world_size", 0) << '\n';
      ++rows;
    } else if (kind == ChaosRecord::kFault && e.value("injected", false)) {
      std::string nodes;
      for (const auto& n : e.value("nodes", nlohmann::json::array())) nodes += (nodes.empty() ? "" : " ") + n.dump();
      const std::string fault = e.value("fault", "");
      faults << CsvNumber(e.value("t", 0.0)) << ',' << fault << ',' << nodes << '\n';
      const std::optional<FaultKind> fault_kind = FromName(kFaultKindNames, fault);
      const char* colour = fault_kind == FaultKind::kKill        ? "#d62728"
                           : fault_kind == FaultKind::kStop      ? "#1f77b4"
                           : fault_kind == FaultKind::kPartition ? "#9467bd"
                                                                 : "#2ca02c";
      marks.push_back("set arrow from " + CsvNumber(e.value("t", 0.0)) + ", graph 0 to " +
                      CsvNumber(e.value("t", 0.0)) + ", graph 1 nohead dt 2 lc rgb '" + colour + "'");
    }
  }
  CHORUS_RETURN_IF_ERROR(WriteTextFile(dir / "chaos.csv", samples.str()));
  CHORUS_RETURN_IF_ERROR(WriteTextFile(dir / "chaos_faults.csv", faults.str()));
  const fs::path script = dir / "chaos.gp";
  fs::remove(script, ec);
  if (rows == 0) {
    plot.note = "nothing to draw: " + chaos_jsonl + " has no samples";
    return plot;
  }
  std::ostringstream gp;
  gp << "# " << plot.spec.title << ": written by `chorus report`; data in chaos.csv and chaos_faults.csv.\n"
     << "# Re-run from this folder: gnuplot chaos.gp\n"
     << "set terminal svg size 600,440 noenhanced font 'sans,11' background rgb 'white'\n"
     << "set output 'chaos.svg'\n"
     << "set datafile separator comma\n"
     << "set datafile columnheaders\n"
     << "set title " << GnuplotQuote(plot.spec.title) << "\n"
     << "set xlabel 'seconds after the cluster formed'\n"
     << "set ylabel 'samples/s (cluster)'\n"
     << "set y2label 'nodes'\n"
     << "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n"
     << "set grid\nset key below\n";
  for (const std::string& m : marks) gp << m << "\n";
  gp << "plot 'chaos.csv' using 1:2 with lines lw 1.5 lc rgb '#333333' title 'samples/s', \\\n"
     << "     '' using 1:3 axes x1y2 with steps lw 1.5 lc rgb '#ff7f0e' title 'processes running', \\\n"
     << "     '' using 1:4 axes x1y2 with steps lw 1.5 dt 3 lc rgb '#9467bd' title 'membership'\n";
  CHORUS_RETURN_IF_ERROR(WriteTextFile(script, gp.str()));
  plot.script_path = script.string();
  return plot;
}

}  // namespace chorus::node
