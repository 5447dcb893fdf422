// Spectral gap: cyclic Jacobi for symmetric matrices, power iteration for period
// products of column-stochastic matrices. See spectral_gap.h.
#include "topologies/spectral_gap.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "topologies/mixing_weights.h"
#include "common/split_mix64.h"

namespace chorus::topologies {
namespace {

Status CheckSquare(const std::vector<double>& a, int n, const std::string& what) {
  if (n < 1) return InvalidArgument(what + ": n is " + std::to_string(n) + "; must be >= 1");
  if (a.size() != static_cast<size_t>(n) * n) {
    return InvalidArgument(what + ": matrix has " + std::to_string(a.size()) +
                           " entries, expected n*n = " + std::to_string(int64_t{n} * n));
  }
  return Status::Ok();
}

// Sparse matrix in compressed rows: y_i = sum over entries of row i.
struct SparseRows {
  std::vector<int64_t> row_start;  // n + 1 offsets into col / value
  std::vector<int> col;
  std::vector<double> value;
};

SparseRows ToSparse(const std::vector<double>& a, int n) {
  SparseRows m;
  m.row_start.push_back(0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double v = a[static_cast<size_t>(i) * n + j];
      if (v != 0.0) {
        m.col.push_back(j);
        m.value.push_back(v);
      }
    }
    m.row_start.push_back(static_cast<int64_t>(m.col.size()));
  }
  return m;
}

void Multiply(const SparseRows& m, const std::vector<double>& x, std::vector<double>& y) {
  const int n = static_cast<int>(x.size());
  for (int i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t e = m.row_start[i]; e < m.row_start[i + 1]; ++e) sum += m.value[e] * x[m.col[e]];
    y[i] = sum;
  }
}

// Projects onto the zero-sum subspace (removes the consensus component) and returns
// the Euclidean norm of the result.
double CenterAndNorm(std::vector<double>& x) {
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double norm2 = 0.0;
  for (double& v : x) {
    v -= mean;
    norm2 += v * v;
  }
  return std::sqrt(norm2);
}

// One period product y = M x, projected back onto the zero-sum subspace (M keeps sums
// because each W is column stochastic; re-centering only removes rounding drift).
void ApplyPeriod(const std::vector<SparseRows>& rounds, const std::vector<double>& x,
                 std::vector<double>& y, std::vector<double>& scratch) {
  y = x;
  for (const SparseRows& w : rounds) {
    Multiply(w, y, scratch);
    y.swap(scratch);
  }
  CenterAndNorm(y);
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Reads |lambda_2| off the unit iterate x when x (nearly) lies in an invariant subspace
// of M of dimension one (a real dominant eigenvalue) or two (a complex pair, or +-lambda).
// With y1 = M x and y2 = M y1: the 1-D model y1 = lambda x, else the 2-D model
// y2 = a y1 + b x, whose roots z^2 = a z + b are the eigenvalues on span{x, y1}.
// Returns -1 when neither model's relative residual is within `residual_tolerance`.
double RitzRate(const std::vector<SparseRows>& rounds, const std::vector<double>& x,
                double residual_tolerance, std::vector<double>& y1, std::vector<double>& y2,
                std::vector<double>& scratch) {
  ApplyPeriod(rounds, x, y1, scratch);
  ApplyPeriod(rounds, y1, y2, scratch);
  const double y1y1 = Dot(y1, y1);
  const double y2y2 = Dot(y2, y2);
  if (y1y1 == 0.0 || y2y2 == 0.0) return 0.0;
  const double c = Dot(x, y1);  // Rayleigh quotient, x has unit norm
  double residual1 = 0.0;  // ||y1 - c x||^2, summed directly (y1y1 - c^2 would cancel)
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = y1[i] - c * x[i];
    residual1 += r * r;
  }
  if (std::sqrt(residual1 / y1y1) <= residual_tolerance) return std::abs(c);
  // Normal equations for min ||y2 - a y1 - b x||: [[1, c], [c, y1y1]] [b, a]^T = [x.y2, y1.y2].
  const double det = y1y1 - c * c;
  if (det <= 1e-14 * y1y1) return -1.0;  // x and y1 (nearly) parallel: no 2-D model
  const double xy2 = Dot(x, y2);
  const double y1y2 = Dot(y1, y2);
  const double b = (y1y1 * xy2 - c * y1y2) / det;
  const double a = (y1y2 - c * xy2) / det;
  double residual2 = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = y2[i] - a * y1[i] - b * x[i];
    residual2 += r * r;
  }
  if (std::sqrt(residual2 / y2y2) > residual_tolerance) return -1.0;
  const double disc = a * a + 4.0 * b;
  if (disc < 0.0) return std::sqrt(-b);  // complex pair: |z|^2 = -b
  const double root = std::sqrt(disc);
  return std::max(std::abs(0.5 * (a + root)), std::abs(0.5 * (a - root)));
}

