// Loading recorded runs and building per-method curves for `chorus report`
// (see report_data.h). Reading is tolerant where a killed node leaves damage
// (half a metrics line, no summary.json) and strict where a file was written
// whole (compare.json, summary.json): those are errors naming file and line.
//
// Must not: draw, write files or run processes.
#include "node/lab/report/report_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/files.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

// 1-based line of byte `offset` in `text`.
int LineOfOffset(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n'));
}

// Parses a whole JSON file; DataLoss "path:line: ..." on a syntax error.
Result<nlohmann::json> ParseJsonFile(std::string_view text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    const size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    return Err(
        DataLoss(path + ":" + std::to_string(LineOfOffset(text, offset)) + ": malformed JSON: " + e.what()));
  }
}

// Reads `key` of `object` as a number: NaN when absent or null. A value of another
// type is NaN too, and `bad` (when not null) records the key.
double NumberOr(const nlohmann::json& object, const char* key, std::set<std::string>* bad) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return kReportNaN;
  if (it->is_number()) return it->get<double>();
  if (bad) bad->insert(key);
  return kReportNaN;
}

std::string StringOr(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "node2" < "node10": digit runs compare by value.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string_view da(a.data() + i, ie - i), db(b.data() + j, je - j);
      while (da.size() > 1 && da.front() == '0') da.remove_prefix(1);
      while (db.size() > 1 && db.front() == '0') db.remove_prefix(1);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// The last component of `dir`, also for "runs/x/", "." and "..".
std::string FolderName(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

bool IsDirectory(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool IsNodeDir(const fs::path& p) {
  return IsDirectory(p) && (IsFile(p / "metrics.jsonl") || IsFile(p / "summary.json"));
}

// Sub-folders of `dir` that satisfy `pred`, in natural order.
template <typename Pred>
std::vector<fs::path> SubDirs(const fs::path& dir, Pred pred) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (pred(it->path())) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return NaturalLess(a.filename().string(), b.filename().string());
  });
  return out;
}

std::vector<fs::path> NodeDirsIn(const fs::path& dir) { return SubDirs(dir, IsNodeDir); }

bool HoldsNodeDirs(const fs::path& dir) { return IsDirectory(dir) && !NodeDirsIn(dir).empty(); }

// The family from summary.json's exchange description, or from the records.
std::string InferFamily(const MethodRun& method) {
  for (const NodeRun& node : method.nodes) {
    if (!node.summary || node.summary->exchange.empty()) continue;
    const std::string& e = node.summary->exchange;
    if (e.rfind("allreduce", 0) == 0 || e.rfind("all-reduce", 0) == 0) return "allreduce";
    if (e.rfind("gossip", 0) == 0) return "gossip";
    if (e.rfind("outer", 0) == 0) return "low-communication";
    if (e.rfind("local sgd", 0) == 0 || e.rfind("local-sgd", 0) == 0 || e.rfind("local_sgd", 0) == 0) {
      return "local-sgd";
    }
  }
  for (const NodeRun& node : method.nodes) {
    for (const MetricsRecord& r : node.records) {
      if (!std::isnan(r.consensus_estimate)) return "gossip";
    }
  }
  return "";
}

Status LoadNodes(const fs::path& method_dir, MethodRun* method, std::vector<std::string>* warnings) {
  for (const fs::path& node_dir : NodeDirsIn(method_dir)) {
    CHORUS_ASSIGN_OR_RETURN(NodeRun node, LoadNodeRun(node_dir.string(), warnings));
    method->nodes.push_back(std::move(node));
  }
  return Status::Ok();
}

