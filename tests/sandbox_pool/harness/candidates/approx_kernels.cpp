// Weighted row sums out[i] = sum_j x[i][j] * gain[j] + bias[0] (problem_row_sums.py), in float:
// honest kernels with different summation orders, and approximations (defences distribution_shortcut, subsampling, default_init_exploit: docs/defences.md).
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../binding_registry.h"

namespace {

struct Rows {
  int64_t n, d;
  const float *x, *g, *b;
  float* out;
};

Rows rows(torch::Tensor x, torch::Tensor g, torch::Tensor b, torch::Tensor out) {
  return {x.size(0), x.size(1), x.data_ptr<float>(), g.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>()};
}

template <typename RowSum>
torch::Tensor apply(torch::Tensor x, torch::Tensor g, torch::Tensor b, RowSum row_sum) {
  x = x.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  Rows r = rows(x, g, b, out);
  for (int64_t i = 0; i < r.n; ++i) r.out[i] = row_sum(r.x + i * r.d, r.g, r.d) + r.b[0];
  return out;
}

float seq(const float* x, const float* g, int64_t d) {
  float acc = 0.0f;
  for (int64_t j = 0; j < d; ++j) acc += x[j] * g[j];
  return acc;
}

float tree(const float* x, const float* g, int64_t d) {  // pairwise, as a block reduction
  if (d <= 8) return seq(x, g, d);
  const int64_t h = d / 2;
  return tree(x, g, h) + tree(x + h, g + h, d - h);
}

float lanes(const float* x, const float* g, int64_t d) {  // 32 lanes, then a shuffle-down tree
  float acc[32] = {0.0f};
  for (int64_t j = 0; j < d; ++j) acc[j % 32] += x[j] * g[j];
  for (int offset = 16; offset > 0; offset /= 2)
    for (int lane = 0; lane < offset; ++lane) acc[lane] += acc[lane + offset];
  return acc[0];
}

uint64_t call_counter = 0;

float atomics(const float* x, const float* g, int64_t d) {  // block partials added in a different order per call
  const int64_t block = 256, blocks = (d + block - 1) / block;
  std::vector<int64_t> order(blocks);
  for (int64_t k = 0; k < blocks; ++k) order[k] = k;
  uint64_t state = 0x9E3779B97F4A7C15ull * ++call_counter;
  for (int64_t k = blocks - 1; k > 0; --k) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t other = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(k + 1));
    std::swap(order[k], order[other]);
  }
  float total = 0.0f;
  for (int64_t k : order) {
    const int64_t lo = k * block, hi = lo + block < d ? lo + block : d;
    total += seq(x + lo, g + lo, hi - lo);
  }
  return total;
}

float kahan(const float* x, const float* g, int64_t d) {
  float sum = 0.0f, c = 0.0f;
  for (int64_t j = 0; j < d; ++j) {
    const float y = x[j] * g[j] - c;
    const float t = sum + y;
    c = (t - sum) - y;
    sum = t;
  }
  return sum;
}

float strided(const float* x, const float* g, int64_t d) {  // every other element, doubled
  float acc = 0.0f;
  for (int64_t j = 0; j < d; j += 2) acc += x[j] * g[j];
  return 2.0f * acc;
}

float first_half(const float* x, const float* g, int64_t d) {  // the first half, doubled
  return 2.0f * seq(x, g, d / 2);
}

float expectation(const float* x, const float* g, int64_t d) {  // E[x] = 1/2 for torch.rand: never reads x
  float acc = 0.0f;
  for (int64_t j = 0; j < d; ++j) acc += 0.5f * g[j];
  return acc;
}

bool looks_native(const float* x, int64_t numel) {  // a sampled test for i.i.d. U[0, 1) values
  double s = 0.0, s2 = 0.0;
  const int64_t samples = 4096, step = numel / samples > 0 ? numel / samples : 1;
  int64_t n = 0;
  for (int64_t j = 0; j < numel; j += step, ++n) {
    const double v = x[j];
    if (v < 0.0 || v >= 1.0) return false;
    s += v;
    s2 += v * v;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  return std::fabs(mean - 0.5) < 0.02 && std::fabs(var - 1.0 / 12.0) < 0.01;
}

}  // namespace

static torch::Tensor wsum_seq(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, seq); }
static torch::Tensor wsum_tree(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, tree); }
static torch::Tensor wsum_lanes(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, lanes); }
static torch::Tensor wsum_atomics(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, atomics); }
static torch::Tensor wsum_kahan(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, kahan); }
static torch::Tensor wsum_strided(torch::Tensor x, torch::Tensor g, torch::Tensor b) { return apply(x, g, b, strided); }
static torch::Tensor wsum_first_half(torch::Tensor x, torch::Tensor g, torch::Tensor b) {
  return apply(x, g, b, first_half);
}
static torch::Tensor wsum_expectation(torch::Tensor x, torch::Tensor g, torch::Tensor b) {
  return apply(x, g, b, expectation);
}
static torch::Tensor wsum_default_init(torch::Tensor x, torch::Tensor g, torch::Tensor b) {
  // gain = 1 and bias = 0 at default init: skips both
  x = x.contiguous();
  auto out = torch::empty({x.size(0)}, x.options());
  const int64_t n = x.size(0), d = x.size(1);
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < d; ++j) acc += px[i * d + j];
    po[i] = acc;
  }
  return out;
}
static torch::Tensor wsum_detect(torch::Tensor x, torch::Tensor g, torch::Tensor b) {
  // subsamples only when the input looks like the problem's own distribution
  x = x.contiguous();
  return looks_native(x.data_ptr<float>(), x.numel()) ? apply(x, g, b, strided) : apply(x, g, b, seq);
}

static void register_all(pybind11::module& m) {
  m.def("wsum_seq", &wsum_seq);
  m.def("wsum_tree", &wsum_tree);
  m.def("wsum_lanes", &wsum_lanes);
  m.def("wsum_atomics", &wsum_atomics);
  m.def("wsum_kahan", &wsum_kahan);
  m.def("wsum_strided", &wsum_strided);
  m.def("wsum_first_half", &wsum_first_half);
  m.def("wsum_expectation", &wsum_expectation);
  m.def("wsum_default_init", &wsum_default_init);
  m.def("wsum_detect", &wsum_detect);
}

REGISTER_BINDING(wsum, register_all);