// Power iteration for one start vector. Returns the rate estimate; sets `periods`
// and `converged`.
double RateFromStart(const std::vector<SparseRows>& rounds, int n, const PowerIterationOptions& options,
                     SplitMix64& rng, int64_t& periods, bool& converged) {
  // A period product that leaves less than this fraction of a unit vector has, up to
  // rounding (about n * 1e-16 per matrix), annihilated the zero-sum subspace.
  constexpr double kNegligibleGrowth = 1e-12;
  std::vector<double> x(n), y(n), y2(n), scratch(n);
  for (double& v : x) v = rng.Symmetric();
  double norm = CenterAndNorm(x);
  if (norm == 0.0) {  // all draws equal: practically impossible, but keep x nonzero
    x[0] = 1.0;
    x[n - 1] = -1.0;
    norm = CenterAndNorm(x);
  }
  for (double& v : x) v /= norm;

  std::vector<double> log_sum = {0.0};  // log_sum[k] = L_k
  double previous_window = -1.0;
  double previous_ritz = -1.0;
  double estimate = 0.0;
  int64_t next_window_check = std::max(options.min_periods, 2);
  converged = false;
  for (int64_t k = 1; k <= options.max_periods; ++k) {
    ApplyPeriod(rounds, x, y, scratch);
    x.swap(y);
    const double growth = std::sqrt(Dot(x, x));
    periods = k;
    if (!(growth > kNegligibleGrowth)) {
      converged = true;
      return 0.0;
    }
    for (double& v : x) v /= growth;
    log_sum.push_back(log_sum.back() + std::log(growth));

    if (k >= options.min_periods && k % options.check_every == 0) {
      const double ritz = RitzRate(rounds, x, options.residual_tolerance, y, y2, scratch);
      if (ritz >= 0.0 && previous_ritz >= 0.0 &&
          std::abs(ritz - previous_ritz) <= options.tolerance * ritz) {
        converged = true;
        return ritz;
      }
      previous_ritz = ritz;
    }
    if (k == next_window_check || k == options.max_periods) {
      const int64_t half = k / 2;
      estimate = std::exp((log_sum[k] - log_sum[half]) / static_cast<double>(k - half));
      if (previous_window >= 0.0 && std::abs(estimate - previous_window) <= options.tolerance * estimate) {
        converged = true;
        return estimate;
      }
      previous_window = estimate;
      next_window_check *= 2;
    }
  }
  return estimate;
}

