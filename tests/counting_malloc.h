// Include in exactly one source file of a test executable: replaces malloc & co. with wrappers
// around glibc's allocator that count every call, so a test can assert that code makes no heap
// allocation (operator new, Eigen and libgomp all go through malloc). Under AddressSanitizer,
// which owns malloc itself, nothing is replaced and ADACC_COUNT_ALLOCATIONS is 0 (tests skip).
#pragma once

#include <atomic>
#include <cstddef>

#if defined(ADACC_TESTS_SANITIZED) || defined(__SANITIZE_ADDRESS__)
#define ADACC_COUNT_ALLOCATIONS 0
#else
#define ADACC_COUNT_ALLOCATIONS 1
#endif

namespace adacc::test {
inline std::atomic<long> g_allocations{0};
}

#if ADACC_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);

void* malloc(std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
    adacc::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
    *out = __libc_memalign(alignment, n);
    return *out ? 0 : 12;  // ENOMEM
}
}
#endif
