// File: executors/torch_model/torch_model.h
//
// TorchModel: serves a PyTorch model the user exported, with no C++ to
// write, as Triton's PyTorch backend does. The model is an AOTInductor
// package (.pt2, from torch.export + torch._inductor.aoti_compile_and_package)
// or a TorchScript module (.pt). Its inputs and outputs are declared in YAML
// (gantry/tensor_signature.h): each input is read from a tensor field of
// every document, the documents are stacked along a new first dimension
// (padded where their dynamic sizes differ), and row i of each output is
// written back to document i.
//
//   jtype: TorchModel
//   with:
//     model: classifier.pt2       # relative to this file's folder
//     device: cuda                # cpu, cuda, cuda:N, auto
//     inputs:  [{name: image, dtype: float32, shape: [3, 224, 224], field: tensor}]
//     outputs: [{name: logits, dtype: float32, shape: [1000], field: embedding}]
//
// Text models: `tokenizer:` (a Hugging Face folder, tokenizer.json or
// vocab.txt: BERT WordPiece) turns each document's text into the inputs
// named input_ids, attention_mask and token_type_ids (int64 [-1]; declared
// inputs default to the first two), and `pooling: mean | cls | none` with
// `normalize: true` turns the first output (token embeddings [S, H]) into
// one vector per document, as sentence-transformers does.
//
// Other `with:` keys: dtype (TorchScript only: float32, float16, bfloat16,
// auto as SentenceEncoder; the weights are converted and floating inputs
// cast; a .pt2 runs in the dtype it was compiled in, so it is refused
// there), batch_size (documents per forward pass; default 64 on a CPU, 256
// on CUDA, lowered to a .pt2's own largest batch), max_seq_length (text
// models; default sentence_bert_config.json's, else 512).
//
// A .pt2 checks its inputs' dtypes and sizes (AOTI_RUNTIME_CHECK_INPUTS is
// set unless the user set it), and one full pass runs at start: a
// declaration the model contradicts fails the start.
//
// Every request is checked against the declared inputs before it joins a
// batch (GANTRY_VALIDATE): a missing field, a wrong dtype, rank or fixed
// size is INVALID_ARGUMENT naming the document, the input, what was
// expected and what came, and fails only that request.
//
// Thread safety: the worker calls one handler at a time; CheckRequest and
// Prepare read only what the constructor set and may run concurrently with
// anything.
#ifndef GANTRY_EXECUTORS_TORCH_MODEL_TORCH_MODEL_H_
#define GANTRY_EXECUTORS_TORCH_MODEL_TORCH_MODEL_H_

#include <gantry/device_report.h>
#include <gantry/executor.h>

#include <memory>

namespace gantry {

class TorchModel final : public Executor {
  GANTRY_EXECUTOR(TorchModel);

 public:
  // Loads the model onto context.device, checks the declared signature
  // against one warm-up pass, and registers the weights for the device
  // check. Throws std::runtime_error naming the file, key or device.
  explicit TorchModel(const ExecutorContext& context);
  ~TorchModel() override;

  // Every endpoint (Jina's /default): /encode, /infer, ...
  GANTRY_REQUESTS(Infer);
  GANTRY_VALIDATE(Infer, CheckRequest);
  // It only adds outputs to its documents: one request the model throws on
  // fails alone.
  GANTRY_BATCH_FAILURES_RETRIED_ALONE(Infer);
  GANTRY_DYNAMIC_BATCHING_ON_GPU(Infer, {.preferred_batch_size = 256, .timeout_ms = 0});
  void Infer(DocList& docs, const Parameters& parameters);
  Status CheckRequest(const DocList& docs, const Parameters& parameters) const;
  GANTRY_PREPARE(Infer, Prepare);
  // Text models: tokenizes each document's text on the thread that received
  // the request and leaves its ids with the document, so that Infer's thread
  // only runs the model. Always OK: a request with a text it cannot tokenize
  // or over kMaxPreparedTextBytes is left to Infer, as before. Tensor models:
  // nothing to do.
  Status Prepare(DocList& docs, const Parameters& parameters) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  DeviceCheckRegistration device_check_;
};

}  // namespace gantry

#endif  // GANTRY_EXECUTORS_TORCH_MODEL_TORCH_MODEL_H_
