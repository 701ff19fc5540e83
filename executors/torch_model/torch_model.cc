#include "torch_model.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <gantry/log.h>
#include <gantry/tensor_signature.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loaded_model.h"
#include "sentence_embedder.h"
#include "tokenizer.h"

namespace gantry {
namespace {

// `device` is read by the worker, but users pass it under `with:` too.
constexpr std::string_view kKeys[] = {"model",   "device",   "dtype",     "batch_size",
                                      "inputs",  "outputs",  "tokenizer", "max_seq_length",
                                      "pooling", "normalize"};
constexpr std::string_view kTextInputs[] = {"input_ids", "attention_mask", "token_type_ids"};
// Padding never makes one forward pass's inputs larger than this: a pass
// that would is split (documents are sorted by size first, so few are).
constexpr std::int64_t kMaxPassBytes = std::int64_t{256} << 20;
constexpr std::int64_t kCpuBatchSize = 64;
constexpr std::int64_t kGpuBatchSize = 256;

enum class Pooling { kMean, kCls, kNone };

at::ScalarType ScalarTypeOfSpec(std::string_view dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "int16") return at::kShort;
  if (dtype == "int8") return at::kChar;
  if (dtype == "uint8") return at::kByte;
  return at::kBool;
}

std::string ShapeText(at::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return out + "]";
}

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  auto left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t code_point = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &code_point);
    if (n <= 0) {
      return false;
    }
    p += n;
    left -= n;
  }
  return true;
}

std::string DocName(const Doc& doc, std::size_t index) {
  std::string out = "document " + std::to_string(index);
  if (!doc.id().empty()) {
    out += " (id " + doc.id().substr(0, 64) + ")";
  }
  return out;
}

std::string Describe(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string message = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
    message.pop_back();
  }
  return message;
}

// Which request a document came in (TorchModel::Prepare numbers them).
struct RequestTag {
  std::uint64_t request = 0;
};

}  // namespace

struct TorchModel::Impl {
  std::string where;  // "executor 'name' (TorchModel)"
  std::string model_path;
  Device device;
  std::string dtype;
  at::ScalarType compute_type = at::kFloat;
  std::int64_t batch_size = kCpuBatchSize;
  TensorSignature signature;
  std::unique_ptr<torch_model::LoadedModel> model;
  // An AOTInductor package: it runs in the dtype it was compiled in.
  bool is_package = false;
  // Text models only.
  std::optional<sentence_encoder::WordPieceTokenizer> tokenizer;
  std::int64_t max_seq_length = 512;
  Pooling pooling = Pooling::kMean;
  bool normalize = false;

  std::runtime_error WithError(std::string_view key, const std::string& what) const {
    return std::runtime_error(where + ": with." + std::string(key) + ": " + what);
  }

  bool is_text() const { return tokenizer.has_value(); }

  // The dtype an input travels to the model in: as declared, except that
  // a TorchScript module's floating inputs follow its converted weights.
  at::ScalarType ModelTypeOf(const TensorSpec& spec) const {
    const at::ScalarType declared = ScalarTypeOfSpec(spec.dtype);
    return c10::isFloatingType(declared) && !is_package ? compute_type : declared;
  }

  // Numbers each request's documents (Prepare), so that a call that dynamic
  // batching merged from several requests can tell them apart.
  mutable std::atomic<std::uint64_t> next_request{0};

  Status CheckDoc(const Doc& doc, std::size_t index) const;
  // `size`: each document's input elements, all inputs together.
  std::vector<std::vector<std::size_t>> PlanPasses(const DocList& docs,
                                                   std::vector<std::size_t> order,
                                                   const std::vector<std::int64_t>& size) const;
  std::vector<std::vector<std::size_t>> PlanRequestPasses(
      const DocList& docs, const std::vector<std::size_t>& request_of) const;
  // An output row held until every pass of a call has run (see Infer).
  struct PendingOutput {
    std::size_t doc;
    const std::string* field;
    Tensor row;
  };
  void RunTensorPass(DocList& docs, const std::vector<std::size_t>& pass,
                     std::vector<PendingOutput>* pending);
  void RunTextPass(DocList& docs, const std::vector<std::size_t>& pass,
                   const std::vector<std::vector<std::int64_t>>& ids);
  std::vector<at::Tensor> Forward(std::vector<at::Tensor> inputs, std::int64_t rows);
  // Sets each document's row of `output`, or, given `pending`, adds it there.
  void WriteOutput(DocList& docs, const std::vector<std::size_t>& pass, const TensorSpec& spec,
                   at::Tensor output, std::vector<PendingOutput>* pending = nullptr) const;
  void Infer(DocList& docs, const Parameters& parameters);
};

