// report.html of `chorus report` (see report_html.h).
//
// The page is plain HTML 5 with one <style> block; plots are gnuplot's SVG
// inlined (ids prefixed per plot). The style is grey only, so that colour on
// the page comes from the plots (the browser test relies on that).
//
// Must not: read files, run processes or compute figures; emit text from files
// without HtmlEscape.
#include "node/lab/report/report_html.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace chorus::node {
namespace {

constexpr const char* kStyle = R"css(
body { font-family: sans-serif; color: #222; background: #fff; margin: 1.5em auto; max-width: 1240px; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
p.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f2f2f2; text-align: left; font-weight: 600; }
table.results td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.na { color: #888; text-align: center; }
table.kv th { width: 14em; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 1em; }
figure { margin: 0; border: 1px solid #ddd; padding: 0.5em; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
div.missing { border: 1px dashed #aaa; color: #555; padding: 2em 1em; text-align: center; background: #fafafa; }
ul.notes li { margin: 0.2em 0; font-family: monospace; font-size: 0.92em; }
code { background: #f4f4f4; padding: 0 0.2em; }
dl.columns dt { font-weight: 600; float: left; clear: left; width: 15em; }
dl.columns dd { margin-left: 15.5em; margin-bottom: 0.2em; }
)css";

// A settings value for people: strings as they are, objects as "key: value; ...".
std::string SettingText(const nlohmann::json& value) {
  if (value.is_null()) return "none";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) {
    std::string out;
    for (auto it = value.begin(); it != value.end(); ++it) {
      out += (out.empty() ? "" : "; ") + it.key() + ": " + SettingText(it.value());
    }
    return out.empty() ? "none" : out;
  }
  if (value.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", value.get<double>());
    return buf;
  }
  return value.dump();
}

// A sentence where the setting has one (report_environment.h), else its value.
std::string SettingCellText(const std::string& key, const nlohmann::json& value) {
  const std::string sentence = SettingSentence(key, value);
  return sentence.empty() ? SettingText(value) : sentence;
}

std::string Row(const std::string& key, const std::string& value) {
  return "<tr><th>" + HtmlEscape(key) + "</th><td>" + HtmlEscape(value) + "</td></tr>\n";
}

std::string Number(double v, const char* format) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

void WriteSettings(const HtmlReportInputs& in, std::ostringstream& out) {
  out << "<h2>Settings</h2>\n<table class=\"kv\">\n";
  if (in.settings.is_object()) {
    static const std::pair<const char*, const char*> kKnown[] = {{"name", "comparison"},
                                                                 {"kind", "kind"},
                                                                 {"nodes", "nodes per method"},
                                                                 {"model", "model"},
                                                                 {"epochs", "epochs"},
                                                                 {"global_batch", "global batch"},
                                                                 {"link", "link"},
                                                                 {"single_node", "single-node baseline (S)"}};
    for (const auto& [key, heading] : kKnown) {
      auto it = in.settings.find(key);
      if (it == in.settings.end()) continue;
      out << Row(heading, SettingCellText(key, *it));
    }
    for (auto it = in.settings.begin(); it != in.settings.end(); ++it) {
      bool known = it.key() == "methods" || it.key() == "target_accuracy";
      for (const auto& k : kKnown) known = known || it.key() == k.first;
      if (!known) out << Row(it.key(), SettingCellText(it.key(), it.value()));
    }
  } else {
    out << Row("source", "no compare.json: figures from the nodes' summary.json");
    // The first summary found speaks for the runs.
    const NodeSummary* first = nullptr;
    for (size_t m = 0; in.methods && m < in.methods->size() && !first; ++m) {
      for (const NodeRun& node : (*in.methods)[m].nodes) {
        if (node.summary) {
          first = &*node.summary;
          break;
        }
      }
    }
    if (first) {
      if (!first->model.empty()) out << Row("model", first->model);
      if (!std::isnan(first->epochs)) out << Row("epochs", Number(first->epochs, "%.0f"));
      if (!std::isnan(first->global_batch)) out << Row("global batch", Number(first->global_batch, "%.0f"));
    }
  }
  for (const auto& [heading, text] : EnvironmentRows(in.environment)) out << Row(heading, text);
  out << Row("target accuracy", Number(in.target_accuracy * 100.0, "%.4g") + " %");
  out << "</table>\n";
}

void WriteTable(const HtmlReportInputs& in, std::ostringstream& out) {
  out << "<h2>Results</h2>\n<table class=\"results\">\n<tr>";
  for (const std::string& h : TableHeadings()) out << "<th>" << HtmlEscape(h) << "</th>";
  out << "</tr>\n";
  for (const TableRow& row : in.rows) {
    const std::vector<std::string> cells = TableCells(row);
    out << "<tr>";
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c == 0) {
        out << "<th title=\"" << HtmlEscape(row.method) << "\">" << HtmlEscape(cells[c]) << "</th>";
      } else if (cells[c] == "-") {
        out << "<td class=\"na\">-</td>";
      } else {
        out << "<td class=\"num\">" << HtmlEscape(cells[c]) << "</td>";
      }
    }
    out << "</tr>\n";
  }
  out << "</table>\n<dl class=\"columns\">\n"
      << "<dt>final acc</dt><dd>test accuracy of the final model (after the consensus phase for gossip), "
         "mean over nodes.</dd>\n"
      << "<dt>time / bytes / epochs to target</dt><dd>at the first evaluation whose mean accuracy over nodes "
         "reaches the target; time is the slowest node's training time; \"-\" when never reached.</dd>\n"
      << "<dt>train time</dt><dd>slowest node's training time (summary).</dd>\n"
      << "<dt>bytes sent /node</dt><dd>data-plane bytes sent, mean over nodes; MB = 10<sup>6</sup> "
         "bytes.</dd>\n"
      << "<dt>efficiency e</dt><dd>T / (S &times; N): T the sum of the nodes' samples/s, S one node's "
         "samples/s alone, N the nodes; \"-\" without a single-node measurement. Nodes that share cores (see "
         "Settings: nodes shared cores) cannot reach 1.</dd>\n"
      << "<dt>consensus dist after</dt><dd>distance between replicas after the consensus phase "
         "(gossip).</dd>\n"
      << "</dl>\n";
}

void WriteMethods(const HtmlReportInputs& in, std::ostringstream& out) {
  if (!in.methods) return;
  out << "<h2>Methods</h2>\n<table>\n<tr><th>method</th><th>family</th><th>nodes</th><th>exchange</th>"
         "<th>settings</th><th>exit code</th><th>wall time (s)</th><th>folder</th></tr>\n";
  for (const MethodRun& m : *in.methods) {
    std::string exchange;
    for (const NodeRun& node : m.nodes) {
      if (node.summary && !node.summary->exchange.empty()) {
        exchange = node.summary->exchange;
        break;
      }
    }
    out << "<tr><th>" << HtmlEscape(m.label) << "</th><td>" << HtmlEscape(m.family.empty() ? "-" : m.family)
        << "</td><td>" << m.nodes.size() << "</td><td>" << HtmlEscape(exchange.empty() ? "-" : exchange)
        << "</td><td>";
    if (m.overrides.empty()) out << "-";
    for (size_t i = 0; i < m.overrides.size(); ++i) {
      out << (i ? "<br>" : "") << "<code>" << HtmlEscape(m.overrides[i]) << "</code>";
    }
    out << "</td><td>" << (m.exit_code ? std::to_string(*m.exit_code) : std::string("-")) << "</td><td>"
        << Number(m.wall_seconds, "%.1f") << "</td><td><code>" << HtmlEscape(m.dir) << "</code></td></tr>\n";
  }
  out << "</table>\n";
}

void WritePlots(const HtmlReportInputs& in, std::ostringstream& out) {
  out << "<h2>Plots</h2>\n<div class=\"plots\">\n";
  for (size_t i = 0; i < in.plots.size(); ++i) {
    const Plot& plot = in.plots[i];
    out << "<figure id=\"plot-" << HtmlEscape(plot.spec.id) << "\">\n";
    std::string prefix = "p";  // built step by step: GCC 12 warns (-Wrestrict) on "p" + std::string
    prefix += std::to_string(i);
    prefix += '_';
    const std::string svg = plot.svg.empty() ? std::string() : InlineSvg(plot.svg, prefix);
    if (!svg.empty()) {
      out << svg << "\n";
    } else {
      const std::string why = !plot.note.empty() ? plot.note : "the SVG could not be inlined";
      out << "<div class=\"missing\"><b>" << HtmlEscape(plot.spec.title)
          << "</b><br>Not drawn: " << HtmlEscape(why) << "</div>\n";
    }
    out << "<figcaption><b>" << HtmlEscape(plot.spec.title) << ".</b> " << HtmlEscape(plot.spec.caption)
        << "</figcaption>\n</figure>\n";
  }
  out << "</div>\n";
}

// True when `text` at `pos` starts with `word` (ASCII, case-insensitive).
bool StartsWithNoCase(std::string_view text, size_t pos, std::string_view word) {
  if (pos + word.size() > text.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[pos + i])) != word[i]) return false;
  }
  return true;
}

