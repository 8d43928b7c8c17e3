// A candidate whose outputs are memory of its own (test_hacks.py): `scale_bias_static(x, s, b)` computes into
// one of three static buffers in turn and returns it wrapped with torch::from_blob, so no call pays an
// allocation or a first touch, and the harness's weak watch on earlier outputs' storages sees each storage
// die with its call. The build's symbol check refuses from_blob; the run-time check behind it is tried too.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "../binding_registry.h"

static torch::Tensor scale_bias_static(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  static std::vector<float> buffers[3];
  static int turn = 0;
  turn = (turn + 1) % 3;
  std::vector<float>& buf = buffers[turn];
  buf.resize(x.numel());
  const int64_t n = x.size(0), d = x.size(1);
  const float *px = x.data_ptr<float>(), *ps = s.data_ptr<float>(), *pb = b.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) buf[i * d + j] = px[i * d + j] * ps[j] + pb[j];
  return torch::from_blob(buf.data(), x.sizes(), x.options());
}

static void register_static_buffers(pybind11::module& m) { m.def("scale_bias_static", &scale_bias_static); }

REGISTER_BINDING(static_buffers, register_static_buffers);