Status TorchModel::Impl::CheckDoc(const Doc& doc, std::size_t index) const {
  if (is_text()) {
    const Value* text = doc.Find("text");
    if (text != nullptr && !text->is_none() && text->AsText() == nullptr) {
      return InvalidArgumentError(DocName(doc, index) + ": field 'text': expected a string, got " +
                                  text->DebugString().substr(0, 80));
    }
    if (!IsValidUtf8(doc.text())) {
      return InvalidArgumentError(DocName(doc, index) + ": field 'text' is not valid UTF-8");
    }
    return OkStatus();
  }
  for (const TensorSpec& spec : signature.inputs) {
    const std::string input = "input '" + spec.name + "'";
    const Value* value = doc.Find(spec.field);
    if (value == nullptr) {
      return InvalidArgumentError(DocName(doc, index) + ": " + input + ": field '" + spec.field +
                                  "' is missing (expected a " + spec.dtype + " tensor of shape " +
                                  spec.ShapeString() + ")");
    }
    const Tensor* tensor = value->AsTensor();
    if (tensor == nullptr) {
      return InvalidArgumentError(DocName(doc, index) + ": " + input + ": field '" + spec.field +
                                  "' is not a tensor (expected " + spec.dtype + " " +
                                  spec.ShapeString() + ", got " +
                                  value->DebugString().substr(0, 80) + ")");
    }
    if (tensor->dtype() != NumpyDTypeOfSignature(spec.dtype)) {
      const std::string_view got = SignatureDTypeOfNumpy(tensor->dtype());
      return InvalidArgumentError(DocName(doc, index) + ": " + input + ": expected dtype " +
                                  spec.dtype + ", got " +
                                  (got.empty() ? tensor->dtype() : std::string(got)));
    }
    const std::vector<std::int64_t>& shape = tensor->shape();
    bool fits = shape.size() == spec.shape.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d) {
      fits = shape[d] >= (spec.shape[d] < 0 ? 1 : 0) &&
             (spec.shape[d] < 0 || shape[d] == spec.shape[d]);
    }
    if (!fits) {
      return InvalidArgumentError(DocName(doc, index) + ": " + input + ": expected shape " +
                                  spec.ShapeString() + " (-1: any size), got " +
                                  tensor->ShapeString());
    }
  }
  return OkStatus();
}

// Passes of at most batch_size documents: sorted by size so that padding
// adds little, split where an unpadded input's sizes change or the padded
// inputs would pass kMaxPassBytes.
std::vector<std::vector<std::size_t>> TorchModel::Impl::PlanPasses(
    const DocList& docs, std::vector<std::size_t> order,
    const std::vector<std::int64_t>& size) const {
  const std::vector<TensorSpec>& inputs = signature.inputs;
  auto dims_of = [&](std::size_t doc, std::size_t input) -> const std::vector<std::int64_t>& {
    return docs[doc].tensor(inputs[input].field)->shape();
  };
  // The sizes of the inputs that must not be padded: equal within a pass.
  auto unpadded_key = [&](std::size_t doc) {
    std::vector<std::int64_t> key;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      if (!inputs[j].pad && inputs[j].has_dynamic_dims()) {
        const auto& d = dims_of(doc, j);
        key.insert(key.end(), d.begin(), d.end());
      }
    }
    return key;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto ka = unpadded_key(a);
    const auto kb = unpadded_key(b);
    return ka != kb ? ka < kb : size[a] < size[b];
  });

  std::vector<std::vector<std::size_t>> passes;
  std::vector<std::size_t> pass;
  std::vector<std::vector<std::int64_t>> max_dims;
  std::vector<std::int64_t> pass_key;
  for (std::size_t doc : order) {
    std::vector<std::vector<std::int64_t>> grown = max_dims;
    grown.resize(inputs.size());
    std::int64_t bytes = 0;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const auto& d = dims_of(doc, j);
      if (grown[j].empty()) {
        grown[j] = d;
      }
      std::int64_t elems = 1;
      for (std::size_t k = 0; k < d.size(); ++k) {
        grown[j][k] = std::max(grown[j][k], d[k]);
        elems *= grown[j][k];
      }
      bytes += elems * static_cast<std::int64_t>(c10::elementSize(ModelTypeOf(inputs[j])));
    }
    bytes *= static_cast<std::int64_t>(pass.size() + 1);
    std::vector<std::int64_t> key = unpadded_key(doc);
    if (!pass.empty() && (static_cast<std::int64_t>(pass.size()) >= batch_size || key != pass_key ||
                          bytes > kMaxPassBytes)) {
      passes.push_back(std::move(pass));
      pass.clear();
      max_dims.clear();
      grown.assign(inputs.size(), {});
      for (std::size_t j = 0; j < inputs.size(); ++j) {
        grown[j] = dims_of(doc, j);
      }
    }
    pass_key = std::move(key);
    max_dims = std::move(grown);
    pass.push_back(doc);
  }
  if (!pass.empty()) {
    passes.push_back(std::move(pass));
  }
  return passes;
}

