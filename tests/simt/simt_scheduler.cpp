// The fiber scheduler of the SIMT emulation (model and limits: tests/simt/simt.h).
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "simt.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

namespace simt {

namespace {

enum class FiberState : std::uint8_t { runnable, at_block_barrier, at_warp_barrier, done };

// A fiber stack with an unmapped guard page below it, so an overflow faults instead of
// corrupting the next stack. Under ASan it is kept small on purpose: a finished fiber's stack
// shadow is cleared (size / 8 bytes per thread per block), which at 512 KiB made the model tests
// 15x slower; 64 KiB holds every kernel's instrumented frames here.
constexpr std::size_t kStackBytes = SIMT_ASAN ? 64 * 1024 : 128 * 1024;

struct Stack {
    char* base = nullptr;  // first usable byte (above the guard page)
};

struct Fiber {
    ucontext_t context{};
    Stack stack;
    FiberState state = FiberState::runnable;
    ThreadPosition position;
    void* asan_fake_stack = nullptr;
};

struct Grid {
    const char* name = "";
    dim3 block_idx;
    LaunchBody body = nullptr;
    void* closure = nullptr;
    std::vector<Fiber> fibers;
    int current = -1;
    ucontext_t scheduler{};
    const void* scheduler_stack_bottom = nullptr;
    std::size_t scheduler_stack_bytes = 0;
    std::vector<std::uint64_t> lane_slots;
    std::vector<unsigned char> dynamic_smem;
};

thread_local Grid* running = nullptr;
thread_local std::vector<Stack> stack_pool;

// Each launched kernel's name and the most threads a block of it had. Never destroyed: the log
// writer below reads it at exit, after function statics created later than the writer would have
// been destroyed.
std::map<std::string, unsigned>& launched() {
    static auto* kernels = new std::map<std::string, unsigned>;
    return *kernels;
}

// Writes "name threads" for each launched kernel to $SIMT_LAUNCH_LOG at exit (tests/cuda/ counts
// coverage and checks block sizes against the kernels' launch bounds).
struct LaunchLogWriter {
    ~LaunchLogWriter() {
        const char* path = std::getenv("SIMT_LAUNCH_LOG");
        if (!path) return;
        std::ofstream out(path, std::ios::app);
        for (const auto& [name, threads] : launched()) out << name << ' ' << threads << '\n';
    }
} launch_log_writer;

[[noreturn]] void fail(const char* what) {
    const dim3 b = running ? running->block_idx : dim3();
    std::fprintf(stderr, "SIMT emulation: kernel %s, block (%u,%u,%u): %s\n", running ? running->name : "?", b.x, b.y,
                 b.z, what);
    std::fflush(stderr);
    std::abort();
}

Stack take_stack(std::size_t index) {
    while (stack_pool.size() <= index) {
        const long page = sysconf(_SC_PAGESIZE);
        void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("cannot map a fiber stack");
        mprotect(p, page, PROT_NONE);
        stack_pool.push_back(Stack{static_cast<char*>(p) + page});
    }
    return stack_pool[index];
}

// Switch from the scheduler into fiber f, and back when it yields.
void resume(Grid& g, int t) {
    Fiber& f = g.fibers[t];
    g.current = t;
#if SIMT_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack.base, kStackBytes);
#endif
    swapcontext(&g.scheduler, &f.context);
#if SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    g.current = -1;
}

// From the running fiber back to the scheduler, leaving it in `state`.
void yield(FiberState state) {
    Grid& g = *running;
    Fiber& f = g.fibers[g.current];
    f.state = state;
#if SIMT_ASAN
    __sanitizer_start_switch_fiber(state == FiberState::done ? nullptr : &f.asan_fake_stack, g.scheduler_stack_bottom,
                                   g.scheduler_stack_bytes);
#endif
    swapcontext(&f.context, &g.scheduler);
#if SIMT_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, nullptr, nullptr);
#endif
}

void fiber_entry() {
    Grid& g = *running;
#if SIMT_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g.scheduler_stack_bottom, &g.scheduler_stack_bytes);
#endif
    g.body(g.closure);
    yield(FiberState::done);
    fail("a finished fiber was resumed");
}

// Opens whichever barrier every live thread waits at; aborts on divergence or deadlock.
void release_barriers(Grid& g) {
    const int n = static_cast<int>(g.fibers.size());
    bool released = false;
    for (int w = 0; w * 32 < n; ++w) {
        int at_warp = 0, at_block = 0;
        for (int t = w * 32; t < std::min(n, w * 32 + 32); ++t) {
            at_warp += g.fibers[t].state == FiberState::at_warp_barrier;
            at_block += g.fibers[t].state == FiberState::at_block_barrier;
        }
        if (at_warp == 0) continue;
        if (at_block > 0) fail("barrier divergence: lanes of one warp wait at __syncwarp/shuffle and __syncthreads");
        for (int t = w * 32; t < std::min(n, w * 32 + 32); ++t)
            if (g.fibers[t].state == FiberState::at_warp_barrier) g.fibers[t].state = FiberState::runnable;
        released = true;
    }
    if (released) return;
    int done = 0;
    for (const Fiber& f : g.fibers) done += f.state == FiberState::done;
    if (done > 0) fail("barrier divergence: threads exited while others wait at __syncthreads");
    for (Fiber& f : g.fibers) f.state = FiberState::runnable;
}

// Thread t of the block, ready to start at fiber_entry. A function of its own: getcontext counts
// as returning twice (as setjmp does), which would make the caller's loop variables suspect; here
// it returns once, since makecontext replaces the context's entry.
void start_fiber(Grid& g, int t, dim3 grid, dim3 block, dim3 block_idx) {
    Fiber& f = g.fibers[t];
    f.state = FiberState::runnable;
    f.position =
        ThreadPosition{dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y)), block_idx, block, grid, t};
    f.stack = take_stack(static_cast<std::size_t>(t));
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.base;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_entry, 0);
}

