// NoOpExec: answers every endpoint with the documents it received, untouched.
// It measures the serving path alone (client, gateway, worker, protobuf), the
// counterpart of bench/peer/noop_exec.py on the Jina side.
#ifndef GANTRY_EXECUTORS_NOOP_H_
#define GANTRY_EXECUTORS_NOOP_H_

#include <gantry/executor.h>

namespace gantry_executors {

class NoOpExec final : public gantry::Executor {
  GANTRY_EXECUTOR(NoOpExec);
  // It runs no libtorch: no OpenMP team to keep on one thread.
  GANTRY_HANDLERS_ON_RECEIVING_THREAD();

  explicit NoOpExec(const gantry::ExecutorContext& context);

  // Bare GANTRY_REQUESTS binds /default, which the worker uses for every
  // endpoint that has no handler of its own (Jina's bare @requests).
  GANTRY_REQUESTS(Pass);
  void Pass(gantry::DocList& docs);
};

}  // namespace gantry_executors

#endif  // GANTRY_EXECUTORS_NOOP_H_