// The passes of a call that may hold several requests (`request_of`: each
// document's request, numbered from 0 in order). Where an output has a
// dynamic size, which keeps the padded length, each request is planned as if
// it came alone, so that what it gets back never depends on who shared its
// call; then passes whose documents all have the same sizes, which pad
// nothing, are merged across requests up to batch_size and kMaxPassBytes.
std::vector<std::vector<std::size_t>> TorchModel::Impl::PlanRequestPasses(
    const DocList& docs, const std::vector<std::size_t>& request_of) const {
  const std::vector<TensorSpec>& inputs = signature.inputs;
  std::vector<std::int64_t> size(docs.size(), 0);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    for (const TensorSpec& input : inputs) {
      size[i] += docs[i].tensor(input.field)->numel();
    }
  }
  // Outputs of fixed sizes (logits, a pooled embedding) cannot show how far
  // their inputs were padded: all requests share passes then, as the
  // documents of one request do.
  bool outputs_show_padding = false;
  for (const TensorSpec& output : signature.outputs) {
    outputs_show_padding = outputs_show_padding || output.has_dynamic_dims();
  }
  std::vector<std::vector<std::size_t>> by_request;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::size_t r = request_of.empty() || !outputs_show_padding ? 0 : request_of[i];
    if (r >= by_request.size()) {
      by_request.resize(r + 1);
    }
    by_request[r].push_back(i);
  }
  if (by_request.size() <= 1) {
    return PlanPasses(docs, by_request.empty() ? std::vector<std::size_t>{} : by_request[0], size);
  }
  // Every input's sizes, one after another: equal keys pad nothing.
  auto sizes_of = [&](std::size_t doc) {
    std::vector<std::int64_t> key;
    for (const TensorSpec& input : inputs) {
      const auto& d = docs[doc].tensor(input.field)->shape();
      key.push_back(static_cast<std::int64_t>(d.size()));
      key.insert(key.end(), d.begin(), d.end());
    }
    return key;
  };
  std::vector<std::vector<std::size_t>> passes;
  std::map<std::vector<std::int64_t>, std::vector<std::size_t>> merging;
  for (const std::vector<std::size_t>& request : by_request) {
    for (std::vector<std::size_t>& pass : PlanPasses(docs, request, size)) {
      const std::vector<std::int64_t> key = sizes_of(pass.front());
      bool uniform = true;
      for (std::size_t doc : pass) {
        uniform = uniform && sizes_of(doc) == key;
      }
      if (!uniform) {
        passes.push_back(std::move(pass));
        continue;
      }
      std::int64_t doc_bytes = 0;
      for (const TensorSpec& input : inputs) {
        doc_bytes += docs[pass.front()].tensor(input.field)->numel() *
                     static_cast<std::int64_t>(c10::elementSize(ModelTypeOf(input)));
      }
      std::vector<std::size_t>& merged = merging[key];
      for (std::size_t doc : pass) {
        const auto count = static_cast<std::int64_t>(merged.size());
        if (count > 0 && (count >= batch_size || (count + 1) * doc_bytes > kMaxPassBytes)) {
          passes.push_back(std::exchange(merged, {}));
        }
        merged.push_back(doc);
      }
    }
  }
  for (auto& [key, merged] : merging) {
    if (!merged.empty()) {
      passes.push_back(std::move(merged));
    }
  }
  return passes;
}

std::vector<at::Tensor> TorchModel::Impl::Forward(std::vector<at::Tensor> inputs,
                                                  std::int64_t rows) {
  std::vector<std::string> names;
  std::vector<at::Tensor> outputs = model->Run(std::move(inputs), &names);
  // Declared outputs are the model's, by name where it gives names (a
  // TorchScript dict), else in order.
  std::vector<at::Tensor> declared;
  for (std::size_t j = 0; j < signature.outputs.size(); ++j) {
    const TensorSpec& spec = signature.outputs[j];
    at::Tensor out;
    if (!names.empty()) {
      auto it = std::find(names.begin(), names.end(), spec.name);
      if (it == names.end()) {
        std::string have;
        for (const std::string& n : names) {
          have += (have.empty() ? "" : ", ") + n;
        }
        throw std::runtime_error(where + ": output '" + spec.name +
                                 "' is not among the model's outputs (" + have + ")");
      }
      out = outputs[static_cast<std::size_t>(it - names.begin())];
    } else if (j < outputs.size()) {
      out = outputs[j];
    } else {
      throw std::runtime_error(where + ": " + std::to_string(signature.outputs.size()) +
                               " outputs are declared, and the model returned " +
                               std::to_string(outputs.size()));
    }
    if (out.dim() < 1 || out.size(0) != rows) {
      throw std::runtime_error(where + ": output '" + spec.name + "' has shape " +
                               ShapeText(out.sizes()) + "; its first dimension must be the " +
                               std::to_string(rows) + " documents of the batch");
    }
    declared.push_back(std::move(out));
  }
  return declared;
}

