// docs/lab.md's table of the report's columns against the program: its first
// column is TableHeadings(), in order, so a column added to the report fails
// here until the page explains it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "node/lab/report/report_table.h"
#include "tests/util/docs_text.h"

namespace chorus::node {
namespace {

TEST(ReportDocsTest, TheColumnsTableNamesEveryColumnInOrder) {
  using chorus::testing::FirstTableRows;
  using chorus::testing::Section;
  using chorus::testing::SourceText;
  std::vector<std::string> documented;
  for (const std::vector<std::string>& row : FirstTableRows(Section(SourceText("docs/lab.md"), "### The table"))) {
    documented.push_back(row.empty() ? "" : row[0]);
  }
  EXPECT_EQ(documented, TableHeadings()) << "docs/lab.md, \"The table\": its column names differ from the report's "
                                            "(TableHeadings, node/lab/report/report_table.cc)";
}

}  // namespace
}  // namespace chorus::node