// A method of a comparison whose compare.json lists it.
Result<MethodRun> MethodFromEntry(const nlohmann::json& entry, size_t index, const fs::path& root,
                                  const std::string& compare_path, double single_node_sps,
                                  std::vector<std::string>* warnings) {
  if (!entry.is_object()) {
    return Err(DataLoss(compare_path + ": methods[" + std::to_string(index) + "] is not an object"));
  }
  MethodRun method;
  method.name = StringOr(entry, "name");
  method.dir = StringOr(entry, "dir");
  if (method.name.empty()) method.name = method.dir;
  if (method.name.empty()) {
    return Err(
        DataLoss(compare_path + ": methods[" + std::to_string(index) + "] has neither \"name\" nor \"dir\""));
  }
  if (method.dir.empty()) method.dir = method.name;
  method.label = StringOr(entry, "label");
  if (method.label.empty()) method.label = method.name;
  method.family = StringOr(entry, "family");
  const double exit_code = NumberOr(entry, "exit_code", nullptr);
  if (!std::isnan(exit_code)) method.exit_code = static_cast<int>(exit_code);
  method.wall_seconds = NumberOr(entry, "wall_seconds", nullptr);
  method.error = StringOr(entry, "error");
  if (auto it = entry.find("overrides"); it != entry.end() && it->is_array()) {
    for (const nlohmann::json& o : *it) {
      if (o.is_string()) method.overrides.push_back(o.get<std::string>());
    }
  }
  method.single_node_samples_per_s = single_node_sps;

  const fs::path dir = root / method.dir;
  method.dir = dir.string();
  if (method.exit_code && *method.exit_code != 0) {
    warnings->push_back("method " + method.name + " exited with code " + std::to_string(*method.exit_code));
  }
  if (!method.error.empty()) warnings->push_back("method " + method.name + ": " + method.error);
  if (!IsDirectory(dir)) {
    warnings->push_back("method " + method.name + ": folder " + dir.string() + " is missing");
    return method;
  }
  CHORUS_RETURN_IF_ERROR(LoadNodes(dir, &method, warnings));
  if (method.nodes.empty()) {
    warnings->push_back("method " + method.name + ": no node folders in " + dir.string());
  }
  return method;
}

// The method whose node folders are in `dir`, called `name`.
Result<MethodRun> MethodFromFolder(const fs::path& dir, const std::string& name, double single_node_sps,
                                   std::vector<std::string>* warnings) {
  MethodRun m;
  m.name = m.label = name;
  m.dir = dir.string();
  m.single_node_samples_per_s = single_node_sps;
  CHORUS_RETURN_IF_ERROR(LoadNodes(dir, &m, warnings));
  return m;
}

// A method per sub-folder of `root` holding node folders, in natural order.
Result<std::vector<MethodRun>> MethodsInSubFolders(const fs::path& root, double single_node_sps,
                                                   std::vector<std::string>* warnings) {
  std::vector<MethodRun> methods;
  for (const fs::path& dir : SubDirs(root, HoldsNodeDirs)) {
    CHORUS_ASSIGN_OR_RETURN(MethodRun m, MethodFromFolder(dir, dir.filename().string(), single_node_sps, warnings));
    methods.push_back(std::move(m));
  }
  return methods;
}

// The settings shown come from the first comparison's compare.json; later
// ones only get a warning.
void TakeSettings(const nlohmann::json& compare, const fs::path& compare_path, RunSet* set) {
  if (set->settings.is_null()) {
    set->settings = compare;
    set->settings_path = compare_path.string();
    set->target_accuracy = NumberOr(compare, "target_accuracy", nullptr);
  } else {
    set->warnings.push_back("settings shown are those of " + set->settings_path + "; " +
                            compare_path.string() + " is not shown");
  }
}

// The node folders that evaluate during training where a simulation lets only
// a sample of them do so (compare.json's simulation.eval_nodes, ranks); empty
// otherwise.
std::vector<std::string> SampledEvaluators(const nlohmann::json& compare) {
  std::vector<std::string> names;
  auto simulation = compare.find("simulation");
  if (simulation == compare.end() || !simulation->is_object()) return names;
  auto ranks = simulation->find("eval_nodes");
  if (ranks == simulation->end() || !ranks->is_array()) return names;
  for (const nlohmann::json& rank : *ranks) {
    if (rank.is_number_integer()) names.push_back("node" + std::to_string(rank.get<int64_t>()));
  }
  return names;
}

std::vector<MethodRun> WithSampledEvaluators(std::vector<MethodRun> methods, const std::vector<std::string>& sampled) {
  for (MethodRun& m : methods) m.sampled_evaluators = sampled;
  return methods;
}

