// File: gantry/tensor_signature.h
//
// A model's declared inputs and outputs, as Triton's model configuration
// declares them: each a name, a dtype, a per-document shape (-1 for a
// dynamic dimension) and the document field it lives in. Written in an
// executor's `with:`:
//
//   inputs:
//     - {name: image, dtype: float32, shape: [3, 224, 224], field: tensor}
//     - {name: tokens, dtype: int64, shape: [-1], pad_value: 0}
//   outputs:
//     - {name: logits, dtype: float32, shape: [1000], field: embedding}
//
// `shape` leaves out the batch dimension: documents are stacked along a new
// first dimension (KServe and Triton clients see [-1, ...shape]). `field`
// defaults to the name. Inputs whose dynamic dimensions differ between
// documents are padded to the longest with `pad_value` (default 0), or, with
// `pad: false`, run in separate passes of equal shapes.
//
// Torch-free: the TorchModel executor reads its model's signature with it,
// and the gateway reports the same signature over KServe v2.
//
// Thread safety: value types and free functions.
#ifndef GANTRY_TENSOR_SIGNATURE_H_
#define GANTRY_TENSOR_SIGNATURE_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gantry {

// Limits on what a signature may declare (a hand-written file is far below).
inline constexpr std::size_t kMaxSignatureTensors = 64;
inline constexpr std::size_t kMaxSignatureRank = 8;

struct TensorSpec {
  std::string name;
  // float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8
  // or bool.
  std::string dtype = "float32";
  // Per document, without the batch dimension; -1 is dynamic.
  std::vector<std::int64_t> shape;
  // The document's tensor field; defaults to `name`.
  std::string field;
  // Inputs only: the value dynamic dimensions are padded with.
  double pad_value = 0;
  // Inputs only: false runs documents of different dynamic sizes in
  // separate passes instead of padding them.
  bool pad = true;

  bool has_dynamic_dims() const;
  // "[-1, 384]"
  std::string ShapeString() const;
};

struct TensorSignature {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// Reads `inputs` and `outputs` from `with` (either may be absent: empty).
// Errors are InvalidArgument naming the key path ("with.inputs[1].shape")
// and what was wrong.
StatusOr<TensorSignature> ParseTensorSignature(const Value::Dict& with);

// The numpy dtype string documents carry for a signature dtype ("float32"
// -> "<f4"); bfloat16, which numpy lacks, travels as float32 ("<f4").
std::string_view NumpyDTypeOfSignature(std::string_view dtype);
// The signature dtype of a numpy dtype string ("<f4" -> "float32"), or ""
// when there is none.
std::string_view SignatureDTypeOfNumpy(std::string_view numpy_dtype);

}  // namespace gantry

#endif  // GANTRY_TENSOR_SIGNATURE_H_
