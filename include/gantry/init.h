// File: gantry/init.h   (implemented in src/worker/worker_main.cc, beside the
// worker main loop that Init runs)
//
// gantry::Init must be the first call in main() of any program that defines
// executors and starts a Deployment of them. A Deployment re-executes the
// program once per replica with a worker flag; in that case Init runs the
// worker (loads the executor, serves gRPC until told to stop) and exits the
// process. Otherwise it returns at once.
//
// A program re-executed as a worker whose main() does not call Init would
// reach its Deployment again; that Deployment refuses to spawn (no process
// storm): the worker exits with code 1 and the parent's Deployment fails
// with a message naming gantry::Init.
//
// Init also turns off abseil's mutex deadlock detector for the process:
// Debian's abseil runs it on every lock gRPC takes (a debug-build check), and
// it costs the gateway and worker 6-13% of their instructions per call.
#ifndef GANTRY_INIT_H_
#define GANTRY_INIT_H_

namespace gantry {

void Init(int argc, char** argv);

// True if argv asks for worker mode (used by Init; exposed for tests).
bool IsWorkerInvocation(int argc, char** argv);

// Runs a worker from argv (the worker flags) and returns its exit code when
// it does not serve (bad flags, --list-executors, a failed start). A worker
// that served ends the process itself once stopped, with code 0 (outside
// the ASan build). Init calls this; the `gantry-worker` program's main is
// just this.
int RunWorkerMain(int argc, char** argv);

}  // namespace gantry

#endif  // GANTRY_INIT_H_