// The methods of a comparison directory `input` (`root`) with a compare.json;
// its name, when it has one, becomes `title`.
Result<std::vector<MethodRun>> LoadComparison(const std::string& input, const fs::path& root, RunSet* set,
                                              std::string* title) {
  const fs::path compare_path = root / "compare.json";
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFileText(compare_path.string()));
  CHORUS_ASSIGN_OR_RETURN(nlohmann::json compare, ParseJsonFile(text, compare_path.string()));
  if (!compare.is_object()) return Err(DataLoss(compare_path.string() + ": not a JSON object"));
  if (!StringOr(compare, "name").empty()) *title = StringOr(compare, "name");
  double single_node_sps = kReportNaN;
  if (auto it = compare.find("single_node"); it != compare.end() && it->is_object()) {
    single_node_sps = NumberOr(*it, "samples_per_s", nullptr);
  }
  TakeSettings(compare, compare_path, set);
  const std::vector<std::string> sampled = SampledEvaluators(compare);
  // The methods compare.json lists, in its order; other folders (the
  // single-node baseline) are not methods. Without the key: every folder
  // holding node folders.
  auto listed = compare.find("methods");
  if (listed != compare.end() && !listed->is_array()) {
    return Err(DataLoss(compare_path.string() + ": \"methods\" is not an array"));
  }
  std::vector<MethodRun> methods;
  if (listed == compare.end()) {
    CHORUS_ASSIGN_OR_RETURN(methods, MethodsInSubFolders(root, single_node_sps, &set->warnings));
    if (methods.empty()) {
      return Err(InvalidArgument(input + ": compare.json has no \"methods\" and no sub-folder holds node folders"));
    }
    return WithSampledEvaluators(std::move(methods), sampled);
  }
  for (size_t i = 0; i < listed->size(); ++i) {
    CHORUS_ASSIGN_OR_RETURN(MethodRun m, MethodFromEntry((*listed)[i], i, root, compare_path.string(),
                                                         single_node_sps, &set->warnings));
    methods.push_back(std::move(m));
  }
  if (methods.empty()) return Err(InvalidArgument(compare_path.string() + ": lists no methods (none has run)"));
  return WithSampledEvaluators(std::move(methods), sampled);
}

// Appends `methods` of the input folder `folder_name` to `set`, with the
// families inferred where not given.
void AddMethods(std::vector<MethodRun> methods, const std::string& folder_name, RunSet* set) {
  for (MethodRun& m : methods) {
    if (m.family.empty()) m.family = InferFamily(m);
    // Keep names unique across inputs: prefix with the input's folder.
    auto taken = [&](const std::string& name) {
      return std::any_of(set->methods.begin(), set->methods.end(),
                         [&](const MethodRun& other) { return other.name == name; });
    };
    if (taken(m.name)) {
      const std::string base = folder_name + "/" + m.name;
      std::string name = base;
      for (int k = 2; taken(name); ++k) name = base + "#" + std::to_string(k);
      if (m.label == m.name) m.label = name;
      m.name = name;
    }
    set->methods.push_back(std::move(m));
  }
}

// One input directory: appends its methods to `set`. It is a comparison
// (compare.json), a run (node folders), or a folder of runs.
Status LoadInput(const std::string& input, RunSet* set, bool first) {
  const fs::path root(input);
  if (!IsDirectory(root)) return NotFound("no such directory: " + input);
  const std::string folder_name = FolderName(input);
  std::vector<MethodRun> methods;
  bool is_comparison = true;
  std::string title = folder_name;
  if (IsFile(root / "compare.json")) {
    CHORUS_ASSIGN_OR_RETURN(methods, LoadComparison(input, root, set, &title));
  } else if (HoldsNodeDirs(root)) {
    is_comparison = false;
    CHORUS_ASSIGN_OR_RETURN(MethodRun m, MethodFromFolder(root, folder_name, kReportNaN, &set->warnings));
    methods.push_back(std::move(m));
  } else {
    CHORUS_ASSIGN_OR_RETURN(methods, MethodsInSubFolders(root, kReportNaN, &set->warnings));
    if (methods.empty()) {
      return InvalidArgument(input +
                             ": no node folders (folders holding metrics.jsonl or summary.json) and "
                             "no method folders holding them");
    }
  }
  if (first) set->first_input_is_comparison = is_comparison;
  set->title = set->title.empty() ? title : set->title + " vs " + title;
  AddMethods(std::move(methods), folder_name, set);
  return Status::Ok();
}

