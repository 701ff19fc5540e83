#include "core/checked_size.h"

#include <gantry/document.h>

#include <cstdint>

namespace gantry::internal {
namespace {

std::string Subject(std::string_view subject) {
  return subject.empty() ? std::string() : std::string(subject) + ": ";
}

}  // namespace

StatusOr<std::uint64_t> CheckedMul(std::uint64_t a, std::uint64_t b, std::string_view subject) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    return InvalidArgumentError(Subject(subject) + std::to_string(a) + " * " + std::to_string(b) +
                                " overflows 64 bits");
  }
  return product;
}

StatusOr<std::uint64_t> CheckedAdd(std::uint64_t a, std::uint64_t b, std::string_view subject) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    return InvalidArgumentError(Subject(subject) + std::to_string(a) + " + " + std::to_string(b) +
                                " overflows 64 bits");
  }
  return sum;
}

StatusOr<std::uint64_t> CheckedCap(std::uint64_t size, std::uint64_t cap,
                                   std::string_view subject) {
  if (size > cap) {
    return InvalidArgumentError(Subject(subject) + std::to_string(size) + " bytes exceeds the " +
                                std::to_string(cap) + "-byte message cap");
  }
  return size;
}

std::string ShapeToString(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += i > 0 ? ", " : "";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string DTypeName(std::string_view dtype) {
  std::size_t itemsize = DTypeItemSize(dtype);
  if (itemsize == 0) {
    return std::string(dtype);
  }
  std::string bits = std::to_string(itemsize * 8);
  switch (dtype[1]) {
    case 'f':
      return "float" + bits;
    case 'i':
      return "int" + bits;
    case 'u':
      return "uint" + bits;
    case 'c':
      return "complex" + bits;
    case 'b':
      return "bool";
    default:
      return std::string(dtype);
  }
}

StatusOr<std::uint64_t> TensorByteSize(std::span<const std::int64_t> shape, std::size_t itemsize,
                                       std::string_view dtype, std::uint64_t cap) {
  const std::string what = "shape " + ShapeToString(shape) + " of " + DTypeName(dtype);
  if (itemsize == 0) {
    return InvalidArgumentError(
        "unknown tensor dtype '" + std::string(dtype) +
        "' (expected a numpy dtype string such as '<f4', '<i8', '|u1' or '|b1')");
  }
  std::uint64_t bytes = itemsize;
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] < 0) {
      return InvalidArgumentError(what + " has the negative dimension " +
                                  std::to_string(shape[axis]) + " on axis " + std::to_string(axis));
    }
  }
  // Multiplying in order and stopping at the first overflow would miss a
  // later zero dimension, which makes the tensor empty whatever came before.
  for (std::int64_t d : shape) {
    if (d == 0) {
      return std::uint64_t{0};
    }
  }
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) {
      return InvalidArgumentError(what + " needs more than 2^64 bytes");
    }
  }
  if (bytes > cap) {
    return InvalidArgumentError(what + " needs " + std::to_string(bytes) + " bytes, over the " +
                                std::to_string(cap) + "-byte message cap");
  }
  return bytes;
}

Status CheckTensorBuffer(std::span<const std::int64_t> shape, std::string_view dtype,
                         std::uint64_t buffer_bytes, std::uint64_t cap) {
  GANTRY_ASSIGN_OR_RETURN(std::uint64_t needed,
                          TensorByteSize(shape, DTypeItemSize(dtype), dtype, cap));
  if (needed != buffer_bytes) {
    return InvalidArgumentError("shape " + ShapeToString(shape) + " of " + DTypeName(dtype) +
                                " needs " + std::to_string(needed) + " bytes, buffer has " +
                                std::to_string(buffer_bytes));
  }
  return OkStatus();
}

Status CheckDepth(int depth, std::string_view subject, int max_depth) {
  if (depth > max_depth) {
    return InvalidArgumentError(Subject(subject) + "nested deeper than " +
                                std::to_string(max_depth) + " levels");
  }
  return OkStatus();
}

}  // namespace gantry::internal