void TorchModel::Impl::WriteOutput(DocList& docs, const std::vector<std::size_t>& pass,
                                   const TensorSpec& spec, at::Tensor output,
                                   std::vector<PendingOutput>* pending) const {
  bool fits = output.dim() == static_cast<std::int64_t>(spec.shape.size()) + 1;
  for (std::size_t d = 0; fits && d < spec.shape.size(); ++d) {
    fits = spec.shape[d] < 0 || output.size(static_cast<std::int64_t>(d) + 1) == spec.shape[d];
  }
  if (!fits) {
    throw std::runtime_error(where + ": output '" + spec.name + "' has shape " +
                             ShapeText(output.sizes()) + " for " + std::to_string(pass.size()) +
                             " documents; declared [-1] + " + spec.ShapeString());
  }
  output = output.to(ScalarTypeOfSpec(spec.dtype));
  std::vector<Tensor> rows = RowsFromTorch(output);
  for (std::size_t k = 0; k < pass.size(); ++k) {
    if (pending != nullptr) {
      pending->push_back({pass[k], &spec.field, std::move(rows[k])});
    } else {
      docs[pass[k]].set_tensor(spec.field, std::move(rows[k]));
    }
  }
}

void TorchModel::Impl::RunTensorPass(DocList& docs, const std::vector<std::size_t>& pass,
                                     std::vector<PendingOutput>* pending) {
  const auto n = static_cast<std::int64_t>(pass.size());
  std::vector<at::Tensor> inputs;
  for (const TensorSpec& spec : signature.inputs) {
    std::vector<at::Tensor> views;
    std::vector<std::int64_t> longest;
    bool ragged = false;
    for (std::size_t doc : pass) {
      Tensor* tensor = docs[doc].mutable_tensor(spec.field);
      if (tensor == nullptr) {  // CheckRequest refuses these before they get here
        throw std::invalid_argument(where + ": " + DocName(docs[doc], doc) + ": input '" +
                                    spec.name + "': field '" + spec.field + "' is missing");
      }
      at::Tensor view = AsTorchView(*tensor);
      if (longest.empty()) {
        longest.assign(view.sizes().begin(), view.sizes().end());
      }
      for (std::size_t d = 0; d < longest.size(); ++d) {
        ragged = ragged || view.size(static_cast<std::int64_t>(d)) != longest[d];
        longest[d] = std::max(longest[d], view.size(static_cast<std::int64_t>(d)));
      }
      views.push_back(std::move(view));
    }
    at::Tensor batch;
    if (!ragged) {
      batch = at::stack(views);
    } else {
      std::vector<std::int64_t> dims = {n};
      dims.insert(dims.end(), longest.begin(), longest.end());
      batch = at::full(dims, spec.pad_value, views[0].options());
      for (std::int64_t k = 0; k < n; ++k) {
        at::Tensor slot = batch.select(0, k);
        const at::Tensor& view = views[static_cast<std::size_t>(k)];
        for (std::int64_t d = 0; d < view.dim(); ++d) {
          slot = slot.narrow(d, 0, view.size(d));
        }
        slot.copy_(view);
      }
    }
    batch = batch.to(ModelTypeOf(spec));
    inputs.push_back(ToDeviceAsync(batch, device));
  }
  std::vector<at::Tensor> outputs = Forward(std::move(inputs), n);
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    WriteOutput(docs, pass, signature.outputs[j], std::move(outputs[j]), pending);
  }
}

void TorchModel::Impl::RunTextPass(DocList& docs, const std::vector<std::size_t>& pass,
                                   const std::vector<std::vector<std::int64_t>>& ids) {
  const auto n = static_cast<std::int64_t>(pass.size());
  std::int64_t longest = 1;
  for (std::size_t doc : pass) {
    longest = std::max(longest, static_cast<std::int64_t>(ids[doc].size()));
  }
  at::Tensor input_ids = at::full({n, longest}, tokenizer->pad_id(), at::kLong);
  at::Tensor attention_mask = at::zeros({n, longest}, at::kLong);
  auto* id_data = input_ids.data_ptr<std::int64_t>();
  auto* mask_data = attention_mask.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < n; ++k) {
    const std::vector<std::int64_t>& row = ids[pass[static_cast<std::size_t>(k)]];
    std::copy(row.begin(), row.end(), id_data + k * longest);
    std::fill_n(mask_data + k * longest, row.size(), 1);
  }
  std::vector<at::Tensor> inputs;
  for (const TensorSpec& spec : signature.inputs) {
    at::Tensor input = spec.name == "input_ids"        ? input_ids
                       : spec.name == "attention_mask" ? attention_mask
                                                       : at::zeros({n, longest}, at::kLong);
    inputs.push_back(ToDeviceAsync(input.to(ModelTypeOf(spec)), device));
  }
  std::vector<at::Tensor> outputs = Forward(std::move(inputs), n);
  // The first output holds the token embeddings [n, longest, hidden].
  at::Tensor tokens = outputs[0];
  if (pooling != Pooling::kNone) {
    if (tokens.dim() != 3 || tokens.size(1) != longest) {
      throw std::runtime_error(where + ": pooling needs the first output to be token embeddings [" +
                               std::to_string(n) + ", " + std::to_string(longest) +
                               ", hidden]; the model gave " + ShapeText(tokens.sizes()));
    }
    tokens = tokens.to(at::kFloat);
    if (pooling == Pooling::kCls) {
      tokens = tokens.select(1, 0);
    } else {
      const at::Tensor mask = attention_mask.to(tokens.device()).unsqueeze(-1).to(at::kFloat);
      tokens = tokens.mul(mask).sum(1).div(mask.sum(1).clamp_min(1e-9));
    }
    if (normalize) {
      tokens = tokens.div(tokens.norm(2, -1, /*keepdim=*/true).clamp_min(1e-12));
    }
    outputs[0] = tokens;
  }
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    if (j == 0 && pooling == Pooling::kNone) {
      // Token outputs without pooling: each document's own tokens, unpadded.
      const TensorSpec& spec = signature.outputs[0];
      at::Tensor host = outputs[0].to(ScalarTypeOfSpec(spec.dtype)).to(at::kCPU);
      for (std::int64_t k = 0; k < n; ++k) {
        const std::size_t doc = pass[static_cast<std::size_t>(k)];
        docs[doc].set_tensor(spec.field, FromTorch(host.select(0, k).narrow(
                                             0, 0, static_cast<std::int64_t>(ids[doc].size()))));
      }
      continue;
    }
    WriteOutput(docs, pass, signature.outputs[j], std::move(outputs[j]));
  }
}