// --- curves ---

// How the records of different nodes are matched into one point: the k-th
// record of every node (evaluations: every node evaluates on the same schedule,
// while asynchronous nodes are at different steps then), or equal steps.
enum class GroupKey { kOrder, kStep, kConsensusPoint };

struct Selected {
  const MetricsRecord* record;
  double epochs;
};

// Per node, the records that make a curve's points.
using NodeSeries = std::vector<std::vector<Selected>>;

double MeanIgnoringNaN(const std::vector<double>& values) {
  double sum = 0.0;
  int n = 0;
  for (double v : values) {
    if (!std::isnan(v)) {
      sum += v;
      ++n;
    }
  }
  return n > 0 ? sum / n : kReportNaN;
}

double MaxIgnoringNaN(const std::vector<double>& values) {
  double best = kReportNaN;
  for (double v : values) {
    if (!std::isnan(v) && (std::isnan(best) || v > best)) best = v;
  }
  return best;
}

// Groups the selected records of every node by `key` (order of appearance per
// node when some record lacks a step, or a consensus point) and averages `field` over nodes per group.
std::vector<CurvePoint> Aggregate(const NodeSeries& series, double MetricsRecord::*field, GroupKey key) {
  bool by_step = key == GroupKey::kStep, by_point = key == GroupKey::kConsensusPoint;
  for (const auto& node : series) {
    for (const Selected& s : node) {
      by_step = by_step && s.record->step >= 0;
      by_point = by_point && s.record->consensus_point >= 0;
    }
  }
  // key -> per node the last record with that key (a resumed node may repeat a step).
  std::map<int64_t, std::map<size_t, Selected>> groups;
  for (size_t n = 0; n < series.size(); ++n) {
    for (size_t i = 0; i < series[n].size(); ++i) {
      const MetricsRecord& r = *series[n][i].record;
      const int64_t k = by_point ? r.consensus_point : by_step ? r.step : static_cast<int64_t>(i);
      groups[k].insert_or_assign(n, series[n][i]);
    }
  }
  std::vector<CurvePoint> points;
  for (const auto& [k, members] : groups) {
    std::vector<double> values, times, bytes, epochs;
    int64_t step = members.begin()->second.record->step;
    for (const auto& [n, s] : members) {
      values.push_back(s.record->*field);
      times.push_back(s.record->time_s);
      bytes.push_back(s.record->bytes_sent);
      epochs.push_back(s.epochs);
      if (s.record->step != step) step = -1;
    }
    CurvePoint p;
    p.step = step;
    p.value = MeanIgnoringNaN(values);
    p.time_s = MaxIgnoringNaN(times);
    p.bytes_per_node = MeanIgnoringNaN(bytes);
    p.epochs = MeanIgnoringNaN(epochs);
    p.nodes = static_cast<int>(members.size());
    if (!std::isnan(p.value)) points.push_back(p);
  }
  return points;
}

// Samples one node processes per epoch, learnt from its first evaluation record
// after a whole epoch; NaN when there is none.
double SamplesPerEpoch(const NodeRun& node) {
  for (const MetricsRecord& r : node.records) {
    if (r.is_eval() && r.epoch >= 1 && r.samples > 0) return r.samples / r.epoch;
  }
  return kReportNaN;
}

}  // namespace

