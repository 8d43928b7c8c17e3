// Fast glue stand-in for <torch/csrc/utils/pybind.h> (see the fast_glue README).
#pragma once
#include <torch/types.h>
#include <cuda_agent_fast_glue.h>
