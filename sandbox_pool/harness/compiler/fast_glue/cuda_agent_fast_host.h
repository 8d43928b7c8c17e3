// Fixed infrastructure (fast glue), compiled only into the fixed binding.cpp with the real
// pybind11: turns the functions recorded by fast-glue units into Python functions of the
// module, with pybind11's calling rules (positional and keyword arguments, defaults,
// overloads tried in order, TypeError when none accepts the arguments).
#pragma once

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_agent_fast_core.h"

namespace cuda_agent_fast {

inline Value from_py(const pybind11::handle& obj) {
  Value v;
  PyObject* p = obj.ptr();
  if (p == Py_None) return v;
  if (PyBool_Check(p)) {
    v.kind = Value::Bool;
    v.b = p == Py_True;
  } else if (PyLong_Check(p)) {
    v.kind = Value::Int;
    v.i = obj.cast<int64_t>();
  } else if (PyFloat_Check(p)) {
    v.kind = Value::Double;
    v.d = obj.cast<double>();
  } else if (PyUnicode_Check(p)) {
    v.kind = Value::String;
    v.s = obj.cast<std::string>();
  } else if (THPVariable_Check(p)) {
    v.kind = Value::Tensor;
    v.tensor = THPVariable_Unpack(p);
  } else if (PyTuple_Check(p) || PyList_Check(p)) {
    v.kind = PyTuple_Check(p) ? Value::Tuple : Value::List;
    for (auto item : obj) v.items.push_back(from_py(item));
  } else {
    throw ArgMismatch(std::string("unsupported argument type ") + Py_TYPE(p)->tp_name);
  }
  return v;
}

inline pybind11::object to_py(const Value& v) {
  switch (v.kind) {
    case Value::Tensor: return pybind11::cast(v.tensor);
    case Value::Int: return pybind11::int_(v.i);
    case Value::Double: return pybind11::float_(v.d);
    case Value::Bool: return pybind11::bool_(v.b);
    case Value::String: return pybind11::str(v.s);
    case Value::List: {
      pybind11::list out;
      for (const Value& item : v.items) out.append(to_py(item));
      return std::move(out);
    }
    case Value::Tuple: {
      pybind11::tuple out(v.items.size());
      for (size_t i = 0; i < v.items.size(); ++i) out[i] = to_py(v.items[i]);
      return std::move(out);
    }
    default: return pybind11::none();
  }
}

inline std::vector<Value> bind_arguments(const Function& f, const pybind11::args& args, const pybind11::kwargs& kwargs) {
  if (args.size() > f.arity) throw ArgMismatch("takes " + std::to_string(f.arity) + " arguments");
  std::vector<Value> values;
  for (auto item : args) values.push_back(from_py(item));
  size_t used = 0;
  for (size_t i = values.size(); i < f.arity; ++i) {
    const ArgSpec* spec = f.args.size() == f.arity ? &f.args[i] : nullptr;
    if (spec && kwargs.contains(spec->name.c_str())) {
      values.push_back(from_py(kwargs[spec->name.c_str()]));
      ++used;
    } else if (spec && spec->has_default) {
      values.push_back(spec->default_value);
    } else {
      throw ArgMismatch("missing argument " + std::to_string(i));
    }
  }
  if (used != kwargs.size()) throw ArgMismatch("unexpected keyword arguments");
  return values;
}

inline void define_functions(pybind11::module_& m) {
  std::vector<std::string> names;
  for (const Function& f : functions())
    if (std::find(names.begin(), names.end(), f.name) == names.end()) names.push_back(f.name);
  for (const std::string& name : names) {
    std::vector<size_t> overloads;
    std::string doc;
    for (size_t i = 0; i < functions().size(); ++i)
      if (functions()[i].name == name) {
        overloads.push_back(i);
        if (doc.empty()) doc = functions()[i].doc;
      }
    m.def(
        name.c_str(),
        [name, overloads](pybind11::args args, pybind11::kwargs kwargs) -> pybind11::object {
          std::string why;
          for (size_t index : overloads) {
            const Function& f = functions()[index];
            std::vector<Value> values;
            try {
              values = bind_arguments(f, args, kwargs);
            } catch (const ArgMismatch& e) {
              why = e.what();
              continue;
            }
            Value result;
            try {
              result = f.call(values);
            } catch (const ArgMismatch& e) {  // raised while converting, before the function ran
              why = e.what();
              continue;
            }
            return to_py(result);
          }
          throw pybind11::type_error(name + "(): incompatible function arguments (" + why + ")");
        },
        doc.c_str());
  }
}

}  // namespace cuda_agent_fast