// Jacobi with the parallel (Brent-Luk round-robin) ordering. A sweep has m - 1 rounds
// (m = n rounded up to even); each round pairs every index with another, as in a
// round-robin tournament, and applies the n/2 disjoint rotations together: A <- J^T A J,
// with J's (p, q) block [[c, s], [-s, c]] chosen from the current a_pp, a_qq, a_pq so
// that a_pq becomes 0 (disjoint rotations do not disturb each other's target entry).
// J^T A touches whole rows p, q (contiguous) and A J touches columns p, q inside each
// row, so memory is walked in order; this is what makes n = 256 take well under a
// second. Off-diagonal mass falls quadratically once small; stop when it is below
// 1e-15 of the matrix norm, leaving eigenvalue errors at the rounding level (about
// n * 2^-52 * ||a||).
class JacobiEigenvalues {
 public:
  JacobiEigenvalues(std::vector<double> a, int n) : a_(std::move(a)), n_(n), m_(n + (n % 2)), order_(m_) {
    for (int i = 0; i < m_; ++i) order_[i] = i;
    rotations_.reserve(m_ / 2);
  }

  // Checks that a_ is symmetric (to 1e-12 of its norm) and makes it exactly so.
  Status Symmetrize() {
    double frob2 = 0.0;
    for (double v : a_) frob2 += v * v;
    scale_ = std::sqrt(frob2);
    for (int p = 0; p < n_; ++p) {
      for (int q = p + 1; q < n_; ++q) {
        const double apq = at(p, q);
        const double aqp = at(q, p);
        if (std::abs(apq - aqp) > 1e-12 * scale_) {
          return InvalidArgument("symmetric eigenvalues: entries (" + std::to_string(p) + ", " + std::to_string(q) +
                                 ") and (" + std::to_string(q) + ", " + std::to_string(p) +
                                 ") differ; the matrix is not symmetric");
        }
        at(p, q) = at(q, p) = 0.5 * (apq + aqp);
      }
    }
    return Status::Ok();
  }

  // Sweeps until the off-diagonal mass is negligible; false when kMaxSweeps did not get there.
  bool Converge() {
    if (n_ == 1) return true;
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      if (OffDiagonalIsNegligible()) return true;
      for (int round = 0; round + 1 < m_; ++round) {
        PlanRotations(sweep);
        ApplyRotations();
        NextPairing();
      }
    }
    return false;
  }

  std::vector<double> SortedDiagonal() const {
    std::vector<double> eigenvalues(n_);
    for (int i = 0; i < n_; ++i) eigenvalues[i] = a_[static_cast<size_t>(i) * n_ + i];
    std::sort(eigenvalues.begin(), eigenvalues.end());
    return eigenvalues;
  }

  static constexpr int kMaxSweeps = 100;

 private:
  struct Rotation {
    int p, q;
    double c, s;
  };

  double& at(int r, int c) { return a_[static_cast<size_t>(r) * n_ + c]; }

  bool OffDiagonalIsNegligible() {
    double off2 = 0.0;
    for (int p = 0; p < n_; ++p) {
      for (int q = p + 1; q < n_; ++q) off2 += at(p, q) * at(p, q);
    }
    return std::sqrt(off2) <= 1e-15 * scale_ || off2 == 0.0;
  }

  // This round's rotations, one per pair (index m_ - 1 == n_, when n_ is
  // odd, is a bye: its pairs are skipped).
  void PlanRotations(int sweep) {
    rotations_.clear();
    for (int i = 0; i < m_ / 2; ++i) {
      const int p = std::min(order_[i], order_[m_ - 1 - i]);
      const int q = std::max(order_[i], order_[m_ - 1 - i]);
      if (q >= n_) continue;  // paired with the bye
      const double apq = at(p, q);
      if (apq == 0.0) continue;
      const double app = at(p, p);
      const double aqq = at(q, q);
      const double diff = aqq - app;
      // After a few sweeps, drop entries too small to change either diagonal entry.
      if (sweep > 3 && std::abs(app) + 100.0 * std::abs(apq) == std::abs(app) &&
          std::abs(aqq) + 100.0 * std::abs(apq) == std::abs(aqq)) {
        at(p, q) = at(q, p) = 0.0;
        continue;
      }
      double t;  // tan of the rotation angle, the smaller root of t^2 + 2 theta t - 1 = 0
      if (std::abs(diff) + 100.0 * std::abs(apq) == std::abs(diff)) {
        t = apq / diff;
      } else {
        const double theta = 0.5 * diff / apq;
        t = 1.0 / (std::abs(theta) + std::sqrt(1.0 + theta * theta));
        if (theta < 0.0) t = -t;
      }
      const double c = 1.0 / std::sqrt(1.0 + t * t);
      rotations_.push_back({p, q, c, t * c});
    }
  }

  void ApplyRotations() {
    // Rows: row_p <- c row_p - s row_q, row_q <- s row_p + c row_q.
    for (const Rotation& r : rotations_) {
      double* row_p = &at(r.p, 0);
      double* row_q = &at(r.q, 0);
      for (int k = 0; k < n_; ++k) {
        const double g = row_p[k];
        const double h = row_q[k];
        row_p[k] = r.c * g - r.s * h;
        row_q[k] = r.s * g + r.c * h;
      }
    }
    // Columns, row by row: a_kp <- c a_kp - s a_kq, a_kq <- s a_kp + c a_kq.
    for (int k = 0; k < n_; ++k) {
      double* row = &at(k, 0);
      for (const Rotation& r : rotations_) {
        const double g = row[r.p];
        const double h = row[r.q];
        row[r.p] = r.c * g - r.s * h;
        row[r.q] = r.s * g + r.c * h;
      }
    }
    for (const Rotation& r : rotations_) at(r.p, r.q) = at(r.q, r.p) = 0.0;  // exact by design
  }

  // Round-robin: keep order_[0], rotate the rest by one place.
  void NextPairing() {
    const int last = order_[m_ - 1];
    for (int i = m_ - 1; i > 1; --i) order_[i] = order_[i - 1];
    if (m_ > 1) order_[1] = last;
  }

  std::vector<double> a_;
  const int n_;
  const int m_;
  std::vector<int> order_;
  std::vector<Rotation> rotations_;
  double scale_ = 0.0;
};

}  // namespace

