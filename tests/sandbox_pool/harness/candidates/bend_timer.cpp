// A candidate whose timer lies (test_protocol.py): `bend_timer(factor)` swaps the harness's timer function
// for one that runs `factor` times as fast (the red team of 2026-12-04 reached `time.perf_counter_ns` through
// the dynamic linker; this goes through the interpreter), `spin_us(us)` busy-waits: a kernel's worth of time
// that both clocks see. The build refuses this source (reaching Python objects from C++); the test lets it
// through to try the outside clock behind it.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdint>

#include "../binding_registry.h"

static void bend_timer(double factor) {
  pybind11::module_ timing = pybind11::module_::import("cuda_agent.sandbox_pool.harness.child.timing");
  pybind11::object real = timing.attr("_perf_ns");
  timing.attr("_perf_ns") = pybind11::cpp_function(
      [real, factor]() { return static_cast<int64_t>(real().cast<double>() * factor); });
}

static void spin_us(double us) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

static void register_bend_timer(pybind11::module& m) {
  m.def("bend_timer", &bend_timer);
  m.def("spin_us", &spin_us);
}

REGISTER_BINDING(bend_timer, register_bend_timer);