void run_block(Grid& g, dim3 grid, dim3 block, dim3 block_idx) {
    const int n = static_cast<int>(block.x * block.y * block.z);
    g.block_idx = block_idx;
    std::fill(g.dynamic_smem.begin(), g.dynamic_smem.end(), 0xFF);  // NaN bytes: uninitialised reads show
    for (int t = 0; t < n; ++t) start_fiber(g, t, grid, block, block_idx);
    const unsigned linear_block = block_idx.x + grid.x * (block_idx.y + grid.y * block_idx.z);
    const bool reverse = linear_block % 2 == 1;
    for (;;) {
        bool any_live = false;
        for (int i = 0; i < n; ++i) {
            const int t = reverse ? n - 1 - i : i;
            if (g.fibers[t].state == FiberState::runnable) resume(g, t);
            any_live |= g.fibers[t].state != FiberState::done;
        }
        if (!any_live) break;
        bool all_waiting = true;
        for (const Fiber& f : g.fibers) all_waiting &= f.state != FiberState::runnable;
        if (all_waiting) release_barriers(g);
    }
}

Grid& current_grid() {
    if (!running || running->current < 0) {
        std::fprintf(stderr, "SIMT emulation: a device builtin was used outside a kernel\n");
        std::abort();
    }
    return *running;
}

}  // namespace

ThreadPosition& position() {
    Grid& g = current_grid();
    return g.fibers[g.current].position;
}

void* dynamic_shared_memory() { return current_grid().dynamic_smem.data(); }

void require_global_address(const void* p, const char* what) {
    const std::vector<unsigned char>& smem = current_grid().dynamic_smem;
    const auto* byte = static_cast<const unsigned char*>(p);
    if (byte >= smem.data() && byte < smem.data() + smem.size()) fail(what);
}

void require_aligned(const void* p, std::size_t alignment, const char* what) {
    current_grid();
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) fail(what);
}

void sync_block() {
    current_grid();
    yield(FiberState::at_block_barrier);
}

void sync_warp() {
    current_grid();
    yield(FiberState::at_warp_barrier);
}

std::uint64_t shuffle_exchange(std::uint64_t bits, int source) {
    Grid& g = current_grid();
    const int t = g.current;
    const int warp_base = t - t % 32;
    g.lane_slots[t] = bits;
    yield(FiberState::at_warp_barrier);  // every lane has written
    const int src = warp_base + source;
    if (src >= static_cast<int>(g.fibers.size()) || g.fibers[src].state == FiberState::done)
        fail("a shuffle read a lane that does not exist or has exited");
    const std::uint64_t result = g.lane_slots[src];
    yield(FiberState::at_warp_barrier);  // every lane has read
    return result;
}

std::string kernel_base_name(const char* expression) {
    std::string name;
    int depth = 0;
    for (const char* c = expression; *c; ++c) {
        if (*c == '<')
            ++depth;
        else if (*c == '>')
            --depth;
        else if (depth == 0 && *c != ' ' && *c != '(' && *c != ')')
            name += *c;
    }
    return name;
}

void run_grid(const char* kernel_name, dim3 grid, dim3 block, std::size_t dynamic_smem, LaunchBody body,
              void* closure) {
    if (running) {
        std::fprintf(stderr, "SIMT emulation: kernel %s launched from inside a kernel\n", kernel_name);
        std::abort();
    }
    const unsigned threads = block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535) {
        std::fprintf(stderr, "SIMT emulation: kernel %s launched with grid (%u,%u,%u) block (%u,%u,%u): invalid\n",
                     kernel_name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        std::abort();
    }
    unsigned& most_threads = launched()[kernel_base_name(kernel_name)];
    most_threads = std::max(most_threads, threads);
    Grid g;
    g.name = kernel_name;
    g.body = body;
    g.closure = closure;
    g.fibers.resize(threads);
    g.lane_slots.assign((threads + 31) / 32 * 32, 0);
    g.dynamic_smem.assign(dynamic_smem + 16, 0);
    running = &g;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) run_block(g, grid, block, dim3(x, y, z));
    running = nullptr;
}

}  // namespace simt