std::vector<MetricsRecord> ParseMetricsLines(std::string_view text, const std::string& path,
                                             std::vector<std::string>* warnings) {
  std::vector<MetricsRecord> records;
  std::set<std::string> bad_fields;
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    if (line.empty()) continue;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      warnings->push_back(path + ":" + std::to_string(line_no) + ": malformed JSON line skipped (" +
                          e.what() + ")");
      continue;
    }
    if (!object.is_object()) {
      warnings->push_back(path + ":" + std::to_string(line_no) + ": not a JSON object; line skipped");
      continue;
    }
    MetricsRecord r;
    r.line = line_no;
    const double step = NumberOr(object, "step", &bad_fields);
    if (!std::isnan(step) && step >= 0) r.step = static_cast<int64_t>(step);
    r.epoch = NumberOr(object, "epoch", &bad_fields);
    r.epoch_progress = NumberOr(object, "epoch_progress", &bad_fields);
    r.time_s = NumberOr(object, "time", &bad_fields);
    r.loss = NumberOr(object, "loss", &bad_fields);
    r.samples = NumberOr(object, "samples", &bad_fields);
    r.bytes_sent = NumberOr(object, "bytes_sent", &bad_fields);
    r.consensus_estimate = NumberOr(object, "consensus_distance_estimate", &bad_fields);
    if (std::isnan(r.consensus_estimate))
      r.consensus_estimate = NumberOr(object, "consensus_distance", &bad_fields);
    r.consensus_exact = NumberOr(object, "consensus_distance_exact", &bad_fields);
    const double point = NumberOr(object, "consensus_point", &bad_fields);
    if (!std::isnan(point) && point >= 0) r.consensus_point = static_cast<int64_t>(point);
    r.eval_accuracy = NumberOr(object, "eval_accuracy", &bad_fields);
    r.eval_loss = NumberOr(object, "eval_loss", &bad_fields);
    records.push_back(r);
  }
  for (const std::string& field : bad_fields) {
    warnings->push_back(path + ": field \"" + field + "\" is not a number on some lines; ignored there");
  }
  return records;
}

Result<NodeSummary> ParseNodeSummary(std::string_view text, const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(nlohmann::json object, ParseJsonFile(text, path));
  if (!object.is_object()) return Err(DataLoss(path + ":1: summary is not a JSON object"));
  NodeSummary s;
  s.test_accuracy = NumberOr(object, "test_accuracy", nullptr);
  s.test_loss = NumberOr(object, "test_loss", nullptr);
  s.train_seconds = NumberOr(object, "train_seconds", nullptr);
  s.samples_per_s = NumberOr(object, "samples_per_s", nullptr);
  s.bytes_sent = NumberOr(object, "bytes_sent", nullptr);
  s.consensus_distance_after = NumberOr(object, "consensus_distance_after", nullptr);
  s.exchange = StringOr(object, "exchange");
  s.model = StringOr(object, "model");
  s.epochs = NumberOr(object, "epochs", nullptr);
  s.global_batch = NumberOr(object, "global_batch", nullptr);
  s.world_size = NumberOr(object, "world_size", nullptr);
  s.steps = NumberOr(object, "steps", nullptr);
  s.samples = NumberOr(object, "samples", nullptr);
  s.threads = NumberOr(object, "threads", nullptr);
  if (auto host = object.find("host"); host != object.end() && host->is_object()) {
    s.host_cpu = StringOr(*host, "cpu");
    s.host_cores = NumberOr(*host, "cores", nullptr);
  }
  return s;
}

Result<NodeRun> LoadNodeRun(const std::string& dir, std::vector<std::string>* warnings) {
  NodeRun node;
  node.dir = dir;
  node.name = fs::path(dir).filename().string();
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  const fs::path summary = fs::path(dir) / "summary.json";
  const bool has_metrics = IsFile(metrics);
  const bool has_summary = IsFile(summary);
  if (!has_metrics && !has_summary) {
    return Err(NotFound(dir + " holds neither metrics.jsonl nor summary.json"));
  }
  if (has_metrics) {
    CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFileText(metrics.string()));
    node.records = ParseMetricsLines(text, metrics.string(), warnings);
  } else {
    warnings->push_back(dir + ": no metrics.jsonl (no curves for this node)");
  }
  if (has_summary) {
    CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFileText(summary.string()));
    CHORUS_ASSIGN_OR_RETURN(NodeSummary s, ParseNodeSummary(text, summary.string()));
    node.summary = std::move(s);
  } else {
    warnings->push_back(dir + ": no summary.json (the node did not finish); its final figures are missing");
  }
  return node;
}

