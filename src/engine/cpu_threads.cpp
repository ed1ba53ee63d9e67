#include "src/engine/cpu_threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <vector>

namespace adacc {

namespace {
bool user_chose_placement() {
    return std::getenv("OMP_PROC_BIND") || std::getenv("OMP_PLACES") || std::getenv("GOMP_CPU_AFFINITY");
}
}  // namespace

void configure_cpu_threads(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
    if (user_chose_placement()) return;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    if (cpus.size() < 2) return;
    // libgomp keeps its pool threads, so pinning them once holds for every later parallel region
    // of the same team size.
#pragma omp parallel
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<std::size_t>(omp_get_thread_num()) % cpus.size()], &one);
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
}

}  // namespace adacc
