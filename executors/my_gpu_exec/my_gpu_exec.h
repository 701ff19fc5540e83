// MyGPUExec: the executor of Jina's "GPU executor" tutorial, in C++. Each
// document gets a random 5-d `embedding` created on the executor's device
// and a `text` saying where it was computed.
#ifndef GANTRY_EXECUTORS_MY_GPU_EXEC_H_
#define GANTRY_EXECUTORS_MY_GPU_EXEC_H_

#include <gantry/executor.h>

namespace gantry_examples {

class MyGPUExec final : public gantry::Executor {
  GANTRY_EXECUTOR(MyGPUExec);

  // `device` comes from uses_with (Jina: MyGPUExec(device='cuda')).
  explicit MyGPUExec(const gantry::ExecutorContext& context);

  GANTRY_REQUESTS(Encode, "/encode");
  void Encode(gantry::DocList& docs);

 private:
  gantry::Device device_;
};

}  // namespace gantry_examples

#endif  // GANTRY_EXECUTORS_MY_GPU_EXEC_H_
