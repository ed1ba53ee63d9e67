# The CUDA kernels' tests (included from the top-level CMakeLists.txt when the CUDA backend is
# built). The same tests/cuda/test_*.cpp build twice:
#   test_cuda_emulated: kernels/cuda/*.cu and src/cuda/cuda_backend.cpp compiled by the host
#     compiler against the SIMT emulation (tests/simt/), so every kernel runs in CI without a GPU
#     (and under ASan in the sanitizer build);
#   test_cuda_device: the same tests against the real CUDA backend (ctest label `cuda`); each test
#     skips with a message when the machine has no GPU.

# The emulated library: each .cu is #included from a generated .cpp, so the same source file is
# compiled as CUDA for adacc_cuda and as C++ here.
set(ADACC_SIMT_SOURCES
  ${CMAKE_SOURCE_DIR}/tests/simt/simt_scheduler.cpp
  ${CMAKE_SOURCE_DIR}/tests/simt/simt_runtime.cpp
  ${CMAKE_SOURCE_DIR}/tests/simt/simt_cublaslt.cpp
  ${CMAKE_SOURCE_DIR}/src/cuda/cuda_backend.cpp
  ${CMAKE_SOURCE_DIR}/src/cuda/cudnn_unavailable.cpp)
foreach(kernel_source ${ADACC_CUDA_KERNELS})
  get_filename_component(kernel_name ${kernel_source} NAME_WE)
  set(wrapper ${CMAKE_BINARY_DIR}/simt/${kernel_name}.cu.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "#include \"${kernel_source}\"\n")
  list(APPEND ADACC_SIMT_SOURCES ${wrapper})
  if(ADACC_KERNEL_OPTIMIZATION)
    set_source_files_properties(${wrapper} PROPERTIES COMPILE_OPTIONS ${ADACC_KERNEL_OPTIMIZATION})
  endif()
endforeach()
add_library(adacc_cuda_emulated STATIC ${ADACC_SIMT_SOURCES})
target_include_directories(adacc_cuda_emulated PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/tests
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(adacc_cuda_emulated PUBLIC ADACC_SIMT_EMULATION)
# cuDNN's kernels cannot run on the emulation: its attention is never offered there.
target_compile_definitions(adacc_cuda_emulated PRIVATE
  "ADACC_CUDNN_UNAVAILABLE=\"the SIMT emulation cannot run cuDNN (its kernels are binaries for the GPU)\"")
# Kernel code written for nvcc: unused-variable noise from the toolkit headers is not ours.
target_compile_options(adacc_cuda_emulated PRIVATE -Wno-unused-function)
target_link_libraries(adacc_cuda_emulated PUBLIC OpenMP::OpenMP_CXX)

# The adacc command on the emulated backend, for tests that run it as users do (mpirun -np 2 adacc
# train --device cuda: tests/cuda/test_cuda_distributed.cpp).
add_executable(adacc_emulated ${CMAKE_SOURCE_DIR}/src/cli/main.cpp)
adacc_link_engine(adacc_emulated adacc_cuda_emulated)

# bench_gpu on the emulated backend, so that every table it prints (the per-op ones in a compressed
# mode too) runs in CI at a tiny preset (tests/cuda/test_cuda_bench_gpu.cpp); its times there are
# the emulation's, nothing to read. Not in a build without benchmarks (the sanitized one).
if(ADACC_BUILD_BENCHMARKS)
  add_executable(bench_gpu_emulated ${CMAKE_SOURCE_DIR}/benchmarks/bench_gpu.cpp)
  adacc_link_engine(bench_gpu_emulated adacc_cuda_emulated)
endif()

file(GLOB ADACC_CUDA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/test_*.cpp)
set(ADACC_CUDA_TEST_SUPPORT ${CMAKE_SOURCE_DIR}/tests/cuda/cuda_test_support.cpp $<TARGET_OBJECTS:adacc_test_support>)

add_executable(test_cuda_emulated ${ADACC_CUDA_TESTS} ${ADACC_CUDA_TEST_SUPPORT})
target_compile_options(test_cuda_emulated PRIVATE ${ADACC_TEST_OPTIMIZATION})
set_target_properties(test_cuda_emulated PROPERTIES ADACC_TEST_CODE ON)
adacc_link_engine(test_cuda_emulated adacc_cuda_emulated)
target_link_libraries(test_cuda_emulated PRIVATE GTest::gtest GTest::gtest_main)
target_compile_definitions(test_cuda_emulated PRIVATE ADACC_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  ADACC_BINARY="$<TARGET_FILE:adacc>" ADACC_CUDA_BINARY="$<TARGET_FILE:adacc_emulated>")
add_dependencies(test_cuda_emulated adacc_emulated)
if(TARGET bench_gpu_emulated)
  target_compile_definitions(test_cuda_emulated PRIVATE ADACC_BENCH_GPU_BINARY="$<TARGET_FILE:bench_gpu_emulated>")
  add_dependencies(test_cuda_emulated bench_gpu_emulated)
endif()
gtest_discover_tests(test_cuda_emulated DISCOVERY_TIMEOUT 60 TEST_PREFIX "emulated."
  PROPERTIES TIMEOUT 900 LABELS "cuda_emulated" ENVIRONMENT "OMP_WAIT_POLICY=passive")

if(TARGET adacc_cuda)
  add_executable(test_cuda_device ${ADACC_CUDA_TESTS} ${ADACC_CUDA_TEST_SUPPORT})
  target_compile_options(test_cuda_device PRIVATE ${ADACC_TEST_OPTIMIZATION})
  target_include_directories(test_cuda_device PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  adacc_link_engine(test_cuda_device adacc_cuda)
  target_link_libraries(test_cuda_device PRIVATE GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_cuda_device PRIVATE ADACC_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    ADACC_BINARY="$<TARGET_FILE:adacc>" ADACC_CUDA_BINARY="$<TARGET_FILE:adacc>")
  gtest_discover_tests(test_cuda_device DISCOVERY_TIMEOUT 60 TEST_PREFIX "device."
    PROPERTIES TIMEOUT 900 LABELS "cuda" ENVIRONMENT "OMP_WAIT_POLICY=passive")
endif()
