// Reading docs/*.md in tests that hold the docs to the program: a page's
// text, one section of it, the first table of a section, and the `code`
// spans and flags in a table cell. Plain Markdown as the docs write it:
// ATX headings (`## ...`), pipe tables with `\|` for a literal bar.
//
// Must not: know what any page says; the tests say what they look for.
#pragma once

#include <cctype>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace chorus::testing {

// The text of `relative` (e.g. "docs/lab.md") under the source tree; "" when unreadable.
inline std::string SourceText(const std::string& relative) {
  std::ifstream in(std::string(CHORUS_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The heading level of `line` (the count of leading '#' before a space), 0 for none.
inline int HeadingLevel(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[n] == '#') ++n;
  return n > 0 && n < line.size() && line[n] == ' ' ? static_cast<int>(n) : 0;
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The section of `text` whose heading line starts with `heading` (e.g.
// "## Example configs"), from after that line to the next heading of the same
// or a higher level; "" when there is no such heading. Lines inside ``` fences
// are never headings.
inline std::string Section(const std::string& text, const std::string& heading) {
  std::string out;
  int level = 0;
  bool fenced = false;
  for (const std::string& line : Lines(text)) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    const int here = fenced ? 0 : HeadingLevel(line);
    if (level > 0 && here > 0 && here <= level) break;
    if (level > 0) out += line + "\n";
    if (level == 0 && here > 0 && line.rfind(heading, 0) == 0) level = here;
  }
  return out;
}

// The cells of one table row "| a | b \| c |" -> {"a", "b | c"}, trimmed.
inline std::vector<std::string> TableCells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      const size_t begin = cell.find_first_not_of(' ');
      const size_t end = cell.find_last_not_of(' ');
      cells.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// The body rows of the first pipe table in `section` (its heading row and
// the |---| row left out), each as its cells.
inline std::vector<std::vector<std::string>> FirstTableRows(const std::string& section) {
  std::vector<std::vector<std::string>> rows;
  bool in_table = false;
  int row = 0;
  for (const std::string& line : Lines(section)) {
    const bool table_line = line.rfind("|", 0) == 0;
    if (in_table && !table_line) break;
    if (!table_line) continue;
    in_table = true;
    if (row++ >= 2) rows.push_back(TableCells(line));
  }
  return rows;
}

// The `code` spans of `text`, in order.
inline std::vector<std::string> CodeSpans(const std::string& text) {
  std::vector<std::string> spans;
  for (size_t open = text.find('`'); open != std::string::npos; open = text.find('`', open + 1)) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    spans.push_back(text.substr(open + 1, close - open - 1));
    open = close;
  }
  return spans;
}

// The words of the first `code` span after `marker` in `text` ("Built-in
// methods: `a b c`" -> {"a", "b", "c"}; the span may wrap lines).
inline std::vector<std::string> CodeWordsAfter(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  if (at == std::string::npos) return {};
  const std::vector<std::string> spans = CodeSpans(text.substr(at + marker.size()));
  std::vector<std::string> words;
  if (spans.empty()) return words;
  std::stringstream in(spans.front());
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The option names in a flag-table cell: "`-n, --nodes N`" -> {"-n", "--nodes"};
// "`-- ARGS`" (the end of options) names none.
inline std::vector<std::string> FlagNames(const std::string& cell) {
  static const std::regex kFlag(R"((^|[^-\w])(--?[a-z][a-z0-9-]*))");
  std::vector<std::string> names;
  for (std::sregex_iterator it(cell.begin(), cell.end(), kFlag), end; it != end; ++it) names.push_back((*it)[2]);
  return names;
}

}  // namespace chorus::testing
