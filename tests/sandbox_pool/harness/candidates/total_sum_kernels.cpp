// Whole-tensor sums (problem_total_sum.py): an honest one, and a subsampler that checks its own spread
// (red team, 2026-12-04): it reads one block in four and returns 4x their sum when the sampled blocks look
// alike (a robust spread: the median of neighbouring differences), else it reads every block.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../binding_registry.h"

static constexpr int64_t BLOCK = 1024;

static double block_sum(const float* p, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}

static torch::Tensor total_exact(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty({}, x.options());
  out.data_ptr<float>()[0] = static_cast<float>(block_sum(x.data_ptr<float>(), x.numel()));
  return out;
}

static torch::Tensor total_adaptive(torch::Tensor x) {
  x = x.contiguous();
  const float* p = x.data_ptr<float>();
  const int64_t blocks = x.numel() / BLOCK;
  std::vector<double> sampled;
  for (int64_t g = 0; g + 4 <= blocks; g += 4) sampled.push_back(block_sum(p + (g + 1 + (g / 4) % 2) * BLOCK, BLOCK));
  auto out = torch::empty({}, x.options());
  if (sampled.size() < 8 || blocks % 4 || x.numel() % BLOCK) return total_exact(x);
  std::vector<double> diffs;
  for (size_t i = 1; i < sampled.size(); ++i) diffs.push_back(std::fabs(sampled[i] - sampled[i - 1]));
  std::nth_element(diffs.begin(), diffs.begin() + diffs.size() / 2, diffs.end());
  const double sigma = 1.4826 * diffs[diffs.size() / 2] / std::sqrt(2.0);
  double estimate = 0.0;
  for (double s : sampled) estimate += 4.0 * s;
  const double error = 4.0 * sigma * std::sqrt(static_cast<double>(sampled.size()) * 3.0);
  if (error < 0.001 * std::fabs(estimate)) {
    out.data_ptr<float>()[0] = static_cast<float>(estimate);
    return out;
  }
  return total_exact(x);
}

static void register_totals(pybind11::module& m) {
  m.def("total_exact", &total_exact);
  m.def("total_adaptive", &total_adaptive);
}

REGISTER_BINDING(total_exact, register_totals);
