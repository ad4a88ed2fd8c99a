# cs_add_test(<name> SOURCES <files...> LIBS <targets...> [E2E]): a GoogleTest binary, discovered
# into CTest one test at a time. A parameterized test's CTest name is its GoogleTest name
# (NO_PRETTY_VALUES), e.g. Shapes/DeepGemmGpu.Fp8GemmNtMatchesReference/M1_N1536_K4096_wgmma:
# every INSTANTIATE_TEST_SUITE_P names its cases and every parameter type has a PrintTo.
#
# CTest labels, one of the first four on every test (pick with `ctest -L` / `-LE`):
#   unit      host tests (some compile a small kernel with NVRTC on the way);
#   compile   NVRTC compile cases: GoogleTest suites named *CompileOnly*, KernelCompile, Nvrtc*;
#   gpu       tests that need a CUDA GPU (skipped, never passed, without one): suites named *Gpu*.
#             CS_REQUIRE_GPU (harness/kernels/test_util.h) fails a test whose suite name lacks
#             "Gpu", so a GPU test cannot miss the label. Built without libtorch's CUDA backend,
#             a binary's GPU tests are one CTest entry, <binary>.gpu_tests, that skips;
#   e2e       every test of a binary added with E2E (it runs the coldstart command);
#   sanitize  added to the binaries in COLDSTART_SANITIZE_TESTS (the ASan tree runs `-L sanitize`).
#
# Threads: each test process would start one libtorch CPU thread per core for its references
# (8 parallel GPU tests on 16 cores: 128 threads, a suite of over 10 minutes instead of 3). Every
# test runs with OMP_NUM_THREADS / MKL_NUM_THREADS = 1 except GPU tests in a CUDA build, which get
# COLDSTART_GPU_TEST_THREADS (default 2) and declare them to CTest (PROCESSORS), so `ctest -j C`
# on C cores runs about C threads. GPU tests that time the GPU (suites matching
# COLDSTART_GPU_EXCLUSIVE_TESTS, the autotuner's benchmark) run alone (RUN_SERIAL).
#
# gtest_discover_tests (CMake 3.25) writes a list-valued property (LABELS, ENVIRONMENT) as
# separate words, so the properties are set by a small CTest script included after each
# discovery, from the test lists the discovery defines.
set(COLDSTART_GPU_TEST_THREADS 2 CACHE STRING "libtorch CPU threads of each GPU test process")
# GoogleTest filter of the GPU tests that run alone (they benchmark the GPU).
set(COLDSTART_GPU_EXCLUSIVE_TESTS "*GpuAutotune*.*")

# Filters name suites: "Suite.Test" and "Prefix/Suite.Test/param" carry no '.' after the suite's,
# so "*Gpu*.*" matches suites named *Gpu* and never ScenarioFiles.NumGpuBlocks.
set(CS_GPU_SUITES "*Gpu*.*")
set(CS_COMPILE_SUITES "*CompileOnly*.*:KernelCompile.*:*/KernelCompile.*:Nvrtc*.*:*/Nvrtc*.*")