Result<RunSet> LoadRunSet(const std::vector<std::string>& inputs) {
  if (inputs.empty()) return Err(InvalidArgument("no input directory given"));
  RunSet set;
  for (size_t i = 0; i < inputs.size(); ++i) {
    CHORUS_RETURN_IF_ERROR(LoadInput(inputs[i], &set, i == 0));
  }
  return set;
}

double RecordEpochs(const MetricsRecord& record, double samples_per_epoch) {
  if (!std::isnan(record.epoch_progress)) return record.epoch_progress;
  if (record.is_eval() && !std::isnan(record.epoch)) return record.epoch;
  if (!std::isnan(record.samples) && samples_per_epoch > 0) return record.samples / samples_per_epoch;
  return kReportNaN;
}

// A node's bytes sent or epochs at time t, from its records around t: its
// latest record's value moved towards the next record's in proportion to the
// time between them (a node that evaluates a moment after another has by then
// sent nearly its next record's bytes, not its previous one's).
template <typename Value>
double AtTime(const std::vector<Selected>& node, size_t latest, double t, const Value& value) {
  const double a = value(node[latest]);
  if (latest + 1 >= node.size()) return a;
  const double t0 = node[latest].record->time_s, t1 = node[latest + 1].record->time_s;
  const double b = value(node[latest + 1]);
  if (!(t1 > t0) || !(t > t0) || std::isnan(a) || std::isnan(b)) return a;
  return a + (b - a) * std::min(1.0, (t - t0) / (t1 - t0));
}

// See MethodCurves::accuracy_by_time.
std::vector<CurvePoint> AggregateByTime(const NodeSeries& series, double MetricsRecord::*field) {
  struct Event {
    double time;
    size_t node;
    size_t index;
  };
  std::vector<Event> events;
  for (size_t n = 0; n < series.size(); ++n) {
    for (size_t i = 0; i < series[n].size(); ++i) {
      const double t = series[n][i].record->time_s;
      if (!std::isnan(t)) events.push_back({t, n, i});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time < b.time; });
  // Nodes that never evaluate (a simulation samples a few) do not count.
  size_t evaluating = 0;
  for (const auto& node : series) evaluating += node.empty() ? 0 : 1;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> latest(series.size(), kNone);
  size_t have = 0;
  std::vector<CurvePoint> out;
  for (const Event& e : events) {
    if (latest[e.node] == kNone) ++have;
    latest[e.node] = e.index;
    if (have < evaluating) continue;
    std::vector<double> values, bytes, epochs;
    for (size_t n = 0; n < series.size(); ++n) {
      if (latest[n] == kNone) continue;
      const Selected& s = series[n][latest[n]];
      values.push_back(s.record->*field);
      bytes.push_back(AtTime(series[n], latest[n], e.time, [](const Selected& r) { return r.record->bytes_sent; }));
      epochs.push_back(AtTime(series[n], latest[n], e.time, [](const Selected& r) { return r.epochs; }));
    }
    CurvePoint p;
    p.time_s = e.time;
    p.value = MeanIgnoringNaN(values);
    p.bytes_per_node = MeanIgnoringNaN(bytes);
    p.epochs = MeanIgnoringNaN(epochs);
    p.nodes = static_cast<int>(evaluating);
    if (!std::isnan(p.value)) out.push_back(p);
  }
  return out;
}

