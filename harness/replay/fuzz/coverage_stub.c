/* coldstart: the no-op coverage hook for binaries other than scenario_fuzz that link cs_scenario
 * while it is compiled with -fsanitize-coverage=trace-pc (the fuzz build: CMakeLists.txt here).
 * Weak: scenario_fuzz's own hook (fuzz_driver.cpp) wins. C, so the CXX-only coverage flag does not
 * instrument the hook itself. */
__attribute__((weak)) void __sanitizer_cov_trace_pc(void) {}