void TorchModel::Impl::Infer(DocList& docs, const Parameters& parameters) {
  if (docs.empty()) {
    return;
  }
  InferenceScope scope(device);
  if (!is_text()) {
    // CheckRequest saw every request already; this guards the rare caller
    // that skips it (a batch never holds a document that fails here).
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (Status s = CheckDoc(docs[i], i); !s.ok()) {
        throw std::invalid_argument(s.message());
      }
    }
    // Which request each document came in: Prepare tagged each request's.
    std::vector<std::size_t> request_of;
    if (const std::vector<RequestTag> tags = TakePrepared<RequestTag>(docs); !tags.empty()) {
      request_of.assign(docs.size(), 0);
      for (std::size_t i = 1; i < docs.size(); ++i) {
        request_of[i] = request_of[i - 1] + (tags[i].request != tags[i - 1].request ? 1 : 0);
      }
    }
    // Outputs reach the documents only once every pass has run: a call that
    // throws leaves its documents as they came (an output may share an
    // input's field), fit to be run again (GANTRY_BATCH_FAILURES_RETRIED_ALONE).
    std::vector<PendingOutput> pending;
    for (const std::vector<std::size_t>& pass : PlanRequestPasses(docs, request_of)) {
      RunTensorPass(docs, pass, &pending);
    }
    for (PendingOutput& output : pending) {
      docs[output.doc].set_tensor(*output.field, std::move(output.row));
    }
    return;
  }
  std::vector<std::vector<std::int64_t>> ids = TakePrepared<std::vector<std::int64_t>>(docs);
  if (ids.empty()) {  // not prepared (TorchModel::Prepare)
    ids.reserve(docs.size());
    for (const Doc& doc : docs) {
      ids.push_back(tokenizer->Encode(doc.text(), static_cast<std::size_t>(max_seq_length)));
    }
  }
  if (parameters.GetBool("return_token_counts")) {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      docs[i].mutable_tags()["num_tokens"] = Value(static_cast<std::int64_t>(ids[i].size()));
    }
  }
  // Sorted by length, as TEI batches, so that a pass pads little.
  std::vector<std::size_t> order(docs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return ids[a].size() < ids[b].size(); });
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch_size)) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_size));
    RunTextPass(docs,
                std::vector<std::size_t>(order.begin() + static_cast<std::ptrdiff_t>(start),
                                         order.begin() + static_cast<std::ptrdiff_t>(end)),
                ids);
  }
}

