// Fast glue stand-in for <torch/types.h> (see the fast_glue README): the tensor class, dtype
// names and the creation operators a binding needs, as thin wrappers over at::_ops (the
// operators' own headers pull in ATen's context and cost seconds each).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/empty_strided_ops.h>
#include <ATen/ops/full_like_ops.h>
#include <ATen/ops/full_ops.h>
#include <ATen/ops/ones_like_ops.h>
#include <ATen/ops/ones_ops.h>
#include <ATen/ops/scalar_tensor_ops.h>
#include <ATen/ops/zeros_like_ops.h>
#include <ATen/ops/zeros_ops.h>
#include <c10/core/TensorOptions.h>

#include <optional>

namespace at {
namespace cuda_agent_fast_detail {
inline std::optional<ScalarType> dtype(const TensorOptions& o) { return c10::optTypeMetaToScalarType(o.dtype_opt()); }
inline std::optional<MemoryFormat> memory_format(const TensorOptions& o, std::optional<MemoryFormat> mf) {
  return c10::impl::check_tensor_options_and_extract_memory_format(o, mf);
}
}  // namespace cuda_agent_fast_detail

#define CUDA_AGENT_FAST_OPTS(o) cuda_agent_fast_detail::dtype(o), o.layout_opt(), o.device_opt(), o.pinned_memory_opt()

inline Tensor empty(IntArrayRef size, TensorOptions o = {}, std::optional<MemoryFormat> mf = std::nullopt) {
  return _ops::empty_memory_format::call(c10::fromIntArrayRefSlow(size), CUDA_AGENT_FAST_OPTS(o),
                                         cuda_agent_fast_detail::memory_format(o, mf));
}
inline Tensor empty_like(const Tensor& self, TensorOptions o = {}, std::optional<MemoryFormat> mf = std::nullopt) {
  return _ops::empty_like::call(self, CUDA_AGENT_FAST_OPTS(o), cuda_agent_fast_detail::memory_format(o, mf));
}
inline Tensor empty_strided(IntArrayRef size, IntArrayRef stride, TensorOptions o = {}) {
  return _ops::empty_strided::call(c10::fromIntArrayRefSlow(size), c10::fromIntArrayRefSlow(stride), CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor zeros(IntArrayRef size, TensorOptions o = {}) {
  return _ops::zeros::call(c10::fromIntArrayRefSlow(size), CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor zeros_like(const Tensor& self, TensorOptions o = {}, std::optional<MemoryFormat> mf = std::nullopt) {
  return _ops::zeros_like::call(self, CUDA_AGENT_FAST_OPTS(o), cuda_agent_fast_detail::memory_format(o, mf));
}
inline Tensor ones(IntArrayRef size, TensorOptions o = {}) {
  return _ops::ones::call(c10::fromIntArrayRefSlow(size), CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor ones_like(const Tensor& self, TensorOptions o = {}, std::optional<MemoryFormat> mf = std::nullopt) {
  return _ops::ones_like::call(self, CUDA_AGENT_FAST_OPTS(o), cuda_agent_fast_detail::memory_format(o, mf));
}
inline Tensor full(IntArrayRef size, const Scalar& value, TensorOptions o = {}) {
  return _ops::full::call(c10::fromIntArrayRefSlow(size), value, CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor full_like(const Tensor& self, const Scalar& value, TensorOptions o = {},
                        std::optional<MemoryFormat> mf = std::nullopt) {
  return _ops::full_like::call(self, value, CUDA_AGENT_FAST_OPTS(o), cuda_agent_fast_detail::memory_format(o, mf));
}
inline Tensor scalar_tensor(const Scalar& s, TensorOptions o = {}) {
  return _ops::scalar_tensor::call(s, CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor arange(const Scalar& end, TensorOptions o = {}) { return _ops::arange::call(end, CUDA_AGENT_FAST_OPTS(o)); }
inline Tensor arange(const Scalar& start, const Scalar& end, TensorOptions o = {}) {
  return _ops::arange_start::call(start, end, CUDA_AGENT_FAST_OPTS(o));
}
inline Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions o = {}) {
  return _ops::arange_start_step::call(start, end, step, CUDA_AGENT_FAST_OPTS(o));
}

#undef CUDA_AGENT_FAST_OPTS
}  // namespace at

namespace torch {
using namespace at;  // NOLINT
using std::nullopt;  // NOLINT
using std::optional;  // NOLINT
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
constexpr auto kU8 = kUInt8;
constexpr auto kI8 = kInt8;
constexpr auto kI16 = kInt16;
constexpr auto kI32 = kInt32;
constexpr auto kI64 = kInt64;
constexpr auto kF16 = kFloat16;
constexpr auto kF32 = kFloat32;
constexpr auto kF64 = kFloat64;
}  // namespace torch