function(cs_add_test name)
  if(NOT COLDSTART_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "E2E" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  # Test code itself at -O1 in optimized builds (the harness libraries stay at the build type's
  # level): the test translation units compile ~20-45% faster on the 2-core CI machine, and what
  # they spend their time in (libtorch, NVRTC, the harness) is unaffected. -O1, not -O0, so the
  # precompiled ATen header (built optimized) still applies.
  target_compile_options(${name} PRIVATE $<$<OR:$<CONFIG:Release>,$<CONFIG:RelWithDebInfo>>:-O1>)

  set(common_env "COLDSTART_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  set(extra_labels "")
  if(name IN_LIST COLDSTART_SANITIZE_TESTS)
    list(APPEND extra_labels sanitize)
  endif()
  set(env_mod "")
  if(COLDSTART_SANITIZE AND name STREQUAL "isolate_test")
    # Its child crashes on purpose: a null store must reach the parent as SIGSEGV, not as ASan's
    # report and exit code 1 (UBSan is off in the child: see CMakeLists.txt).
    set(env_mod "ASAN_OPTIONS=string_append::handle_segv=0")
  endif()
  set(gpu_threads 1)
  if(COLDSTART_WITH_CUDA)
    set(gpu_threads ${COLDSTART_GPU_TEST_THREADS})
  endif()

  # kind | GoogleTest filter | threads | extra properties
  if(T_E2E)
    set(kinds e2e)
    set(filter_e2e "*")
  else()
    set(kinds gpu_exclusive gpu compile unit)
    set(filter_gpu_exclusive "${COLDSTART_GPU_EXCLUSIVE_TESTS}")
    set(filter_gpu "${CS_GPU_SUITES}-${COLDSTART_GPU_EXCLUSIVE_TESTS}")
    set(filter_compile "${CS_COMPILE_SUITES}-${CS_GPU_SUITES}")
    set(filter_unit "-${CS_GPU_SUITES}:${CS_COMPILE_SUITES}")
  endif()

  # Without libtorch's CUDA backend no GPU test can ever run: one CTest entry per binary runs
  # all of its GPU tests, each of which skips with its reason (CTest reports the entry skipped,
  # never passed), instead of one process per case (241 processes, ~100 s of the 2-core CI).
  # Only binaries whose sources define a *Gpu* suite get the entry, so none runs zero tests.
  if(NOT T_E2E AND NOT COLDSTART_WITH_CUDA)
    set(has_gpu_suite FALSE)
    foreach(src ${T_SOURCES})
      get_filename_component(src_path "${src}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
      file(STRINGS "${src_path}" gpu_lines
           REGEX "^[ \t]*TEST(_P|_F)?\\([ \t]*[A-Za-z0-9_]*Gpu[A-Za-z0-9_]*,")
      if(gpu_lines)
        set(has_gpu_suite TRUE)
      endif()
    endforeach()
    list(REMOVE_ITEM kinds gpu_exclusive gpu)
    if(has_gpu_suite)
      add_test(NAME ${name}.gpu_tests COMMAND ${name} "--gtest_filter=${CS_GPU_SUITES}")
      set_tests_properties(${name}.gpu_tests PROPERTIES LABELS "gpu;${extra_labels}"
        SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
        ENVIRONMENT "${common_env};OMP_NUM_THREADS=1;MKL_NUM_THREADS=1")
    endif()
  endif()

  set(script "${CMAKE_CURRENT_BINARY_DIR}/${name}_properties.cmake")
  set(body "# Generated by cs_add_test (cmake/Testing.cmake): labels, environment, threads.\n")
  foreach(kind ${kinds})
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES
                         TEST_FILTER "${filter_${kind}}" TEST_LIST "cs_${name}_${kind}")
    set(label ${kind})
    set(threads 1)
    set(more "")
    if(kind STREQUAL "gpu_exclusive")
      set(label gpu)
      set(threads ${gpu_threads})
      set(more "RUN_SERIAL TRUE")
    elseif(kind STREQUAL "gpu")
      set(threads ${gpu_threads})
    endif()
    set(labels ${label} ${extra_labels})
    set(env ${common_env} "OMP_NUM_THREADS=${threads}" "MKL_NUM_THREADS=${threads}")
    if(kind STREQUAL "e2e")
      # The e2e tests' compile-only replays share one compile memo (NVRTC output is a function
      # of the compile key), so a kernel the suite already compiled is not compiled again.
      list(APPEND env "COLDSTART_COMPILE_MEMO_DIR=${CMAKE_BINARY_DIR}/test-compile-memo")
      # Started first (CTest runs high-cost tests first when it has no timings of its own): a
      # compile-only replay of a large scenario takes minutes alone, and one started last left
      # a core idle at the end of the run.
      set(more "COST 1000")
    endif()
    set(mod "")
    if(env_mod)
      set(mod "ENVIRONMENT_MODIFICATION [==[${env_mod}]==]")
    endif()
    string(APPEND body
      "if(cs_${name}_${kind})\n"
      "  set_tests_properties(\${cs_${name}_${kind}} PROPERTIES LABELS [==[${labels}]==]\n"
      "    ENVIRONMENT [==[${env}]==] PROCESSORS ${threads} ${more} ${mod})\n"
      "endif()\n")
  endforeach()
  file(WRITE "${script}" "${body}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
