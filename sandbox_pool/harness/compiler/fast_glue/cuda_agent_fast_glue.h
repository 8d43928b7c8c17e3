// Fixed infrastructure (fast glue): a pybind11-shaped `module::def` for binding units compiled
// with the light headers. Supported parameter types: Tensor, integers, floating point, bool,
// std::string, std::vector / std::optional of those; returns: the same, tuples and void.
// Anything else fails to compile here and the unit is compiled again with the real pybind11.
#pragma once

#include "cuda_agent_fast_core.h"

#include <optional>
#include <tuple>
#include <type_traits>

#include <c10/util/Optional.h>

namespace cuda_agent_fast {

template <class T, class = void>
struct From;  // Value -> T (undefined for unsupported T: a compile error, then the real pybind11)

template <>
struct From<at::Tensor> {
  static at::Tensor get(const Value& v) {
    if (v.kind != Value::Tensor) throw ArgMismatch("expected a Tensor");
    return v.tensor;
  }
};

// Scalars follow pybind11: an int parameter takes a Python int (or bool), a float one an int or
// a float, a bool one only a bool.
template <class T>
struct From<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  static T get(const Value& v) {
    if constexpr (std::is_same_v<T, bool>) {
      if (v.kind == Value::Bool) return v.b;
      throw ArgMismatch("expected a bool");
    } else {
      if (v.kind == Value::Int) return static_cast<T>(v.i);
      if (std::is_integral_v<T> && v.kind == Value::Bool) return static_cast<T>(v.b);
      if (std::is_floating_point_v<T> && v.kind == Value::Double) return static_cast<T>(v.d);
      throw ArgMismatch(std::is_integral_v<T> ? "expected an int" : "expected a float");
    }
  }
};

template <>
struct From<std::string> {
  static std::string get(const Value& v) {
    if (v.kind != Value::String) throw ArgMismatch("expected a str");
    return v.s;
  }
};

template <class T>
struct From<std::vector<T>> {
  static std::vector<T> get(const Value& v) {
    if (v.kind != Value::List && v.kind != Value::Tuple) throw ArgMismatch("expected a list or tuple");
    std::vector<T> out;
    out.reserve(v.items.size());
    for (const Value& item : v.items) out.push_back(From<T>::get(item));
    return out;
  }
};

template <class T>
struct From<std::optional<T>> {
  static std::optional<T> get(const Value& v) {
    if (v.kind == Value::None) return std::nullopt;
    return From<T>::get(v);
  }
};

template <class T, class = void>
struct To;  // T -> Value

template <>
struct To<at::Tensor> {
  static Value make(at::Tensor t) {
    Value v;
    v.kind = Value::Tensor;
    v.tensor = std::move(t);
    return v;
  }
};

template <class T>
struct To<T, std::enable_if_t<std::is_arithmetic_v<T>>> {
  static Value make(T x) {
    Value v;
    if constexpr (std::is_same_v<T, bool>) {
      v.kind = Value::Bool;
      v.b = x;
    } else if constexpr (std::is_integral_v<T>) {
      v.kind = Value::Int;
      v.i = static_cast<int64_t>(x);
    } else {
      v.kind = Value::Double;
      v.d = static_cast<double>(x);
    }
    return v;
  }
};

template <>
struct To<std::string> {
  static Value make(std::string x) {
    Value v;
    v.kind = Value::String;
    v.s = std::move(x);
    return v;
  }
};

template <class T>
struct To<std::vector<T>> {
  static Value make(std::vector<T> xs) {
    Value v;
    v.kind = Value::List;
    for (auto& x : xs) v.items.push_back(To<T>::make(std::move(x)));
    return v;
  }
};

template <class T>
struct To<std::optional<T>> {
  static Value make(std::optional<T> x) { return x ? To<T>::make(std::move(*x)) : Value{}; }
};

template <class... T>
struct To<std::tuple<T...>> {
  static Value make(std::tuple<T...> xs) {
    Value v;
    v.kind = Value::Tuple;
    std::apply([&](auto&... x) { (v.items.push_back(To<std::decay_t<decltype(x)>>::make(std::move(x))), ...); }, xs);
    return v;
  }
};

template <class A, class B>
struct To<std::pair<A, B>> {
  static Value make(std::pair<A, B> xs) { return To<std::tuple<A, B>>::make(std::tuple<A, B>(std::move(xs.first), std::move(xs.second))); }
};

template <class R, class... A, size_t... I>
Value invoke(const std::function<R(A...)>& f, std::vector<Value>& args, std::index_sequence<I...>) {
  if constexpr (std::is_void_v<R>) {
    f(From<std::decay_t<A>>::get(args[I])...);
    return Value{};
  } else {
    return To<std::decay_t<R>>::make(f(From<std::decay_t<A>>::get(args[I])...));
  }
}

struct arg_v {
  std::string name;
  Value value;
};

struct arg {
  explicit arg(const char* n) : name(n) {}
  template <class T>
  arg_v operator=(T&& x) const {
    return arg_v{name, To<std::decay_t<T>>::make(std::forward<T>(x))};
  }
  std::string name;
};

// Accepted and ignored: they change nothing that the evaluation can observe.
enum class return_value_policy { automatic, automatic_reference, take_ownership, copy, move, reference, reference_internal };
struct gil_scoped_release {};
template <class... T>
struct call_guard {};

class Module {
 public:
  template <class F, class... Extra>
  Module& def(const char* name, F&& f, const Extra&... extra) {
    std::function fn{std::forward<F>(f)};
    Function record;
    record.name = name;
    (apply(record, extra), ...);
    record.arity = arity(fn);
    record.call = [fn](std::vector<Value>& args) { return call(fn, args); };
    functions().push_back(std::move(record));
    return *this;
  }

 private:
  template <class R, class... A>
  static size_t arity(const std::function<R(A...)>&) { return sizeof...(A); }
  template <class R, class... A>
  static Value call(const std::function<R(A...)>& fn, std::vector<Value>& args) {
    return invoke(fn, args, std::index_sequence_for<A...>{});
  }
  static void apply(Function& f, const char* doc) { f.doc = doc; }
  static void apply(Function& f, const arg& a) { f.args.push_back(ArgSpec{a.name, false, Value{}}); }
  static void apply(Function& f, const arg_v& a) { f.args.push_back(ArgSpec{a.name, true, a.value}); }
  static void apply(Function&, return_value_policy) {}
  template <class... T>
  static void apply(Function&, const call_guard<T...>&) {}
};

struct Registrar {
  template <class F>
  Registrar(const char*, F&& register_fn) {
    Module m;
    register_fn(m);
  }
};

}  // namespace cuda_agent_fast

namespace pybind11 {
using module = ::cuda_agent_fast::Module;
using module_ = ::cuda_agent_fast::Module;
using arg = ::cuda_agent_fast::arg;
using return_value_policy = ::cuda_agent_fast::return_value_policy;
using gil_scoped_release = ::cuda_agent_fast::gil_scoped_release;
template <class... T>
using call_guard = ::cuda_agent_fast::call_guard<T...>;
}  // namespace pybind11
namespace py = pybind11;
