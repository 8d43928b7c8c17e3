// Fixed infrastructure: do not edit. Defines the module `cuda_extension` and applies every
// binding registered with REGISTER_BINDING in kernels/.
#include <pybind11/pybind11.h>

#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) { BindingRegistry::getInstance().applyBindings(m); }
