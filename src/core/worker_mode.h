// The guard against a worker process that starts workers of its own.
//
// A Deployment re-executes its program with kWorkerFlag as argv[1]; the
// program's main() must call gantry::Init(argc, argv) first, which runs the
// worker and exits. If main() forgot, the child would build the Deployment
// again and spawn again, without end. So a process started with the worker
// flag whose worker main never ran refuses to spawn: it tells its parent
// why (on --status-fd) and exits non-zero, and the parent's start fails
// with that message.
//
// Thread safety: all functions are safe for concurrent use.
#ifndef GANTRY_CORE_WORKER_MODE_H_
#define GANTRY_CORE_WORKER_MODE_H_

#include <gantry/status.h>

#include <string>
#include <vector>

namespace gantry::internal {

// First argument that puts a program into worker mode (see gantry/init.h).
// Defined here, with the guard that reads it, because core/ includes
// nothing else of src/; worker/worker_spec.h includes this header, so the
// worker, the Deployment and the CLI keep naming it from there.
inline constexpr const char* kWorkerFlag = "--gantry-worker";

// Called by gantry::RunWorkerMain: this process serves as a worker the
// proper way, so a Deployment its executor starts is a nested one, allowed.
void NoteWorkerMainEntered();

// FAILED_PRECONDITION naming gantry::Init when `argv` (this process's)
// starts with the worker flag and NoteWorkerMainEntered was never called.
Status CheckNotAnUninitialisedWorker(const std::vector<std::string>& argv);

// This process's argv, from /proc/self/cmdline (empty if unreadable).
std::vector<std::string> SelfArgv();

// If CheckNotAnUninitialisedWorker(SelfArgv()) fails: writes "ERROR
// <message>" to the --status-fd named in argv (what the parent waits on),
// logs it, and exits with code 1 (as a worker that fails to start does).
// Continuing would run the rest of main() a second time in every replica.
void ExitIfUninitialisedWorker();

}  // namespace gantry::internal

#endif  // GANTRY_CORE_WORKER_MODE_H_
