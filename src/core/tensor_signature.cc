#include <gantry/tensor_signature.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace gantry {
namespace {

struct DTypeNames {
  std::string_view name;
  std::string_view numpy;
};

constexpr std::array<DTypeNames, 10> kDTypes = {{
    {"float32", "<f4"},
    {"float64", "<f8"},
    {"float16", "<f2"},
    // numpy has no bfloat16: documents carry it as float32.
    {"bfloat16", "<f4"},
    {"int64", "<i8"},
    {"int32", "<i4"},
    {"int16", "<i2"},
    {"int8", "|i1"},
    {"uint8", "|u1"},
    {"bool", "|b1"},
}};

const DTypeNames* Find(std::string_view dtype) {
  for (const DTypeNames& d : kDTypes) {
    if (d.name == dtype) {
      return &d;
    }
  }
  return nullptr;
}

std::string Names() {
  std::string out;
  for (const DTypeNames& d : kDTypes) {
    out += out.empty() ? "" : ", ";
    out += d.name;
  }
  return out;
}

Status Error(const std::string& path, const std::string& what) {
  return InvalidArgumentError(path + ": " + what);
}

StatusOr<std::string> ReadName(const Value& value, const std::string& path) {
  const std::string* text = value.AsText();
  if (text == nullptr || text->empty()) {
    return Error(path, "expected a non-empty string, got " + value.DebugString());
  }
  return *text;
}

StatusOr<std::vector<std::int64_t>> ReadShape(const Value& value, const std::string& path) {
  const Value::List* list = value.AsList();
  if (list == nullptr) {
    return Error(path,
                 "expected a list of dimensions (-1 for dynamic), got " + value.DebugString());
  }
  if (list->size() > kMaxSignatureRank) {
    return Error(path, "at most " + std::to_string(kMaxSignatureRank) + " dimensions, got " +
                           std::to_string(list->size()));
  }
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < list->size(); ++i) {
    double d = 0;
    const Value& dim = (*list)[i];
    if (!dim.ToNumber(&d) || d != std::floor(d) || (d < 1 && d != -1) || d > (1LL << 31)) {
      return Error(path + "[" + std::to_string(i) + "]",
                   "expected a positive size or -1 (dynamic), got " + dim.DebugString());
    }
    shape.push_back(static_cast<std::int64_t>(d));
  }
  return shape;
}

StatusOr<TensorSpec> ReadSpec(const Value& value, const std::string& path, bool is_input) {
  const Value::Dict* dict = value.AsDict();
  if (dict == nullptr) {
    return Error(
        path, "expected a mapping with name, dtype, shape (and field), got " + value.DebugString());
  }
  TensorSpec spec;
  bool has_name = false;
  bool has_shape = false;
  for (const auto& [key, v] : *dict) {
    const std::string key_path = path + "." + key;
    if (key == "name") {
      GANTRY_ASSIGN_OR_RETURN(spec.name, ReadName(v, key_path));
      has_name = true;
    } else if (key == "dtype") {
      GANTRY_ASSIGN_OR_RETURN(spec.dtype, ReadName(v, key_path));
      if (Find(spec.dtype) == nullptr) {
        return Error(key_path,
                     "unknown dtype \"" + spec.dtype + "\" (expected one of " + Names() + ")");
      }
    } else if (key == "shape" || key == "dims") {
      GANTRY_ASSIGN_OR_RETURN(spec.shape, ReadShape(v, key_path));
      has_shape = true;
    } else if (key == "field") {
      GANTRY_ASSIGN_OR_RETURN(spec.field, ReadName(v, key_path));
    } else if (is_input && key == "pad_value") {
      if (!v.ToNumber(&spec.pad_value) || !std::isfinite(spec.pad_value)) {
        return Error(key_path, "expected a number, got " + v.DebugString());
      }
    } else if (is_input && key == "pad") {
      const bool* flag = v.AsBool();
      if (flag == nullptr) {
        return Error(key_path, "expected true or false, got " + v.DebugString());
      }
      spec.pad = *flag;
    } else {
      return Error(key_path, std::string("unknown key (allowed: name, dtype, shape, field") +
                                 (is_input ? ", pad_value, pad)" : ")"));
    }
  }
  if (!has_name) {
    return Error(path + ".name", "required key is missing");
  }
  if (!has_shape) {
    return Error(path + ".shape",
                 "required key is missing (the shape of one document, without the batch "
                 "dimension; -1 for a dynamic size)");
  }
  if (spec.field.empty()) {
    spec.field = spec.name;
  }
  return spec;
}

StatusOr<std::vector<TensorSpec>> ReadSpecs(const Value::Dict& with, std::string_view key,
                                            bool is_input) {
  std::vector<TensorSpec> specs;
  auto it = with.find(key);
  if (it == with.end() || it->second.is_none()) {
    return specs;
  }
  const std::string path = "with." + std::string(key);
  const Value::List* list = it->second.AsList();
  if (list == nullptr) {
    return Error(path,
                 "expected a list of {name, dtype, shape, field}, got " + it->second.DebugString());
  }
  if (list->size() > kMaxSignatureTensors) {
    return Error(path, "at most " + std::to_string(kMaxSignatureTensors) + " entries, got " +
                           std::to_string(list->size()));
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    GANTRY_ASSIGN_OR_RETURN(TensorSpec spec, ReadSpec((*list)[i], item_path, is_input));
    for (const TensorSpec& other : specs) {
      if (other.name == spec.name) {
        return Error(item_path + ".name", "\"" + spec.name + "\" is declared twice");
      }
      if (other.field == spec.field) {
        return Error(item_path + ".field",
                     "\"" + spec.field + "\" is already the field of \"" + other.name + "\"");
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

bool TensorSpec::has_dynamic_dims() const {
  for (std::int64_t d : shape) {
    if (d < 0) {
      return true;
    }
  }
  return false;
}

std::string TensorSpec::ShapeString() const {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return out + "]";
}

StatusOr<TensorSignature> ParseTensorSignature(const Value::Dict& with) {
  TensorSignature signature;
  GANTRY_ASSIGN_OR_RETURN(signature.inputs, ReadSpecs(with, "inputs", /*is_input=*/true));
  GANTRY_ASSIGN_OR_RETURN(signature.outputs, ReadSpecs(with, "outputs", /*is_input=*/false));
  return signature;
}

std::string_view NumpyDTypeOfSignature(std::string_view dtype) {
  const DTypeNames* d = Find(dtype);
  return d != nullptr ? d->numpy : std::string_view();
}

std::string_view SignatureDTypeOfNumpy(std::string_view numpy_dtype) {
  for (const DTypeNames& d : kDTypes) {
    // float32 is the one name of "<f4" (bfloat16 borrows it).
    if (d.numpy == numpy_dtype && d.name != "bfloat16") {
      return d.name;
    }
  }
  return {};
}

}  // namespace gantry
