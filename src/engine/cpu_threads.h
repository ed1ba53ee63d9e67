// CPU threads: OpenMP threads pinned one per core. Unpinned, the scheduler lets the two threads
// of a 2-core machine share a core or migrate between parallel regions, and every barrier waits
// for the slower one: measured here, a gpt-117m step went from 0.90 s pinned to 3.3 s unpinned.
#pragma once

namespace adacc {

// Sets the OpenMP team size (threads > 0; 0 keeps the default: all cores) and pins thread i of
// the team to the i-th CPU this process may run on. Does nothing to placement when the user
// chose one (OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY set). Call before the work starts.
void configure_cpu_threads(int threads = 0);

}  // namespace adacc
