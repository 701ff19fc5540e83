// gantry_bench_worker: a worker program serving only NoOpExec, without
// libtorch. It isolates the runtime's own footprint from libtorch's in the
// memory figures; the harness reports which worker program each run used.
#include <gantry/init.h>

int main(int argc, char** argv) { return gantry::RunWorkerMain(argc, argv); }
