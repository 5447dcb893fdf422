// Shared by the report tests: a report of one comparison folder, built
// without running gnuplot (the HTML and the .gp scripts only).
#pragma once

#include <string>

#include "common/status.h"
#include "node/lab/report/report.h"

namespace chorus::node {

inline Result<ReportResult> BuildReportWithoutPlots(const std::string& dir) {
  ReportOptions options;
  options.inputs = {dir};
  options.render_plots = false;
  return BuildReport(options);
}

}  // namespace chorus::node