namespace {

std::string GetText(const TorchModel::Impl& impl, const Parameters& with, std::string_view key,
                    std::string fallback) {
  const Value* value = with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  const std::string* text = value->AsText();
  if (text == nullptr || text->empty()) {
    throw impl.WithError(key, "expected a non-empty string, got " + value->DebugString());
  }
  return *text;
}

std::int64_t GetPositive(const TorchModel::Impl& impl, const Parameters& with, std::string_view key,
                         std::int64_t fallback, std::int64_t most) {
  const Value* value = with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  double number = 0;
  if (!value->ToNumber(&number) || number != std::floor(number) || number < 1 ||
      number > static_cast<double>(most)) {
    throw impl.WithError(key, "expected an integer from 1 to " + std::to_string(most) + ", got " +
                                  value->DebugString());
  }
  return static_cast<std::int64_t>(number);
}

// The tokenizer named by `with.tokenizer` (a folder, tokenizer.json or
// vocab.txt) and the folder's sentence_bert_config.json max_seq_length.
void LoadTokenizer(TorchModel::Impl& impl, const std::string& path) {
  namespace fs = std::filesystem;
  StatusOr<sentence_encoder::WordPieceTokenizer> tokenizer =
      fs::is_directory(path)    ? sentence_encoder::WordPieceTokenizer::LoadFromFolder(path)
      : path.ends_with(".json") ? sentence_encoder::WordPieceTokenizer::LoadTokenizerJson(path)
                                : sentence_encoder::WordPieceTokenizer::LoadVocabTxt(path);
  if (!tokenizer.ok()) {
    throw impl.WithError("tokenizer", tokenizer.status().message());
  }
  impl.tokenizer = std::move(tokenizer).value();
  // sentence-transformers' own limit, where the folder has one.
  const fs::path st_config = fs::path(path) / "sentence_bert_config.json";
  std::ifstream file(st_config);
  if (!file) {
    return;
  }
  const nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (config.is_object() && config.contains("max_seq_length") &&
      config["max_seq_length"].is_number_integer()) {
    const auto value = config["max_seq_length"].get<std::int64_t>();
    if (value < 2 || value > 65536) {
      throw impl.WithError("tokenizer", st_config.string() + ": max_seq_length " +
                                            std::to_string(value) + " is not in 2..65536");
    }
    impl.max_seq_length = value;
  }
}

// batch_size made-up documents (dynamic sizes 2, zeros; text "warm up").
DocList WarmUpDocuments(const TorchModel::Impl& impl) {
  // As many as a request's pass could hold: batch_size, fewer where their
  // inputs would pass kMaxPassBytes (PlanPasses cuts passes there too).
  std::int64_t doc_bytes = 0;
  for (const TensorSpec& spec :
       impl.is_text() ? std::vector<TensorSpec>{} : impl.signature.inputs) {
    std::int64_t bytes = static_cast<std::int64_t>(c10::elementSize(impl.ModelTypeOf(spec)));
    for (std::int64_t d : spec.shape) {
      bytes *= d < 0 ? 2 : d;
    }
    doc_bytes += bytes;
  }
  const std::int64_t count = std::max<std::int64_t>(
      2, std::min(impl.batch_size, kMaxPassBytes / std::max<std::int64_t>(doc_bytes, 1)));
  DocList sample;
  for (std::int64_t i = 0; i < count; ++i) {
    Doc& doc = sample.emplace_back(std::string("warm up"));
    for (const TensorSpec& spec :
         impl.is_text() ? std::vector<TensorSpec>{} : impl.signature.inputs) {
      std::vector<std::int64_t> shape = spec.shape;
      std::int64_t numel = 1;
      for (std::int64_t& d : shape) {
        d = d < 0 ? 2 : d;
        numel *= d;
      }
      const std::string dtype(NumpyDTypeOfSignature(spec.dtype));
      doc.set_tensor(spec.field,
                     Tensor::FromBytes(
                         dtype, shape,
                         std::string(static_cast<std::size_t>(numel) * DTypeItemSize(dtype), '\0'))
                         .value());
    }
  }
  return sample;
}

// N from an AOTInductor package's "input_handles[i]: dim value is too large
// at 0, expected to be <= N", the largest batch it accepts; 0 if absent.
std::int64_t LargestBatchIn(const std::string& message) {
  const std::string_view marker = "dim value is too large at 0, expected to be <= ";
  const std::size_t at = message.find(marker);
  if (at == std::string::npos) {
    return 0;
  }
  return std::atoll(message.c_str() + at + marker.size());
}

// Whether a package refused an input for a size outside a dynamic
// dimension's bound ("input_handles[0]: dim value is too large at 1,
// expected to be <= 512"). Dimension 0 is the batch, which Gantry chose, not
// the client.
bool OutsideExportedSizes(const std::string& message) {
  const std::string_view marker = "dim value is too ";
  const std::size_t at = message.find(marker);
  if (at == std::string::npos || message.find("input_handles[") == std::string::npos) {
    return false;
  }
  const std::size_t dim = message.find(" at ", at + marker.size());
  return dim != std::string::npos && std::atoll(message.c_str() + dim + 4) > 0;
}

// A tensor may not land on a document's own fields (its text, its id), and
// one document's fixed sizes must fit one message: such a declaration could
// never be served, and its warm-up documents alone could exhaust memory.
void CheckDeclaredTensors(const TorchModel::Impl& impl, std::int64_t max_message_bytes) {
  for (const bool inputs : {true, false}) {
    const std::vector<TensorSpec>& specs = inputs ? impl.signature.inputs : impl.signature.outputs;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec& spec = specs[i];
      const std::string key =
          std::string(inputs ? "inputs[" : "outputs[") + std::to_string(i) + "]";
      if (spec.field == "text" || spec.field == "id") {
        throw impl.WithError(key + (spec.field == spec.name ? ".name" : ".field"),
                             "\"" + spec.field +
                                 "\" is a document's own field, not a tensor's; name it "
                                 "otherwise, or set `field`");
      }
      double bytes = static_cast<double>(c10::elementSize(impl.ModelTypeOf(spec)));
      for (std::int64_t dim : spec.shape) {
        bytes *= static_cast<double>(std::max<std::int64_t>(dim, 1));
      }
      if (bytes > static_cast<double>(max_message_bytes)) {
        throw impl.WithError(key + ".shape", spec.ShapeString() + " of " + spec.dtype + " is " +
                                                 std::to_string(static_cast<std::uint64_t>(bytes)) +
                                                 " bytes a document, over the " +
                                                 std::to_string(max_message_bytes) +
                                                 "-byte message cap (max_message_bytes)");
      }
    }
  }
}

}  // namespace