namespace {

// The note for nodes of `method` with unequal numbers of evaluation records
// (`evals[n]` per node), "" when they agree. Where only a sample of the nodes
// evaluates by design (MethodRun::sampled_evaluators), the others' having none
// is expected and left out; any other difference is noted.
std::string EvaluationCountNote(const MethodRun& method, const NodeSeries& evals) {
  const std::vector<std::string>& sampled = method.sampled_evaluators;
  std::map<size_t, std::vector<std::string>> by_count;
  for (size_t n = 0; n < method.nodes.size(); ++n) {
    const std::string& name = method.nodes[n].name;
    const bool not_sampled = !sampled.empty() && std::find(sampled.begin(), sampled.end(), name) == sampled.end();
    if (not_sampled && evals[n].empty()) continue;
    by_count[evals[n].size()].push_back(name);
  }
  if (by_count.size() <= 1) return "";
  std::string detail;
  for (const auto& [count, names] : by_count) {
    if (names.size() > 8) {  // a simulation's hundreds of nodes: counts only
      detail += (detail.empty() ? "" : ", ") + std::to_string(names.size()) + " nodes: " + std::to_string(count);
      continue;
    }
    for (const std::string& name : names) {
      detail += (detail.empty() ? "" : ", ") + name + ": " + std::to_string(count);
    }
  }
  return "method " + method.name + ": nodes have different numbers of evaluation records (" + detail +
         "); later points average fewer nodes";
}

}  // namespace

MethodCurves BuildMethodCurves(const MethodRun& method, std::vector<std::string>* warnings) {
  const size_t n_nodes = method.nodes.size();
  NodeSeries evals(n_nodes), losses(n_nodes), consensus(n_nodes), estimates(n_nodes);
  for (size_t n = 0; n < method.nodes.size(); ++n) {
    const NodeRun& node = method.nodes[n];
    const double spe = SamplesPerEpoch(node);
    std::vector<Selected> eval_losses;
    std::set<int64_t> estimate_steps;
    for (const MetricsRecord& r : node.records) {
      const Selected s{&r, RecordEpochs(r, spe)};
      if (r.is_eval()) {
        evals[n].push_back(s);
        if (!std::isnan(r.loss)) eval_losses.push_back(s);
      } else if (!std::isnan(r.loss)) {
        losses[n].push_back(s);
      }
      if (!std::isnan(r.consensus_exact)) consensus[n].push_back(s);
      // An evaluation record repeats the estimate of the logging record at its step.
      if (!std::isnan(r.consensus_estimate) && !(r.is_eval() && r.step >= 0 && estimate_steps.count(r.step))) {
        estimates[n].push_back(s);
        if (r.step >= 0) estimate_steps.insert(r.step);
      }
    }
    // An evaluation record's loss is the last step's, not a window mean: only used
    // when the node logged nothing else.
    if (losses[n].empty()) losses[n] = std::move(eval_losses);
  }
  MethodCurves curves;
  curves.accuracy = Aggregate(evals, &MetricsRecord::eval_accuracy, GroupKey::kOrder);
  curves.accuracy_by_time = AggregateByTime(evals, &MetricsRecord::eval_accuracy);
  curves.train_loss = Aggregate(losses, &MetricsRecord::loss, GroupKey::kStep);
  // Measured at points (the nodes' own steps): only the records of points count.
  bool at_points = false;
  for (const auto& node : consensus) {
    for (const Selected& s : node) at_points = at_points || s.record->consensus_point >= 0;
  }
  if (at_points) {
    for (auto& node : consensus) std::erase_if(node, [](const Selected& s) { return s.record->consensus_point < 0; });
  }
  curves.consensus = Aggregate(consensus, &MetricsRecord::consensus_exact,
                               at_points ? GroupKey::kConsensusPoint : GroupKey::kStep);
  curves.consensus_estimate = Aggregate(estimates, &MetricsRecord::consensus_estimate, GroupKey::kStep);
  for (std::vector<CurvePoint>* curve : {&curves.consensus, &curves.consensus_estimate}) {
    std::erase_if(*curve, [](const CurvePoint& p) { return p.nodes < kMinConsensusNodes; });
  }

  if (warnings && !method.nodes.empty()) {
    if (curves.accuracy.empty()) {
      warnings->push_back("no evaluation records (eval_accuracy) for method " + method.name);
    } else if (std::string note = EvaluationCountNote(method, evals); !note.empty()) {
      warnings->push_back(std::move(note));
    }
  }
  return curves;
}

std::string CsvNumber(double v) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

}  // namespace chorus::node