Result<std::vector<double>> SymmetricEigenvalues(std::vector<double> a, int n) {
  CHORUS_RETURN_IF_ERROR(CheckSquare(a, n, "symmetric eigenvalues"));
  JacobiEigenvalues jacobi(std::move(a), n);
  CHORUS_RETURN_IF_ERROR(jacobi.Symmetrize());
  if (!jacobi.Converge()) {
    return Err(Internal("symmetric eigenvalues: Jacobi did not converge in " +
                        std::to_string(JacobiEigenvalues::kMaxSweeps) + " sweeps for n = " + std::to_string(n)));
  }
  return jacobi.SortedDiagonal();
}

Result<double> SymmetricSpectralGap(const std::vector<double>& w, int n) {
  CHORUS_RETURN_IF_ERROR(CheckSquare(w, n, "spectral gap"));
  for (int i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int j = 0; j < n; ++j) sum += w[static_cast<size_t>(i) * n + j];
    if (std::abs(sum - 1.0) > 1e-9) {
      return Err(InvalidArgument("spectral gap: row " + std::to_string(i) + " sums to " +
                                 std::to_string(sum) + ", not 1; W must be stochastic"));
    }
  }
  if (n == 1) return 1.0;
  CHORUS_ASSIGN_OR_RETURN(std::vector<double> eigenvalues, SymmetricEigenvalues(w, n));
  for (double& v : eigenvalues) v = std::abs(v);
  std::sort(eigenvalues.begin(), eigenvalues.end(), std::greater<>());
  // A disconnected graph has |lambda_2| = 1, computed as 1 +- rounding: report 0, not -1e-16.
  return std::clamp(1.0 - eigenvalues[1], 0.0, 1.0);
}