TorchModel::TorchModel(const ExecutorContext& context) : impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  impl.where = "executor '" + context.name + "' (TorchModel)";
  for (const auto& [key, value] : context.with.values()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      throw impl.WithError(key,
                           "unknown key (allowed: model, device, dtype, batch_size, inputs, "
                           "outputs, tokenizer, max_seq_length, pooling, normalize)");
    }
  }
  impl.device = ResolveTorchDevice(context.device);
  if (Status s = CheckTorchDevice(impl.device); !s.ok()) {
    throw std::runtime_error(impl.where + ": " + s.message());
  }
  const std::string model = GetText(impl, context.with, "model", "");
  if (model.empty()) {
    throw impl.WithError("model",
                         "required key is missing (an AOTInductor package .pt2 or a "
                         "TorchScript module .pt)");
  }
  impl.model_path = context.ResolvePath(model);
  impl.is_package =
      torch_model::FormatOfPath(impl.model_path) == torch_model::ModelFormat::kAotInductor;
  if (impl.is_package && context.with.Find("dtype") != nullptr) {
    throw impl.WithError("dtype",
                         "a .pt2 package runs in the dtype it was compiled in: export the model "
                         "in that dtype and declare it on its floating inputs and outputs "
                         "(dtype is for TorchScript modules, whose weights are converted)");
  }
  StatusOr<std::string> dtype =
      sentence_encoder::ResolveDType(GetText(impl, context.with, "dtype", "float32"), impl.device);
  if (!dtype.ok()) {
    throw impl.WithError("dtype", dtype.status().message());
  }
  if (*dtype == "int8") {
    // SentenceEncoder's int8 quantises its own layers; a module's weights
    // cannot simply be cast to int8.
    throw impl.WithError("dtype",
                         "int8 is SentenceEncoder's; a TorchScript module runs in float32, "
                         "float16 or bfloat16 (quantise it in PyTorch before saving it)");
  }
  impl.dtype = *dtype;
  impl.compute_type = ScalarTypeOfSpec(impl.dtype);
  impl.batch_size = GetPositive(impl, context.with, "batch_size",
                                impl.device.is_cuda() ? kGpuBatchSize : kCpuBatchSize, 65536);

  StatusOr<TensorSignature> signature = ParseTensorSignature(context.with.values());
  if (!signature.ok()) {
    throw std::runtime_error(impl.where + ": " + signature.status().message());
  }
  impl.signature = std::move(signature).value();

  const std::string tokenizer = GetText(impl, context.with, "tokenizer", "");
  if (!tokenizer.empty()) {
    LoadTokenizer(impl, context.ResolvePath(tokenizer));
    impl.max_seq_length =
        GetPositive(impl, context.with, "max_seq_length", impl.max_seq_length, 65536);
    if (impl.max_seq_length < 2) {
      throw impl.WithError("max_seq_length", "must be at least 2 ([CLS] and [SEP])");
    }
    const std::string pooling = GetText(impl, context.with, "pooling", "mean");
    if (pooling != "mean" && pooling != "cls" && pooling != "none") {
      throw impl.WithError("pooling", "expected mean, cls or none, got \"" + pooling + "\"");
    }
    impl.pooling = pooling == "mean"  ? Pooling::kMean
                   : pooling == "cls" ? Pooling::kCls
                                      : Pooling::kNone;
    if (const Value* n = context.with.Find("normalize"); n != nullptr && !n->is_none()) {
      if (n->AsBool() == nullptr) {
        throw impl.WithError("normalize", "expected true or false, got " + n->DebugString());
      }
      impl.normalize = *n->AsBool();
    }
    if (impl.signature.inputs.empty()) {
      impl.signature.inputs = {
          {.name = "input_ids", .dtype = "int64", .shape = {-1}, .field = "input_ids"},
          {.name = "attention_mask", .dtype = "int64", .shape = {-1}, .field = "attention_mask"}};
    }
    for (std::size_t i = 0; i < impl.signature.inputs.size(); ++i) {
      const TensorSpec& spec = impl.signature.inputs[i];
      if (std::find(std::begin(kTextInputs), std::end(kTextInputs), spec.name) ==
          std::end(kTextInputs)) {
        throw impl.WithError("inputs[" + std::to_string(i) + "].name",
                             "a text model's inputs come from its tokenizer: input_ids, "
                             "attention_mask or token_type_ids, not \"" +
                                 spec.name + "\"");
      }
    }
    if (impl.signature.outputs.empty()) {
      impl.signature.outputs = {
          {.name = "embedding", .dtype = "float32", .shape = {-1}, .field = "embedding"}};
    }
  } else {
    for (std::string_view key : {"max_seq_length", "pooling", "normalize"}) {
      if (context.with.Find(key) != nullptr) {
        throw impl.WithError(key, "is for text models: set `tokenizer` too");
      }
    }
    if (impl.signature.inputs.empty()) {
      throw impl.WithError("inputs",
                           "required key is missing: the model's inputs, each "
                           "{name, dtype, shape (without the batch dimension; -1 dynamic), "
                           "field}");
    }
  }
  if (impl.signature.outputs.empty()) {
    throw impl.WithError("outputs",
                         "required key is missing: the model's outputs, each {name, dtype, "
                         "shape (without the batch dimension), field}");
  }

  CheckDeclaredTensors(impl, context.max_message_bytes);

  StatusOr<std::unique_ptr<torch_model::LoadedModel>> loaded =
      torch_model::LoadModel(impl.model_path, impl.device, impl.dtype);
  if (!loaded.ok()) {
    throw std::runtime_error(impl.where + " on " + impl.device.ToString() + ": " +
                             loaded.status().message());
  }
  impl.model = std::move(loaded).value();

  // One full pass (batch_size made-up documents, dynamic sizes 2): a model
  // that cannot run here, whose outputs contradict the declaration, or (a
  // package, which checks its inputs) whose inputs do, or whose largest
  // batch is below batch_size, fails the start rather than a request.
  // A package's checks may bound the batch below batch_size (torch.export
  // derives such bounds, at times narrower than the Dim it was given): a
  // batch_size left to its default is lowered to that bound, once.
  const bool batch_size_chosen = context.with.Find("batch_size") != nullptr;
  for (int attempt = 0;; ++attempt) {
    DocList sample = WarmUpDocuments(impl);
    try {
      impl.Infer(sample, Parameters());
      break;
    } catch (const std::exception& e) {
      const std::string message = Describe(e);
      const std::int64_t bound = impl.is_package ? LargestBatchIn(message) : 0;
      if (attempt == 0 && !batch_size_chosen && bound >= 1 && bound < impl.batch_size) {
        LogWarning(impl.where + ": " + impl.model_path + " accepts at most " +
                   std::to_string(bound) + " documents a pass; batch_size lowered from " +
                   std::to_string(impl.batch_size) + " to " + std::to_string(bound));
        impl.batch_size = bound;
        continue;
      }
      throw std::runtime_error(
          impl.where + ": the " + impl.model->kind() + " " + impl.model_path +
          " failed a warm-up pass of " + std::to_string(sample.size()) + " documents on " +
          impl.device.ToString() + " with the declared inputs: " + message +
          (impl.is_package ? " (the package checks its inputs: input_handles[i] is declared "
                             "input i, counted from 0; a batch over its largest needs a lower "
                             "batch_size)"
                           : ""));
    }
  }
  device_check_ = RegisterTensorsForDeviceCheck(
      "TorchModel", [model = impl.model.get()] { return model->NamedTensors(); });
}

