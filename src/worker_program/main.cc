// gantry-worker: one executor replica. Started by a Deployment or by
// `gantry executor`; see gantry/init.h for the flags.
#include <gantry/init.h>

int main(int argc, char** argv) { return gantry::RunWorkerMain(argc, argv); }
