// Fixed infrastructure (fast glue): what candidate units compiled with the light headers and
// the fixed binding.cpp share. A recorded function takes and returns `Value`s.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cuda_agent_fast {

struct Value {
  enum Kind : int { None, Tensor, Int, Double, Bool, String, List, Tuple };
  Kind kind = None;
  at::Tensor tensor;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;
  std::string s;
  std::vector<Value> items;  // List and Tuple
};

// Thrown while converting arguments (before the function runs): try the next overload.
struct ArgMismatch : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct ArgSpec {
  std::string name;
  bool has_default = false;
  Value default_value;
};

struct Function {
  std::string name;
  std::string doc;
  std::vector<ArgSpec> args;  // may be empty (positional only) or one per parameter
  size_t arity = 0;
  std::function<Value(std::vector<Value>&)> call;
};

inline std::vector<Function>& functions() {
  static std::vector<Function> registry;
  return registry;
}

}  // namespace cuda_agent_fast
