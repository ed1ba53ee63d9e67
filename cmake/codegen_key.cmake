# adacc_codegen_key(OUT FLAGS...): a key naming the code the host compiler generates for FLAGS,
# which keys the exact-bit records of tests/test_behaviour_fixture.cpp (docs/testing.md).
#
# Two builds give the same float bits only when the compiler generates the same code. The CPU's
# model name does not say that: "-march=native" on one "Intel(R) Xeon(R) Processor" enables
# AVX-512 FP16 and AMX, on another not, and vector widths and FMA contraction change the order of
# sums. So the key is the compiler's version, the -march it resolved, and a hash of what the flags
# resolve to: every target option (`-Q --help=target`: ISA extensions, tuning, preferred vector
# width) and every predefined macro (optimisation level, math flags, sanitizers). Compilers
# without `-Q --help=target` (clang) are keyed by their macros alone.
function(adacc_codegen_key out)
  set(flags ${ARGN})
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${flags} -dM -E -x c++ /dev/null
    OUTPUT_VARIABLE macros RESULT_VARIABLE macros_status ERROR_VARIABLE macros_error)
  if(NOT macros_status EQUAL 0)
    message(FATAL_ERROR "cannot list the predefined macros of ${CMAKE_CXX_COMPILER} ${flags}: ${macros_error}")
  endif()
  set(target_options "")
  set(march "")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${flags} -Q --help=target
      OUTPUT_VARIABLE target_options RESULT_VARIABLE target_status ERROR_QUIET)
    if(NOT target_status EQUAL 0)
      message(FATAL_ERROR "cannot list the target options of ${CMAKE_CXX_COMPILER} ${flags}")
    endif()
    # The resolved architecture, for a human reading the key ("-march=  rocketlake").
    if(target_options MATCHES "\n  -march=[ \t]+([^ \t\n]+)")
      set(march " -march=${CMAKE_MATCH_1}")
    endif()
  endif()
  # Sorted lines: the macro listing's order is not part of what the code is.
  string(REPLACE "\n" ";" macro_lines "${macros}")
  list(SORT macro_lines)
  string(SHA256 digest "${target_options}\n${macro_lines}")
  string(SUBSTRING "${digest}" 0 16 digest)
  set(${out} "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}${march} codegen ${digest}" PARENT_SCOPE)
endfunction()
