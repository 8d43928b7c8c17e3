// Fixed infrastructure: do not edit. Defines the module `cuda_extension`: applies every
// binding registered with REGISTER_BINDING in kernels/, and every function recorded by
// units that the builder compiled with the fast glue.
#include <pybind11/pybind11.h>

#include "binding_registry.h"
#include "cuda_agent_fast_host.h"

PYBIND11_MODULE(cuda_extension, m) {
  BindingRegistry::getInstance().applyBindings(m);
  cuda_agent_fast::define_functions(m);
}