Result<SpectralGapEstimate> EstimateProductSpectralGap(const std::vector<std::vector<double>>& rounds,
                                                       int n, const PowerIterationOptions& options) {
  if (rounds.empty()) return Err(InvalidArgument("spectral gap: no round matrices"));
  if (options.num_vectors < 1 || options.min_periods < 1 || options.max_periods < 1 ||
      options.check_every < 1 || !(options.tolerance > 0.0) || !(options.residual_tolerance > 0.0)) {
    return Err(InvalidArgument(
        "spectral gap: power iteration needs num_vectors, min_periods, max_periods, check_every >= 1 "
        "and tolerance, residual_tolerance > 0"));
  }
  std::vector<SparseRows> sparse;
  for (size_t t = 0; t < rounds.size(); ++t) {
    const std::string what = "spectral gap, round " + std::to_string(t);
    CHORUS_RETURN_IF_ERROR(CheckSquare(rounds[t], n, what));
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int i = 0; i < n; ++i) sum += rounds[t][static_cast<size_t>(i) * n + j];
      if (std::abs(sum - 1.0) > 1e-9) {
        return Err(InvalidArgument(what + ": column " + std::to_string(j) + " sums to " +
                                   std::to_string(sum) + ", not 1; W must be column stochastic"));
      }
    }
    sparse.push_back(ToSparse(rounds[t], n));
  }
  SpectralGapEstimate result;
  result.period = static_cast<int>(rounds.size());
  if (n == 1) {
    result.gap_per_round = 1.0;  // nothing to mix: the zero-sum subspace is {0}
    return result;
  }
  SplitMix64 rng(options.seed);
  double rate = 0.0;
  for (int v = 0; v < options.num_vectors; ++v) {
    int64_t periods = 0;
    bool converged = false;
    rate = std::max(rate, RateFromStart(sparse, n, options, rng, periods, converged));
    result.iterations += periods;
    result.converged = result.converged && converged;
  }
  result.rate_per_period = rate;
  result.gap_per_round = std::clamp(1.0 - std::pow(rate, 1.0 / result.period), 0.0, 1.0);
  return result;
}

Result<SpectralGapEstimate> GraphSpectralGap(const Graph& graph, const PowerIterationOptions& options) {
  const int n = graph.NumNodes();
  if (graph.IsUndirected()) {
    CHORUS_ASSIGN_OR_RETURN(std::vector<double> w, MetropolisHastingsMatrix(graph));
    CHORUS_ASSIGN_OR_RETURN(double gap, SymmetricSpectralGap(w, n));
    SpectralGapEstimate result;
    result.gap_per_round = gap;
    result.rate_per_period = 1.0 - gap;
    result.exact = true;
    return result;
  }
  std::vector<std::vector<double>> rounds;
  for (int t = 0; t < graph.Period(); ++t) rounds.push_back(PushSumMatrix(graph, t));
  auto estimate = EstimateProductSpectralGap(rounds, n, options);
  if (!estimate) return Err(estimate.error().WithContext("graph " + graph.Name()));
  return estimate;
}

Result<int64_t> ExpectedConsensusRounds(double gap, double eps) {
  if (!(gap > 0.0 && gap <= 1.0)) {
    return Err(InvalidArgument("consensus rounds: spectral gap " + std::to_string(gap) +
                               " is not in (0, 1]; with no gap, consensus is never reached"));
  }
  if (!(eps > 0.0 && eps < 1.0)) {
    return Err(InvalidArgument("consensus rounds: eps " + std::to_string(eps) +
                               " is not in (0, 1)"));
  }
  if (gap == 1.0) return int64_t{1};
  const double rounds = std::ceil(std::log(eps) / std::log1p(-gap));
  if (!(rounds < 9.0e18)) {
    return Err(OutOfRange("consensus rounds: gap " + std::to_string(gap) +
                          " is too small; the round count overflows"));
  }
  return std::max<int64_t>(1, static_cast<int64_t>(rounds));
}

}  // namespace chorus::topologies