TorchModel::~TorchModel() = default;

Status TorchModel::CheckRequest(const DocList& docs, const Parameters& /*parameters*/) const {
  for (std::size_t i = 0; i < docs.size(); ++i) {
    GANTRY_RETURN_IF_ERROR(impl_->CheckDoc(docs[i], i));
  }
  return OkStatus();
}

Status TorchModel::Prepare(DocList& docs, const Parameters& /*parameters*/) const {
  if (!impl_->is_text()) {
    const RequestTag tag{impl_->next_request.fetch_add(1, std::memory_order_relaxed)};
    for (Doc& doc : docs) {
      doc.set_prepared(tag);
    }
    return OkStatus();
  }
  std::vector<std::vector<std::int64_t>> ids;
  ids.reserve(docs.size());
  try {
    for (const Doc& doc : docs) {
      if (doc.text().size() > sentence_encoder::kMaxPreparedTextBytes) {
        return OkStatus();
      }
      ids.push_back(
          impl_->tokenizer->Encode(doc.text(), static_cast<std::size_t>(impl_->max_seq_length)));
    }
  } catch (const std::exception&) {
    return OkStatus();  // Infer tokenizes again and throws, naming the document
  }
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].set_prepared(std::move(ids[i]));
  }
  return OkStatus();
}

void TorchModel::Infer(DocList& docs, const Parameters& parameters) {
  try {
    impl_->Infer(docs, parameters);
  } catch (const std::invalid_argument&) {
    throw;  // already names the document and input
  } catch (const std::exception& e) {
    // The model's own error (torch's without its C++ backtrace), named.
    const std::string message = Describe(e);
    if (OutsideExportedSizes(message)) {
      // A package's bound on a dynamic size (torch.export's Dim max): the
      // input is outside what the model takes, which is the client's to fix.
      throw std::invalid_argument(impl_->where + ": an input is outside the sizes " +
                                  impl_->model_path + " was exported for: " + message);
    }
    throw std::runtime_error(message.starts_with(impl_->where) ? message
                                                               : impl_->where + ": " + message);
  }
}

}  // namespace gantry

using gantry::TorchModel;
GANTRY_REGISTER_EXECUTOR(TorchModel);