// Whether `svg` holds anything that could run: <script>, on* handlers, javascript: URLs.
bool HasActiveContent(std::string_view svg) {
  for (size_t i = 0; i < svg.size(); ++i) {
    if (StartsWithNoCase(svg, i, "<script") || StartsWithNoCase(svg, i, "javascript:")) return true;
    if (i > 0 && std::isspace(static_cast<unsigned char>(svg[i - 1])) && StartsWithNoCase(svg, i, "on")) {
      size_t j = i + 2;
      while (j < svg.size() && std::isalpha(static_cast<unsigned char>(svg[j]))) ++j;
      if (j > i + 2 && j < svg.size() && svg[j] == '=') return true;
    }
  }
  return false;
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string InlineSvg(std::string_view svg, std::string_view id_prefix) {
  const size_t start = svg.find("<svg");
  if (start == std::string_view::npos) return "";
  std::string_view body = svg.substr(start);
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
  if (HasActiveContent(body)) return "";
  // Prefix `id="x"`, `href="#x"` (also xlink:href) and `url(#x)`.
  std::string out;
  out.reserve(body.size() + body.size() / 16);
  for (size_t i = 0; i < body.size();) {
    const bool after_space = i > 0 && std::isspace(static_cast<unsigned char>(body[i - 1]));
    if (after_space && body.compare(i, 3, "id=") == 0 && i + 3 < body.size() &&
        (body[i + 3] == '"' || body[i + 3] == '\'')) {
      out.append(body.substr(i, 4)).append(id_prefix);
      i += 4;
    } else if (body.compare(i, 5, "href=") == 0 && i + 6 < body.size() &&
               (body[i + 5] == '"' || body[i + 5] == '\'') && body[i + 6] == '#') {
      out.append(body.substr(i, 7)).append(id_prefix);
      i += 7;
    } else if (body.compare(i, 5, "url(#") == 0) {
      out.append("url(#").append(id_prefix);
      i += 5;
    } else {
      out += body[i++];
    }
  }
  return out;
}

std::string RenderReportHtml(const HtmlReportInputs& in) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>Chorus report: " << HtmlEscape(in.title) << "</title>\n"
      << "<style>" << kStyle << "</style>\n</head>\n<body>\n"
      << "<h1>Chorus report: " << HtmlEscape(in.title) << "</h1>\n<p class=\"meta\">Generated "
      << HtmlEscape(in.generated_at) << " by <code>chorus report</code> from ";
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    out << (i ? ", " : "") << "<code>" << HtmlEscape(in.inputs[i]) << "</code>";
  }
  out << ".</p>\n";
  WriteSettings(in, out);
  WriteTable(in, out);
  WritePlots(in, out);
  WriteMethods(in, out);
  out << "<h2>Notes</h2>\n";
  if (in.notes.empty()) {
    out << "<p>None.</p>\n";
  } else {
    out << "<ul class=\"notes\">\n";
    for (const std::string& note : in.notes) out << "<li>" << HtmlEscape(note) << "</li>\n";
    out << "</ul>\n";
  }
  if (!in.files_note.empty()) out << "<h2>Files</h2>\n<p>" << HtmlEscape(in.files_note) << "</p>\n";
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace chorus::node
