#include "noop.h"

namespace gantry_executors {

NoOpExec::NoOpExec(const gantry::ExecutorContext& /*context*/) {}

void NoOpExec::Pass(gantry::DocList& /*docs*/) {}

GANTRY_REGISTER_EXECUTOR(NoOpExec);

}  // namespace gantry_executors
