// Fixed infrastructure: do not edit. Collects the bindings of every kernels/*_binding.cpp
// (or kernels/*.cpp on the CPU device) into the one Python module `cuda_extension`.
//
// Usage in a kernel's binding file:
//     static void register_my_op(pybind11::module& m) { m.def("my_op", &my_op); }
//     REGISTER_BINDING(my_op, register_my_op);
#pragma once

#ifdef CUDA_AGENT_FAST_GLUE
// The builder's fast first attempt (light headers): bindings are recorded and turned into
// Python functions by binding.cpp. Same usage, same module.
#include <cuda_agent_fast_glue.h>
#define REGISTER_BINDING(name, fn) \
  static ::cuda_agent_fast::Registrar _cuda_agent_registrar_##name(#name, [](pybind11::module& m) { fn(m); })
#else

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

class BindingRegistry {
 public:
  using BindingFunction = std::function<void(pybind11::module&)>;

  static BindingRegistry& getInstance() {
    static BindingRegistry registry;
    return registry;
  }

  void registerBinding(const std::string& name, BindingFunction fn) {
    bindings_.emplace_back(name, std::move(fn));
  }

  void applyBindings(pybind11::module& m) {
    for (auto& entry : bindings_) entry.second(m);
  }

 private:
  BindingRegistry() = default;
  std::vector<std::pair<std::string, BindingFunction>> bindings_;
};

class BindingRegistrar {
 public:
  BindingRegistrar(const std::string& name, BindingRegistry::BindingFunction fn) {
    BindingRegistry::getInstance().registerBinding(name, std::move(fn));
  }
};

#define REGISTER_BINDING(name, fn) \
  static BindingRegistrar _cuda_agent_registrar_##name(#name, [](pybind11::module& m) { fn(m); })

#endif  // CUDA_AGENT_FAST_GLUE
